"""An in-process engine server on a background event loop, for tests that inspect the engine."""

import asyncio
import contextlib
import json
import threading
import urllib.error
import urllib.request

from aiohttp import web

from engine.config import EngineConfig
from engine.launch import free_port
from engine.server import EngineServer


@contextlib.contextmanager
def running_server(**cfg):
    """Yield (base_url, EngineServer) for a tiny float32 engine with `cfg` overrides."""
    opts = dict(model="tiny", dtype="float32", seed=0)
    opts.update(cfg)
    server = EngineServer(EngineConfig(**opts))
    port = free_port()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(server.app, handler_cancellation=True)
    started = threading.Event()

    def run():
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def post(url: str, body, path: str = "/v1/completions", raw: bytes | None = None):
    """POST JSON; return (status, parsed body)."""
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
