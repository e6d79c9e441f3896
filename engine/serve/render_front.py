"""The front of a render-split deployment: chat requests go through the render tier and
the engines see token IDs only.

    POST /v1/chat/completions   render (chat -> token IDs) -> the engines'
                                /inference/v1/generate -> derender (token IDs -> message);
                                streaming: each generated chunk is derendered as it comes,
                                its stream state kept here between chunks, never sent on
    POST /v1/completions,       straight to the engines (nothing to template), streamed
         /inference/v1/generate back as they answer

What vLLM leaves to the client, served behind one URL, so that a sweep measures a
render-split placement with the same client as any other. The render tier and the
engines' front are plain URLs: any replicas, any number of workers behind them.

    python -m engine.serve.render_front --render URL --engine URL
"""

from __future__ import annotations

import argparse
import asyncio
import json

import aiohttp
from aiohttp import web

from engine.render.protocol import RequestError, error_body, parse_json
from engine.serve.http_app import add_api_key_flag, api_key_of, run_app
from engine.serve.sse import DONE, DataEvents, error_event, event, relay

RENDER, DERENDER = "/v1/chat/completions/render", "/v1/chat/completions/derender"
GENERATE = "/inference/v1/generate"
_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=120)


class _Upstream(Exception):
    """An upstream's non-200 answer (relayed as it is) or failure (a 502)."""

    def __init__(self, status: int, body: bytes):
        super().__init__(status)
        self.status, self.body = status, body

    @classmethod
    def failed(cls, what: str, e: Exception) -> _Upstream:
        return cls(502, json.dumps(error_body(f"{what} failed: {e}", "upstream_error", 502))
                   .encode())

    def response(self) -> web.Response:
        return web.Response(body=self.body, status=self.status, content_type="application/json")


class RenderFront:
    """Routes of the front; `render_url`: the render tier, `engine_url`: the engines' front."""

    def __init__(self, render_url: str, engine_url: str):
        self.render_url, self.engine_url = render_url.rstrip("/"), engine_url.rstrip("/")
        self.session: aiohttp.ClientSession | None = None
        self.app = web.Application(client_max_size=64 << 20)
        self.app.add_routes([
            web.get("/health", self.health), web.get("/v1/models", self.models),
            web.post("/v1/chat/completions", self.chat),
            web.post("/v1/completions", self.passthrough),
            web.post(GENERATE, self.passthrough),
        ])
        self.app.on_startup.append(self._start)
        self.app.on_cleanup.append(self._stop)

    async def _start(self, _app) -> None:
        self.session = aiohttp.ClientSession(timeout=_TIMEOUT,
                                             connector=aiohttp.TCPConnector(limit=0))

    async def _stop(self, _app) -> None:
        await self.session.close()

    async def health(self, _req) -> web.Response:
        return web.json_response({"status": "ok", "role": "render-front",
                                  "render": self.render_url, "engine": self.engine_url})

    async def models(self, _req) -> web.Response:
        try:
            async with self.session.get(self.engine_url + "/v1/models") as r:
                return web.Response(body=await r.read(), status=r.status,
                                    content_type="application/json")
        except (TimeoutError, aiohttp.ClientError) as e:
            return _Upstream.failed("the engines", e).response()

    async def passthrough(self, request: web.Request) -> web.StreamResponse:
        """The request to the engines as it came, their answer back as it comes."""
        try:
            upstream = await self.session.post(
                self.engine_url + request.path, data=await request.read(),
                headers={"Content-Type": "application/json"})
        except (TimeoutError, aiohttp.ClientError) as e:
            return _Upstream.failed("the engines", e).response()
        async with upstream:
            resp = web.StreamResponse(status=upstream.status, headers={
                "Content-Type": upstream.headers.get("Content-Type", "application/json")})
            await resp.prepare(request)
            await relay(upstream, resp, "the engines")
            return resp

    async def _json(self, url: str, body: dict, what: str) -> dict:
        """`body` posted to `url`: its 200 answer, else _Upstream."""
        try:
            async with self.session.post(url, json=body) as r:
                data = await r.read()
        except (TimeoutError, aiohttp.ClientError) as e:
            raise _Upstream.failed(what, e) from None
        if r.status != 200:
            raise _Upstream(r.status, data)
        return json.loads(data)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = parse_json(await request.read())
            gen = await self._json(self.render_url + RENDER, body, "render")
            prompt = len(gen["token_ids"])
            if not gen.get("stream"):
                out = await self._json(self.engine_url + GENERATE, gen, "generate")
                return web.json_response(await self._json(
                    self.render_url + DERENDER, {"generate_response": out, "prompt_tokens": prompt,
                                                 "chat_request": body}, "derender"))
            upstream = await self.session.post(self.engine_url + GENERATE, json=gen)
        except RequestError as e:
            return web.json_response(e.body(), status=e.status)
        except _Upstream as e:
            return e.response()
        except (TimeoutError, aiohttp.ClientError) as e:
            return _Upstream.failed("generate", e).response()
        async with upstream:
            if upstream.status != 200:
                return _Upstream(upstream.status, await upstream.read()).response()
            return await self._stream(request, upstream, body, prompt)

    async def _stream(self, request: web.Request, upstream, chat: dict,
                      prompt: int) -> web.StreamResponse:
        """Derender the engines' stream chunk by chunk into the client's; usage, when the
        client asked for it (stream_options.include_usage), in a last chunk of its own."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        state, events = None, DataEvents(upstream.content)
        usage = bool((chat.get("stream_options") or {}).get("include_usage"))
        try:
            async for data in events:
                chunk = json.loads(data)
                if "error" in chunk:  # the engines' error event: the client gets it as it is
                    await resp.write(event(data))
                    continue
                ask = {"generate_chunk": chunk, **({"prompt_tokens": prompt} if usage else {})}
                ask.update({"stream_state": state} if state else {"chat_request": chat})
                out = await self._json(self.render_url + DERENDER, ask, "derender")
                state = out.pop("stream_state")
                counts = out.pop("usage", None)
                await resp.write(event(out))
                if counts is not None:
                    last = {**out, "choices": [], "usage": counts}
                    await resp.write(event(last))
            if not events.done:
                raise ValueError("the engines' stream ended without [DONE]")
        except _Upstream as e:
            await resp.write(event(e.body))
        except (TimeoutError, aiohttp.ClientError, ValueError) as e:
            await resp.write(error_event(f"generate failed mid-stream: {e}"))
        await resp.write(DONE)
        return resp


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="The front of a render-split deployment.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--render", required=True, help="the render tier's base URL")
    ap.add_argument("--engine", required=True, help="the tokens-only engines' front base URL")
    add_api_key_flag(ap)
    a = ap.parse_args(argv)
    try:
        front = RenderFront(a.render, a.engine)
        asyncio.run(run_app(front.app, a.host, a.port, "render front", api_key_of(a)))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
