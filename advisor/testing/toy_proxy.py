"""A stand-in for vLLM's toy P/D proxy (`tests/v1/kv_connector/nixl_integration/
toy_proxy_server.py` in vLLM's repository), written from its documented behaviour: no
`/v1/models`, no `/metrics`; a prefill leg with `max_tokens: 1` and a remote decode asked
for, then the decoder's stream relayed, labelled `application/json`; `Authorization: Bearer
$OPENAI_API_KEY` on both legs where that is set, as vLLM's proxies send it.

    python -m advisor.testing.toy_proxy --port 8192 --prefiller-ports 8100 --decoder-ports 8200"""

from __future__ import annotations

import argparse
import itertools
import os
import uuid
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

SESSION = web.AppKey("session", aiohttp.ClientSession)
ASK_REMOTE_DECODE = {"do_remote_decode": True, "do_remote_prefill": False,
                     "remote_engine_id": None, "remote_block_ids": None, "remote_host": None,
                     "remote_port": None}


def make_app(prefillers: list[str], decoders: list[str],
             api_key: str | None = None) -> web.Application:
    """The proxy over `prefillers` and `decoders` (base URLs), sending `api_key` to both."""
    app = web.Application(client_max_size=64 << 20)
    next_p, next_d = itertools.cycle(prefillers), itertools.cycle(decoders)
    auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    async def session(_app: web.Application) -> AsyncIterator[None]:
        app[SESSION] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        yield
        await app[SESSION].close()

    async def relay(req: web.Request, path: str) -> web.StreamResponse:
        body = await req.json()
        rid = str(uuid.uuid4())
        leg = {**body, "kv_transfer_params": dict(ASK_REMOTE_DECODE), "stream": False,
               "max_tokens": 1}
        leg.pop("stream_options", None)
        for key in ("min_tokens", "min_completion_tokens"):
            leg.pop(key, None)
        if "max_completion_tokens" in leg:
            leg["max_completion_tokens"] = 1
        async with app[SESSION].post(next(next_p) + path, json=leg,
                                       headers={"X-Request-Id": rid, **auth}) as r:
            r.raise_for_status()
            returned = (await r.json()).get("kv_transfer_params")
        if returned:
            body["kv_transfer_params"] = returned
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        async with app[SESSION].post(next(next_d) + path, json=body,
                                       headers={"X-Request-Id": rid, **auth}) as r:
            r.raise_for_status()
            await resp.prepare(req)
            async for chunk in r.content.iter_any():
                await resp.write(chunk)
        await resp.write_eof()
        return resp

    async def completions(req: web.Request) -> web.StreamResponse:
        return await relay(req, "/v1/completions")

    async def chat(req: web.Request) -> web.StreamResponse:
        return await relay(req, "/v1/chat/completions")

    async def healthcheck(_req: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "prefill_instances": len(prefillers),
                                  "decode_instances": len(decoders)})

    app.cleanup_ctx.append(session)
    app.add_routes([web.post("/v1/completions", completions),
                    web.post("/v1/chat/completions", chat),
                    web.get("/healthcheck", healthcheck)])
    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--prefiller-host", default="127.0.0.1")
    ap.add_argument("--prefiller-ports", type=int, nargs="+", default=[8100])
    ap.add_argument("--decoder-host", default="127.0.0.1")
    ap.add_argument("--decoder-ports", type=int, nargs="+", default=[8200])
    a = ap.parse_args()
    web.run_app(make_app([f"http://{a.prefiller_host}:{p}" for p in a.prefiller_ports],
                         [f"http://{a.decoder_host}:{p}" for p in a.decoder_ports],
                         os.environ.get("OPENAI_API_KEY")),
                host=a.host, port=a.port, print=None)


if __name__ == "__main__":
    main()
