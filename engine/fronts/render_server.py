"""The render tier: a CPU web service that turns chat requests into token IDs
(`/v1/chat/completions/render`) and generated token IDs back into chat completions
(`/v1/chat/completions/derender`; streaming, one `generate_chunk` in and `{"chunk",
"stream_state"}` out, the state travelling with the client, as vLLM's render servers
answer), for an engine serving tokens only. No model, no torch; `--workers N` runs N
processes behind one port (engine.processes.workers).

    python -m engine.fronts.render_server --port 8200 [--workers 2]"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import generate_latest

from engine.core.config import DEFAULT_BODY_BYTES, load_model_config, max_body_bytes
from engine.processes.workers import Board, serve_workers
from engine.render.derender import DerenderError, StreamState, check_ids
from engine.render.frontend import (
    STAGES,
    Frontend,
    FrontendConfig,
    add_frontend_args,
    frontend_config,
)
from engine.render.protocol import (
    ParsedRequest,
    RequestError,
    parse_json,
    parse_request,
    sampling_body,
)
from engine.serve.http_app import (
    OFFLOAD_BYTES,
    add_api_key_flag,
    application,
    health,
    run_app,
    server_key,
)
from engine.serve.metrics import frontend_registry

# a worker's counters on the shared board: CPU seconds and requests per stage, its process CPU
BOARD_FIELDS = (*(f"{st}_s" for st in STAGES), *(f"{st}_n" for st in STAGES), "process_s")


class RenderServer:
    """Routes of one render replica; with `workers` > 1, of one of its worker processes
    (`worker` says which), its /metrics summing all of them."""

    def __init__(self, config: FrontendConfig, served_model: str, workers: int = 1) -> None:
        self.frontend, self.model = Frontend(config), served_model
        self.worker, self.board = 0, Board(workers, BOARD_FIELDS) if workers > 1 else None
        if self.board is None:
            self.registry = frontend_registry(self.frontend, served_model)
        else:
            board = self.board
            self.registry = frontend_registry(_BoardTotals(board), served_model,
                                              process_cpu=lambda: board.total("process_s"))
        self.app = application(_max_body(served_model),
                               *([self._publishing] if self.board else []))
        self.app.add_routes([
            web.get("/health", self.health), web.get("/v1/models", self.models),
            web.get("/metrics", self.prometheus),
            web.post("/v1/chat/completions/render", self.render),
            web.post("/v1/chat/completions/derender", self.derender),
        ])

    async def health(self, request: web.Request) -> web.Response:
        worker = {"worker": self.worker, "pid": os.getpid()} if self.board else {}
        return health(request, role="render", fingerprint=self.frontend.fingerprint, **worker)

    async def models(self, _req: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.model, "object": "model", "owned_by": "advisor",
             "fingerprint": self.frontend.fingerprint}]})

    async def prometheus(self, _req: web.Request) -> web.Response:
        if self.board:
            self._publish()
        return web.Response(body=generate_latest(self.registry), content_type="text/plain")

    @web.middleware
    async def _publishing(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        finally:
            self._publish()

    def _publish(self) -> None:
        """This worker's counters onto the board (after every request: a scrape by any
        worker then sees them)."""
        f = self.frontend
        assert self.board is not None  # published only with workers (__init__)
        self.board.publish(self.worker, {
            **{f"{st}_s": f.cpu_seconds[st] for st in STAGES},
            **{f"{st}_n": f.requests[st] for st in STAGES},
            "process_s": time.process_time(),
        })

    async def render(self, request: web.Request) -> web.Response:
        return await _answer(self._rendered, await request.read())

    async def derender(self, request: web.Request) -> web.Response:
        return await _answer(self._derendered, await request.read())

    def _rendered(self, raw: bytes) -> dict[str, Any]:
        req = parse_request(parse_json(raw), True, self.model)
        ids = self.frontend.prompt_ids(req)
        out = {"model": self.model, "token_ids": ids, "sampling_params": sampling_body(req.params),
               "stream": req.stream, "fingerprint": self.frontend.fingerprint}
        if req.kv_transfer_params is not None:
            out["kv_transfer_params"] = req.kv_transfer_params
        return out

    def _derendered(self, raw: bytes) -> dict[str, Any]:
        try:
            body = parse_json(raw)
            chat_req = body.get("chat_request")
            if chat_req is not None:
                if not isinstance(chat_req, dict):
                    raise RequestError("'chat_request' must be the chat request object",
                                       "chat_request")
                chat_req = parse_request(chat_req, True, self.model)
            if "generate_chunk" in body:
                return self._chunk(body, chat_req)
            if "generate_response" in body:
                return self._whole(body, chat_req)
            raise RequestError("derender needs 'generate_response' or, streaming, 'generate_chunk'")
        except DerenderError as e:
            raise RequestError(str(e)) from None

    def _whole(self, body: dict[str, Any], chat_req: ParsedRequest | None) -> dict[str, Any]:
        gen = _object(body, "generate_response")
        self.frontend.check(gen.get("fingerprint"), "generate_response")
        rid = _request_id(gen)
        ids = check_ids(self.frontend.vocab_size, gen.get("token_ids"))
        msg, reason = self.frontend.chat_whole(
            rid, ids, chat_req, gen.get("finish_reason") or "stop"
        )
        return {
            "id": rid,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "usage": _usage(body, gen, len(ids)),
            "choices": [{"index": 0, "message": msg, "finish_reason": reason, "token_ids": ids}],
        }

    def _chunk(self, body: dict[str, Any], chat_req: ParsedRequest | None) -> dict[str, Any]:
        gen = _object(body, "generate_chunk")
        self.frontend.check(gen.get("fingerprint"), "generate_chunk")
        rid = _request_id(gen)
        state = body.get("stream_state")
        state = (
            self.frontend.start_stream(rid, chat_req)
            if state is None
            else StreamState.from_json(state)
        )
        delta, reason, state = self.frontend.chat_chunk(
            state, rid, check_ids(self.frontend.vocab_size, gen.get("token_ids")),
            gen.get("finish_reason")
        )
        chunk = {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "delta": delta,
                    "finish_reason": reason,
                    "token_ids": gen.get("token_ids"),
                }
            ],
        }
        if gen.get("finish_reason") is not None and "prompt_tokens" in body:
            chunk["usage"] = _usage(body, gen, state.num_tokens)
        return {"chunk": chunk, "stream_state": state.to_json()}


def _max_body(model: str) -> int:
    """The largest body a request for `model` can need (a derender carries a chat request and
    generated IDs: a body passed on); DEFAULT_BODY_BYTES for a name with no config here."""
    try:
        return max_body_bytes(load_model_config(model).max_position_embeddings, passed_on=True)
    except (ValueError, OSError):
        return DEFAULT_BODY_BYTES


class _BoardTotals:
    """A front end's counters as FrontendCollector reads them, summed over the workers."""

    def __init__(self, board: Board) -> None:
        self.board = board

    @property
    def cpu_seconds(self) -> dict[str, float]:
        return {st: self.board.total(f"{st}_s") for st in STAGES}

    @property
    def requests(self) -> dict[str, int]:
        return {st: round(self.board.total(f"{st}_n")) for st in STAGES}


