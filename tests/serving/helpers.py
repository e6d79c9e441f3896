"""In-process servers (engine, render) on a background event loop, for tests that inspect them."""

import asyncio
import contextlib
import json
import threading
import urllib.error
import urllib.request

from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from advisor.measure.prom import kv_blocks_in_use, scrape_text
from engine.core.config import EngineConfig
from engine.processes.children import free_port
from engine.serve.server import EngineServer


@contextlib.contextmanager
def running_server(frontend=None, served_model=None, **cfg):
    """Yield (base_url, EngineServer) for a tiny float32 engine with `cfg` overrides."""
    opts = {"model": "tiny", "dtype": "float32", "seed": 0}
    opts.update(cfg)
    server = EngineServer(EngineConfig(**opts), frontend=frontend, served_model=served_model)
    with running_app(server.app) as url:
        yield url, server


@contextlib.contextmanager
def running_app(app: web.Application):
    """Serve `app` on a free loopback port from a background thread; yield its base URL."""
    port = free_port()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, handler_cancellation=True)
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
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def post(url: str, body, path: str = "/v1/completions", raw: bytes | None = None,
         headers: dict[str, str] | None = None):
    """POST JSON (with any extra `headers`); return (status, parsed body)."""
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(
        url + path, data=data, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def post_stream(url: str, body: dict, path: str,
                headers: dict[str, str] | None = None) -> list[dict]:
    """POST a streaming request; return its server-sent event objects, in order."""
    req = urllib.request.Request(
        url + path, data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200
        events = [line[5:].strip() for line in r if line.startswith(b"data:")]
    assert events[-1] == b"[DONE]"
    return [json.loads(e) for e in events[:-1]]


def blocks_in_use(instance: str) -> float:
    """KV blocks an engine instance (base URL) has in use, from its /metrics."""
    return kv_blocks_in_use(scrape_text([instance + "/metrics"]))


def counter(url: str, name: str) -> float:
    """A Prometheus counter's total (every sample of `name`_total) at `url`/metrics."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name + "_total")
