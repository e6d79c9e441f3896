"""Finding 4: one large body, or many slow connections, never takes a deployment down.

A body that the model's context cannot need is a 413 before it is read whole; a large one
that may fit is parsed and tokenized off the event loop, so /health (and so liveness) and
other requests go on meanwhile; connections that never finish their headers are closed, and
a client's idle ones are capped; the proxy does not send a request that its prefiller timed
out on to the decoder as well. Against a 1P1D `tiny` deployment from the launcher, and
in-process servers where a part is replaced to make it slow."""

import asyncio
import contextlib
import json
import selectors
import socket
import threading
import time
import urllib.request

import pytest
from aiohttp import web

from engine.core.config import load_model_config, max_body_bytes
from engine.fronts import proxy
from engine.processes.launch import Topology, launch
from engine.serve import connections
from engine.serve.http_app import Upstream
from tests.serving.helpers import post, running_app, running_server

pytestmark = pytest.mark.integration

BODY = {"model": "tiny", "prompt": [5, 6, 7], "max_tokens": 3, "temperature": 0}


@pytest.fixture(scope="module")
def pd():
    with launch(Topology(mode="disagg", model="tiny", dtype="float32")) as d:
        yield d


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_a_body_the_context_cannot_need_is_a_413_before_it_is_read(pd):
    limit = max_body_bytes(load_model_config("tiny").max_position_embeddings)
    huge = json.dumps({**BODY, "prompt": "x" * (4 * limit)}).encode()
    start = time.monotonic()
    status, err = post(pd.url, None, raw=huge)
    assert status == 413 and err["error"]["code"] == 413, err
    assert time.monotonic() - start < 5
    inner = {"Authorization": f"Bearer {pd.instance_key}"}  # the instances refuse it too
    assert post(pd.instance_urls["prefill"][0], None, raw=huge, headers=inner)[0] == 413
    assert post(pd.url, BODY)[0] == 200
    # one just under it reaches the prefiller (with what the front adds) and is parsed there
    under = json.dumps({**BODY, "prompt": "x " * (limit // 2 - 100)}).encode()
    assert len(under) < limit
    status, err = post(pd.url, None, raw=under)
    assert status == 400 and "context" in err["error"]["message"], err


def test_a_large_body_is_parsed_off_the_event_loop_so_health_still_answers():
    with running_server() as (url, server):
        real, where = server.frontend.prompt_ids, []

        def slow_tokenizer(req):  # a tokenizer taking its time over a large prompt
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop()
                where.append("event loop")
            where.append(threading.current_thread().name)
            time.sleep(3)
            return real(req)

        server.frontend.prompt_ids = slow_tokenizer
        large = {**BODY, "prompt": "word " * 20_000}  # ~100 KB: parsed, then too long: a 400
        got = {}
        sender = threading.Thread(target=lambda: got.update(r=post(url, large)))
        sender.start()
        time.sleep(0.5)
        start = time.monotonic()
        with urllib.request.urlopen(url + "/health", timeout=10) as r:
            assert r.status == 200
        assert time.monotonic() - start < 1.5, "the event loop waited for the tokenizer"
        sender.join(30)
        assert got["r"][0] == 400 and "event loop" not in where, (got, where)


def _partial_headers(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/")
    return s


def _closed(socks: list[socket.socket], wait: float) -> list[socket.socket]:
    """Those of `socks` that the server closed (within `wait` seconds)."""
    with selectors.DefaultSelector() as sel:  # not select(): fd numbers may pass 1024
        for s in socks:
            sel.register(s, selectors.EVENT_READ)
        readable = [key.fileobj for key, _ in sel.select(wait)]
    out = []
    for s in readable:
        try:
            if s.recv(1) == b"":
                out.append(s)
        except ConnectionResetError:
            out.append(s)
    return out


@pytest.mark.slow  # a load drill of 10 s or more
def test_connections_that_never_finish_their_headers_are_closed(pd):
    loris = [_partial_headers(_port(pd.url)) for _ in range(50)]
    try:
        assert post(pd.url, BODY)[0] == 200  # they hold nothing a real request needs
        time.sleep(connections.HEADERS_S)
        deadline = time.monotonic() + connections.CHECK_EVERY_S * 3
        closed: set = set()
        while len(closed) < len(loris) and time.monotonic() < deadline:
            closed.update(_closed([s for s in loris if s not in closed], 0.5))
        assert len(closed) == len(loris)
    finally:
        for s in loris:
            s.close()


def test_a_clients_idle_connections_are_capped(pd):
    extra = 20
    idle = []
    try:
        for _ in range(connections.MAX_PER_CLIENT + extra):
            s = socket.create_connection(("127.0.0.1", _port(pd.url)))
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
            idle.append(s)
        time.sleep(connections.CHECK_EVERY_S * 2.5)
        closed = _closed(idle, 0.5)
        assert extra <= len(closed) <= extra + 5, len(closed)
        assert not set(closed) & set(idle[-10:])  # the oldest went first
        assert post(pd.url, BODY)[0] == 200
    finally:
        for s in idle:
            s.close()


def test_the_proxy_does_not_resend_what_its_prefiller_timed_out_on(monkeypatch):
    seen = {"prefill": 0, "decode": 0}

    async def prefill(request):
        seen["prefill"] += 1
        await asyncio.sleep(5)  # busy with a huge prompt, not gone
        return web.json_response({})

    async def decode(request):
        seen["decode"] += 1
        return web.json_response({"choices": [{"text": "x"}]})

    p, d = web.Application(), web.Application()
    async def health(request):
        return web.json_response({"status": "ok"})

    p.add_routes([web.post("/v1/completions", prefill), web.get("/health", health)])
    d.add_routes([web.post("/v1/completions", decode), web.get("/health", health)])
    monkeypatch.setattr(Upstream, "TIMEOUT", proxy.aiohttp.ClientTimeout(sock_read=1))
    with running_app(p) as p_url, running_app(d) as d_url, \
            running_app(proxy.Proxy([d_url], [p_url]).app) as url:
        status, err = post(url, BODY)
    assert status == 502 and "timed out" in err["error"]["message"], err
    assert seen == {"prefill": 1, "decode": 0}
