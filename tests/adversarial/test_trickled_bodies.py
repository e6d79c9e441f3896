"""A client that sends its headers, then its body a byte at a time, holds a connection (and a
file descriptor) for as long as it likes unless the server bounds the body's time too (issue
56, item 3): past BODY_S such a connection is closed, and past MAX_PER_CLIENT a client's
trickling connections go after its idle ones; a request whose body came in time is served
however long its answer takes."""

import asyncio
import socket
import threading
import time

import pytest
from aiohttp import web

from engine.processes.children import free_port
from engine.serve import connections

pytestmark = pytest.mark.integration
BODY = b'{"prompt": "' + b"x" * 100 + b'"}'


@pytest.fixture
def server(monkeypatch):
    """A server whose handler reads the whole body, then answers after 1.5 s, watched with
    BODY_S = 1 s and MAX_PER_CLIENT = 6, checked every 0.2 s."""
    monkeypatch.setattr(connections, "BODY_S", 1.0)
    monkeypatch.setattr(connections, "MAX_PER_CLIENT", 6)
    monkeypatch.setattr(connections, "CHECK_EVERY_S", 0.2)

    async def handle(request):
        await request.read()
        await asyncio.sleep(1.5)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/v1/completions", handle)
    port, loop, ready = free_port(), asyncio.new_event_loop(), threading.Event()
    runner = web.AppRunner(app)

    def run():
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        assert runner.server is not None
        loop.create_task(connections.watch(runner.server))
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(10)
    yield port
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def _headers(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY[:1])
    return s


def _closed(s: socket.socket, wait: float) -> bool:
    s.settimeout(wait)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_a_trickled_body_is_cut_off_and_a_slow_answer_is_not(server):
    trickler = _headers(server)
    honest = _headers(server)
    honest.sendall(BODY[1:])  # its whole body in time; its answer takes longer than BODY_S
    t0 = time.monotonic()
    while time.monotonic() - t0 < 2.5 and not _closed(trickler, 0.1):
        trickler.sendall(BODY[1:2])  # a byte now and then: never done
        time.sleep(0.3)
    assert time.monotonic() - t0 < 2.5, "the trickling connection was never closed"
    honest.settimeout(5)
    assert honest.recv(4096).startswith(b"HTTP/1.1 200")
    trickler.close()
    honest.close()


def test_a_client_past_its_cap_loses_its_trickling_connections(server):
    socks = [_headers(server) for _ in range(10)]
    time.sleep(0.6)  # within BODY_S: only the cap closes anything
    closed = [s for s in socks if _closed(s, 0.05)]
    assert len(closed) == 4 and not set(closed) & set(socks[-3:])  # the oldest went first
    for s in socks:
        s.close()