async def _answer(work: Callable[[bytes], dict[str, Any]], raw: bytes) -> web.Response:
    """`work(raw)` as JSON, or the 4xx of what it refused (a ValueError of the chat template's
    is a 400, as an engine answers it); a large body's on a worker thread, so that /health
    keeps answering meanwhile."""
    try:
        out = await asyncio.to_thread(work, raw) if len(raw) > OFFLOAD_BYTES else work(raw)
    except (RequestError, ValueError) as e:  # ValueError: what rendering refuses, as engines do
        err = e if isinstance(e, RequestError) else RequestError(str(e))
        return web.json_response(err.body(), status=err.status)
    return web.json_response(out)


def _object(body: dict[str, Any], key: str) -> dict[str, Any]:
    value = body[key]
    if not isinstance(value, dict):
        raise RequestError(f"'{key}' must be an object", key)
    return value


def _request_id(gen: dict[str, Any]) -> str:
    rid = gen.get("request_id", f"gen-{uuid.uuid4().hex}")
    if not isinstance(rid, str):
        raise RequestError("'request_id' must be a string", "request_id")
    return rid


def _usage(body: dict[str, Any], gen: dict[str, Any], completion: int) -> dict[str, Any]:
    """Usage from `prompt_tokens` (a count or the IDs), else the generate response's own."""
    prompt = body.get("prompt_tokens")
    if isinstance(prompt, list):
        prompt = len(prompt)
    if prompt is None:
        prompt = (gen.get("usage") or {}).get("prompt_tokens")
    if not isinstance(prompt, int) or isinstance(prompt, bool) or prompt < 0:
        raise RequestError(
            "'prompt_tokens' must be a count or the prompt's token IDs", "prompt_tokens"
        )
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Run a render-tier server (no model, CPU only).")
    ap.add_argument(
        "--model",
        default="small",
        help="served model name; a local HF directory also gives the tokenizer",
    )
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8200)
    ap.add_argument("--workers", "--renderer-num-workers", type=int, default=1,
                    help="processes serving the port (each about one core)")
    add_frontend_args(ap)
    add_api_key_flag(ap)
    a = ap.parse_args(argv)
    if a.workers < 1:
        ap.error(f"--workers must be >= 1, not {a.workers}")
    # NOTE: a worker is a core: the tokenizer's thread pool would only contend with the other
    # workers, and must not be inherited by forked ones
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        server = RenderServer(frontend_config(a), a.model, a.workers)
    except (ValueError, OSError) as e:
        raise SystemExit(f"engine.fronts.render_server: {e}") from None
    key = server_key(a)

    def run_worker(index: int, sock: socket.socket | None = None) -> None:
        server.worker = index
        asyncio.run(run_app(server.app, a.host, a.port, f"render worker {index}", key, sock))

    if a.workers > 1:
        serve_workers(a.workers, a.host, a.port, run_worker)
        return
    with contextlib.suppress(KeyboardInterrupt):
        run_worker(0)


if __name__ == "__main__":
    main()
