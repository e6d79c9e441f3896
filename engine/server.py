"""OpenAI-compatible HTTP server for one engine instance (role both, prefill or decode)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import time
import uuid

from aiohttp import web

from engine.async_engine import AsyncEngine
from engine.config import EngineConfig
from engine.connectors import puller
from engine.connectors.frame import FrameError
from engine.connectors.source import KVSource
from engine.http_app import run_app
from engine.links import LinkEmulation, parse_emulation
from engine.llm_engine import KVImportError, LLMEngine, RequestOutput
from engine.metrics import EngineMetrics
from engine.protocol import ParsedRequest, RequestError, parse_json, parse_request, tokens_request
from engine.render import chat
from engine.render.frontend import Frontend, FrontendConfig, add_frontend_args, frontend_config
from engine.tokenizer import IncrementalDetokenizer

CONNECTORS = ("shm", "tcp", "cuda")


def _error(e: RequestError) -> web.Response:
    return web.json_response(e.body(), status=e.status)


class EngineServer:
    """Routes, request handling and the KV side channel of one instance."""

    def __init__(self, config: EngineConfig, connector: str = "shm", served_model: str | None = None,
                 kv_host: str = "127.0.0.1", kv_port: int = 0,
                 link_emulation: LinkEmulation | None = None, frontend: FrontendConfig | None = None):
        if connector not in CONNECTORS:
            raise ValueError(f"connector must be one of {', '.join(CONNECTORS)}")
        if connector == "cuda" and not config.device.startswith("cuda"):
            raise ValueError("the cuda connector needs --device cuda")
        if config.role == "prefill" and connector == "shm" and config.device == "cpu":
            config = dataclasses.replace(config, kv_shared_memory=True)
        self.engine = LLMEngine(config)
        self.role, self.connector = self.engine.config.role, connector
        self.link_emulation = link_emulation
        self.model = served_model or config.model
        self.frontend = Frontend(frontend or FrontendConfig(model_dir=config.model))
        self.metrics = EngineMetrics(self.model, self.frontend)
        self.source = None
        if self.role == "prefill":
            self.source = KVSource(self.engine.lend_kv, self._release, self.engine.runner.cache,
                                   self.engine.runner.layout, kv_host, kv_port)
        self.aengine = AsyncEngine(self.engine, self.metrics.on_step)
        self.app = web.Application(client_max_size=64 << 20)
        self.app.add_routes([
            web.get("/health", self.health), web.get("/v1/models", self.models),
            web.get("/metrics", self.prometheus),
            web.post("/v1/completions", self.completions),
            web.post("/v1/chat/completions", self.chat_completions),
            web.post("/inference/v1/generate", self.generate_tokens),
        ])
        self.app.on_cleanup.append(self._close)

    async def _close(self, _app) -> None:
        if self.source:
            self.source.close()
        self.aengine.close()
        self.engine.runner.cache.close()

    def _release(self, request_id: str) -> None:  # side-channel thread
        self.aengine.submit(lambda: self.engine.release_kv(request_id))

    # ---- simple routes -------------------------------------------------------------------------
    async def health(self, _req) -> web.Response:
        return web.json_response({"status": "ok", "role": self.role})

    async def models(self, _req) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.model, "object": "model", "owned_by": "advisor",
             "max_model_len": self.engine.model_config.max_position_embeddings}]})

    async def prometheus(self, _req) -> web.Response:
        return web.Response(body=self.metrics.render(), content_type="text/plain")

    # ---- generation ----------------------------------------------------------------------------
    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self.generate(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self.generate(request, chat=True)

    async def generate_tokens(self, request: web.Request) -> web.StreamResponse:
        """Tokens in, tokens out (the engine behind a render tier): no text anywhere."""
        return await self.generate(request, chat=False, tokens_only=True)

    async def generate(self, request: web.Request, chat: bool,
                       tokens_only: bool = False) -> web.StreamResponse:
        arrival = time.monotonic()
        try:
            body = parse_json(await request.read())
            if tokens_only:
                self.frontend.check(body.get("fingerprint"), "this request")
                body = tokens_request(body, self.model)
            req = parse_request(body, chat, self.model)
            prompt = self.frontend.prompt_ids(req)
            self.engine.validate(prompt, req.params)
        except (RequestError, ValueError) as e:
            return _error(e if isinstance(e, RequestError) else RequestError(str(e)))
        kv = req.kv_transfer_params or {}
        pulled = None
        if self.role == "decode" and puller.can_pull(kv):
            try:
                pulled = await asyncio.to_thread(puller.pull, kv, self.connector,
                                                 self.engine.runner.layout, self.engine.runner.device)
                if self.link_emulation:  # NOTE: the transfer then lasts as long as on that link
                    rec = pulled.record
                    await asyncio.sleep(rec.start + self.link_emulation.transfer_seconds(rec.nbytes)
                                        - time.monotonic())
                    rec.end = max(rec.end, time.monotonic())
            except (FrameError, OSError, ValueError) as e:
                self.metrics.kv_failures.inc()
                if self.engine.config.kv_load_failure_policy == "fail":
                    return _error(RequestError(f"KV transfer failed: {e}", status=500,
                                               err_type="kv_transfer_error"))
        rid = f"{'gen' if tokens_only else 'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        stream = self.aengine.generate(prompt, req.params, rid,
                                       kv=pulled.payload if pulled else None,
                                       remote_decode=True if kv.get("do_remote_decode") else None)
        ctx = _Ctx(self, req, rid, chat, arrival, pulled, kv, len(prompt), tokens_only)
        try:
            first = await stream.__anext__()
        except (KVImportError, ValueError) as e:
            self._pulled_done(ctx)
            return _error(RequestError(str(e)))
        if req.stream:
            return await self._stream(request, ctx, first, stream)
        return await self._complete(ctx, first, stream)

    def _pulled_done(self, ctx: "_Ctx", out: RequestOutput | None = None) -> None:
        if ctx.pulled is None:
            return
        rec = ctx.pulled.record
        ctx.pulled.close(imported=out is not None)
        ctx.pulled = None
        if out is not None:
            ctx.transfer = {"seconds": rec.seconds, "bytes": rec.nbytes, "connector": rec.connector,
                            "emulated": self.link_emulation.spec if self.link_emulation else None}
            self.metrics.kv_transfer_time.observe(rec.seconds)
            self.metrics.kv_transfer_bytes.inc(rec.nbytes)
            self.metrics.kv_transfers.inc()
            if out.first_scheduled_time is not None:
                self.metrics.kv_ready_delay.observe(max(0.0, out.first_scheduled_time - rec.end))
        asyncio.get_running_loop().run_in_executor(None, puller.release, ctx.kv)

    async def _outputs(self, ctx: "_Ctx", first: RequestOutput, stream):
        """All outputs, with token-latency metrics recorded on the way."""
        self._pulled_done(ctx, first)
        last = time.monotonic()
        self.metrics.ttft.observe(last - ctx.arrival)
        yield first
        async for out in stream:
            now = time.monotonic()
            self.metrics.itl.observe(now - last)
            last = now
            yield out

    async def _complete(self, ctx: "_Ctx", first: RequestOutput, stream) -> web.Response:
        final = first
        async for out in self._outputs(ctx, first, stream):
            final = out
        self._finish_metrics(ctx, final)
        return web.json_response(ctx.body(final))

    async def _stream(self, request: web.Request, ctx: "_Ctx", first, stream) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        final = first
        try:
            async for out in self._outputs(ctx, first, stream):
                final = out
                await resp.write(_sse(ctx.chunk(out)))
            if ctx.req.include_usage:
                await resp.write(_sse(ctx.usage_chunk(final)))
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            await stream.aclose()  # aborts the request, frees its blocks
            raise
        self._finish_metrics(ctx, final)
        return resp

    def _finish_metrics(self, ctx: "_Ctx", final: RequestOutput) -> None:
        self.metrics.e2e.observe(time.monotonic() - ctx.arrival)
        self.metrics.prompt_tokens.inc(ctx.num_prompt)
        self.metrics.generation_tokens.inc(len(final.token_ids))


def _sse(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


class _Ctx:
    """Per-request response building (OpenAI shapes)."""

    def __init__(self, server: EngineServer, req: ParsedRequest, rid: str, chat: bool,
                 arrival: float, pulled, kv: dict, num_prompt: int, tokens_only: bool = False):
        self.server, self.req, self.rid, self.chat = server, req, rid, chat
        self.tokens_only = tokens_only
        self.arrival, self.pulled, self.kv, self.num_prompt = arrival, pulled, kv, num_prompt
        self.created = int(time.time())
        self.obj = "chat.completion" if chat else "text_completion"
        fe = server.frontend
        # streaming state: the chat derender's, or the completions detokenizer
        self.state = fe.start_stream(rid, req) if chat and req.stream else None
        self.detok = IncrementalDetokenizer(fe.tokenizer) if req.stream and not chat else None
        # the pulled KV's transfer, reported once (first chunk) so clients can see it per request
        self.transfer: dict | None = None

    def _usage(self, out: RequestOutput) -> dict:
        n = len(out.token_ids)
        return {"prompt_tokens": self.num_prompt, "completion_tokens": n,
                "total_tokens": self.num_prompt + n,
                "prompt_tokens_details": {"cached_tokens": out.num_cached_tokens}}

    def _finish_reason(self, out: RequestOutput, tool_calls: bool = False) -> str | None:
        return chat.finish_reason(out.finish_reason if out.finished else None, tool_calls)

    def _tokens(self, ids: list[int], out: RequestOutput, final: bool) -> dict:
        body = {"request_id": self.rid, "token_ids": ids, "finish_reason": self._finish_reason(out),
                "fingerprint": self.server.frontend.fingerprint}
        if final:
            body["usage"] = self._usage(out)
            self._add_held_kv(body, out)
        self._add_transfer(body)
        return body

    def _add_held_kv(self, body: dict, out: RequestOutput) -> None:
        if out.finish_reason == "remote_decode" and self.server.source is not None:
            held = self.server.engine.held.get(self.rid)
            blocks = list(held.request.block_ids) if held else []
            body["kv_transfer_params"] = self.server.source.transfer_params(self.rid, blocks)

    def body(self, out: RequestOutput) -> dict:
        if self.tokens_only:
            return self._tokens(out.token_ids, out, final=True)
        fe = self.server.frontend
        choice = {"index": 0, "token_ids": out.token_ids}
        if self.chat:
            parsed = fe.derender(self.rid, out.token_ids, self.req)
            choice.update(message=chat.message(parsed),
                          finish_reason=self._finish_reason(out, bool(parsed.tool_calls)))
        else:
            with fe.timed("derender", request_done=True):
                choice.update(text=fe.tokenizer.decode(out.token_ids),
                              finish_reason=self._finish_reason(out))
        body = {"id": self.rid, "object": self.obj, "created": self.created,
                "model": self.server.model, "choices": [choice], "usage": self._usage(out)}
        self._add_transfer(body)
        self._add_held_kv(body, out)
        return body

    def chunk(self, out: RequestOutput) -> dict:
        if self.tokens_only:
            return self._tokens(out.new_token_ids, out, final=False)
        fe = self.server.frontend
        choice = {"index": 0, "token_ids": out.new_token_ids}
        if self.chat:
            first, before = self.state.num_tokens == 0, self.state.parser["num_tool_calls"]
            parsed, self.state = fe.derender_chunk(self.state, self.rid, out.new_token_ids,
                                                   out.finished)
            choice.update(delta=chat.delta(parsed, first, before), finish_reason=self._finish_reason(
                out, self.state.parser["num_tool_calls"] > 0))
        else:
            with fe.timed("derender", request_done=out.finished):
                text = self.detok.feed(out.new_token_ids)
                if out.finished and self.detok.pending:  # the output ends mid-character
                    text += fe.tokenizer.decode(self.detok.pending)
            choice.update(text=text, finish_reason=self._finish_reason(out))
        body = {"id": self.rid, "object": f"{self.obj}.chunk" if self.chat else self.obj,
                "created": self.created, "model": self.server.model, "choices": [choice]}
        self._add_transfer(body)
        return body

    def _add_transfer(self, body: dict) -> None:
        if self.transfer is not None:
            body["kv_transfer"], self.transfer = self.transfer, None

    def usage_chunk(self, out: RequestOutput) -> dict:
        return {"id": self.rid, "object": f"{self.obj}.chunk" if self.chat else self.obj,
                "created": self.created, "model": self.server.model, "choices": [],
                "usage": self._usage(out)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Run one engine instance as an OpenAI-compatible server.")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--role", default="both", choices=["both", "prefill", "decode"])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8100)
    ap.add_argument("--kv-port", type=int, default=0, help="side-channel port of a prefill instance")
    ap.add_argument("--connector", default="shm", choices=CONNECTORS)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--num-threads", type=int, default=1)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--max-num-batched-tokens", type=int, default=2048)
    ap.add_argument("--kv-lease-duration", type=float, default=30.0)
    ap.add_argument("--kv-load-failure-policy", default="fail", choices=["fail", "recompute"])
    ap.add_argument("--kv-link-emulation", default=None,
                    help="decode: make each KV transfer take as long as on a slower link "
                         "(1.3s per transfer, or a rate such as 1GBps); for experiments")
    add_frontend_args(ap)
    a = ap.parse_args(argv)
    cfg = EngineConfig(model=a.model, seed=a.seed, device=a.device, dtype=a.dtype, role=a.role,
                       block_size=a.block_size, max_num_batched_tokens=a.max_num_batched_tokens,
                       num_threads=a.num_threads, kv_lease_duration=a.kv_lease_duration,
                       kv_load_failure_policy=a.kv_load_failure_policy)
    try:
        emulation = parse_emulation(a.kv_link_emulation) if a.kv_link_emulation else None
        server = EngineServer(cfg, a.connector, kv_host=a.host, kv_port=a.kv_port,
                              link_emulation=emulation, frontend=frontend_config(a))
    except (ValueError, OSError) as e:
        raise SystemExit(f"engine.server: {e}") from None
    try:
        asyncio.run(run_app(server.app, a.host, a.port, f"engine {server.role}"))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
