"""OpenAI-compatible HTTP server for one engine instance (role both, prefill or decode)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
import traceback
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from aiohttp import web

from engine.core import deployment
from engine.core.config import EngineConfig, max_body_bytes
from engine.core.llm_engine import KVImportError, LLMEngine, RequestOutput
from engine.kv import connector, connectors
from engine.kv.links import LinkEmulation, parse_emulation
from engine.kv.source import KVSource
from engine.model.runner import ModelRunner, resolve_config
from engine.render.frontend import Frontend, FrontendConfig, frontend_config
from engine.render.protocol import (
    ParsedRequest,
    RequestError,
    parse_json,
    parse_request,
    tokens_request,
)
from engine.serve import conversations, vllm_args
from engine.serve.async_engine import AsyncEngine
from engine.serve.http_app import OFFLOAD_BYTES, application, health, run_app, server_key
from engine.serve.kv_legs import DecodeLegs
from engine.serve.metrics import EngineMetrics
from engine.serve.responses import RequestContext, Responder
from engine.serve.server_args import PULL_HOSTS, engine_config, parser
from engine.serve.sse import DONE, event


def _error(e: RequestError) -> web.Response:
    return web.json_response(e.body(), status=e.status)


class EngineServer:
    """Routes, request handling and the KV side channel of one instance."""

    def __init__(
        self,
        config: EngineConfig,
        connector: str = "shm",
        served_model: str | None = None,
        kv_host: str = "127.0.0.1",
        kv_port: int = 0,
        link_emulation: LinkEmulation | None = None,
        frontend: FrontendConfig | None = None,
        pull_hosts: tuple[str, ...] = PULL_HOSTS,
    ) -> None:
        self.deployment = deployment.current()  # None: a server started by hand
        self.connector = connectors.get(connector, link_emulation)
        self.pull_hosts = pull_hosts  # the side channels a decoder may pull from
        if connector == "cuda" and not config.device.startswith("cuda"):
            raise ValueError("the cuda connector needs --device cuda")
        # NOTE: a source of KV keeps its cache in shared memory, where the shm connector's
        # peers read it in place
        source = config.role == "prefill" or (config.role == "decode" and config.keep_conversations)
        if source and connector == "shm" and config.device == "cpu":
            config = dataclasses.replace(config, kv_shared_memory=True)
        config = resolve_config(config)
        self.runner = ModelRunner(config)  # the model, its KV cache and its device
        self.engine = LLMEngine(config, self.runner)
        self.role = self.engine.config.role
        self.model = served_model or config.model
        self.frontend = Frontend(frontend or FrontendConfig(model_dir=config.model))
        self.metrics = EngineMetrics(self.model, self.frontend)
        pool = self.engine.block_manager
        # NOTE: read from the event loop while the engine thread runs: an int, read whole
        self.metrics.watch_pool(lambda: pool.num_free_blocks, pool.num_blocks,
                                lambda: self.engine.held.expired_total)
        self.legs = DecodeLegs(self.connector, self.runner, self.metrics, pull_hosts,
                               self.engine.config.kv_load_failure_policy, self.deployment)
        self.source = None
        if source:
            self.source = KVSource(self.engine.lend_kv, self._release, self.runner.cache,
                                   self.runner.layout, kv_host, kv_port, self.deployment)
        self.aengine = AsyncEngine(self.engine, self.metrics.on_step)
        self.responder = Responder(self.frontend, self.model, self._held_kv_params)
        self.app = application(max_body_bytes(self.engine.max_model_len, passed_on=True))
        self.app.add_routes(
            [
                web.get("/health", self.health),
                web.get("/v1/models", self.models),
                web.get("/metrics", self.prometheus),
                web.post("/v1/completions", self.completions),
                web.post("/v1/chat/completions", self.chat_completions),
                web.post("/inference/v1/generate", self.generate_tokens),
            ]
        )
        self.app.on_cleanup.append(self._close)

    async def _close(self, _app: web.Application) -> None:
        if self.source:
            self.source.close()
        self.aengine.close()
        self.runner.cache.close()

    def _held_kv_params(self, request_id: str) -> dict[str, Any] | None:
        """kv_transfer_params naming the blocks this prefiller holds for `request_id`."""
        if self.source is None:
            return None
        held = self.engine.held.get(request_id)
        return self.source.transfer_params(request_id, list(held.block_ids) if held else [])

    def _release(self, request_id: str) -> None:  # side-channel thread
        self.aengine.submit(lambda: self.engine.release_kv(request_id))

    # ---- simple routes -------------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        """Up; asked `?proof=NONCE` inside a deployment, also the proof of being one of its
        instances (a process that took a dead instance's port cannot give it)."""
        return health(request, role=self.role)

    async def models(self, _req: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model,
                        "object": "model",
                        "owned_by": "advisor",
                        "max_model_len": self.engine.max_model_len,
                    }
                ],
            }
        )

    async def prometheus(self, _req: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), content_type="text/plain")

    # ---- generation ----------------------------------------------------------------------------
    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self.generate(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self.generate(request, chat=True)

    async def generate_tokens(self, request: web.Request) -> web.StreamResponse:
        """Tokens in, tokens out (the engine behind a render tier): no text anywhere."""
        return await self.generate(request, chat=False, tokens_only=True)

    async def generate(
        self, request: web.Request, chat: bool, tokens_only: bool = False
    ) -> web.StreamResponse:
        arrival = time.monotonic()
        body = None
        try:
            raw = await request.read()
            # NOTE: a large body is parsed and tokenized on a worker thread, so the event
            # loop (and so /health, which liveness asks) keeps serving meanwhile
            off_loop = len(raw) > OFFLOAD_BYTES
            body = await asyncio.to_thread(parse_json, raw) if off_loop else parse_json(raw)
            if tokens_only:
                self.frontend.check(body.get("fingerprint"), "this request")
                body = tokens_request(body, self.model)
            req, prompt = (await asyncio.to_thread(self._checked, body, chat) if off_loop
                           else self._checked(body, chat))
        except (RequestError, ValueError) as e:
            if self.role == "decode":
                self.legs.refused(body)
            return _error(e if isinstance(e, RequestError) else RequestError(str(e)))
        kv = req.kv_transfer_params or {}
        pulled = reverse = None
        if self.role == "prefill" and isinstance(kv.get("reuse"), dict):  # an earlier turn's KV
            if self.deployment and not deployment.verify(self.deployment, kv["reuse"]):
                return _error(RequestError("kv_transfer_params.reuse is not signed by this "
                                           "deployment", "kv_transfer_params"))
            reverse, mismatch = await conversations.pull_prefix(
                self.connector, kv["reuse"], self.runner.layout, self.runner.device, prompt,
                self.pull_hosts, self.engine.cached_prefix_len(prompt))
            self.metrics.kv_reuse_mismatch.inc(mismatch)
        if self.role == "decode" and connector.can_pull(kv):
            try:
                pulled = await self.legs.pull(kv, prompt)
            except RequestError as e:
                return _error(e)
        rid = f"{'gen' if tokens_only else 'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        cid = conversations.keep_as(kv) if self.role == "decode" and self.source else None
        stream = self.aengine.generate(
            prompt,
            req.params,
            rid,
            kv=pulled.payload if pulled else reverse.payload if reverse else None,
            keep_as=cid,
            # NOTE: only a prefiller holds KV for a decoder: elsewhere the flag would only pin
            # the request's blocks until its lease ran out
            remote_decode=kv.get("do_remote_decode") is not False if self.role == "prefill"
            else None,
        )
        ctx = RequestContext(
            self.responder, req, rid, chat, arrival, pulled, kv, prompt, tokens_only
        )
        if cid and self.source is not None:
            ctx.headers.update(conversations.kept_header(self.source, cid))
        first = None
        try:
            try:
                first = await stream.__anext__()
            except (KVImportError, ValueError) as e:
                return _error(RequestError(str(e)))
            finally:  # the engine imports a reused prefix with the first step, or never
                if reverse is not None:
                    reverse.close(imported=first is not None)
            if req.stream:
                return await self._stream(request, ctx, first, stream)
            return await self._complete(ctx, first, stream)
        finally:  # NOTE: on every way out (a cancelled handler too) the prefiller's KV goes
            self.legs.done(ctx)

    def _checked(self, body: dict[str, Any], chat: bool) -> tuple[ParsedRequest, list[int]]:
        """(parsed request, prompt IDs) of a request body, checked against the engine;
        RequestError or ValueError naming what is wrong."""
        req = parse_request(body, chat, self.model)
        prompt = self._handed_ids(req) or self.frontend.prompt_ids(req)
        self.engine.validate(prompt, req.params)
        return req, prompt

    def _handed_ids(self, req: ParsedRequest) -> list[int] | None:
        """On a decoder: the prompt's token IDs that the proxy handed over from the prefill
        (kv_transfer_params.prompt_token_ids), so the prompt is not rendered twice."""
        ids = (req.kv_transfer_params or {}).get("prompt_token_ids")
        if self.role != "decode" or ids is None:
            return None
        if not (isinstance(ids, list) and ids and all(
                isinstance(t, int) and not isinstance(t, bool) for t in ids)):
            raise RequestError("kv_transfer_params.prompt_token_ids must be a non-empty list "
                               "of token IDs", "kv_transfer_params")
        return ids

    async def _outputs(self, ctx: RequestContext, first: RequestOutput,
                       stream: AsyncIterator[RequestOutput]) -> AsyncIterator[RequestOutput]:
        """All outputs, with token-latency metrics recorded on the way."""
        self.legs.done(ctx, first)
        last = time.monotonic()
        self.metrics.ttft.observe(last - ctx.arrival)
        yield first
        async for out in stream:
            now = time.monotonic()
            self.metrics.itl.observe(now - last)
            last = now
            yield out

    async def _complete(self, ctx: RequestContext, first: RequestOutput,
                        stream: AsyncGenerator[RequestOutput, None]) -> web.Response:
        final = first
        async for out in self._outputs(ctx, first, stream):
            final = out
        self._finish_metrics(ctx, final)
        try:
            return web.json_response(ctx.body(final), headers=ctx.headers)
        except Exception as e:
            return _error(_internal(e))

    async def _stream(
        self, request: web.Request, ctx: RequestContext, first: RequestOutput,
        stream: AsyncGenerator[RequestOutput, None],
    ) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                     **ctx.headers}
        )
        await resp.prepare(request)
        final = first
        try:
            async for out in self._outputs(ctx, first, stream):
                final = out
                await resp.write(event(ctx.chunk(out)))
            if ctx.req.include_usage:
                await resp.write(event(ctx.usage_chunk(final)))
            await resp.write(DONE)
        except (ConnectionResetError, asyncio.CancelledError):
            await stream.aclose()  # aborts the request, frees its blocks
            raise
        except Exception as e:
            # NOTE: a failure while building a chunk ends the stream with an error event and
            # aborts the request, never leaving it decoding for nobody
            await stream.aclose()
            await resp.write(event(_internal(e).body()))
            await resp.write(DONE)
            return resp
        self._finish_metrics(ctx, final)
        return resp

    def _finish_metrics(self, ctx: RequestContext, final: RequestOutput) -> None:
        self.metrics.e2e.observe(time.monotonic() - ctx.arrival)
        self.metrics.prompt_tokens.inc(ctx.num_prompt)
        self.metrics.generation_tokens.inc(len(final.token_ids))
        reused = min(final.num_cached_tokens, ctx.num_prompt)
        self.metrics.prefill_reused.inc(reused)
        self.metrics.prefill_computed.inc(ctx.num_prompt - reused)


def _internal(e: Exception) -> RequestError:
    """A server-side failure as an OpenAI-style 500, its traceback printed to the log."""
    traceback.print_exc()
    return RequestError(
        f"internal error: {type(e).__name__}: {e}", status=500, err_type="internal_error"
    )


def main(argv: list[str] | None = None) -> None:
    a = parser().parse_args(argv)
    try:
        vllm_args.apply(a, os.environ)
        emulation = parse_emulation(a.kv_link_emulation) if a.kv_link_emulation else None
        server = EngineServer(
            engine_config(a),
            a.connector,
            kv_host=a.kv_host,
            kv_port=a.kv_port,
            link_emulation=emulation,
            frontend=frontend_config(a),
            pull_hosts=tuple(a.kv_pull_hosts),
        )
    except (ValueError, OSError) as e:
        raise SystemExit(f"engine.serve.server: {e}") from None
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_app(server.app, a.host, a.port, f"engine {server.role}",
                            server_key(a)))


if __name__ == "__main__":
    main()
