"""Issue 56's floods, at the scale it found them: a stream of over-long conversation ids
(which used to get every instance ejected) leaves ordinary clients served; 2,000 connections
trickling their bodies from one address leave a real front serving; a 20 MiB derender is a
413 at once and the largest body that fits is answered within 2 s, /health answering
throughout."""

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from advisor.measure.ready import wait_ready
from engine.fronts.proxy import Proxy
from engine.fronts.render_server import RenderServer
from engine.processes.children import free_port
from engine.render.frontend import FrontendConfig
from engine.serve import connections
from tests.adversarial.test_large_bodies import _closed
from tests.advisor.helpers import scripted
from tests.serving.helpers import running_app

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BODY = {"model": "scripted", "prompt": [1, 2, 3], "max_tokens": 2}
DERENDER = "/v1/chat/completions/derender"


def _status(url: str, body: bytes, timeout: float = 30) -> int:
    req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


class _Flood(threading.Thread):
    """`send()` every `every_s` seconds until stopped; the statuses it got."""

    def __init__(self, send, every_s: float):
        super().__init__(daemon=True)
        self.send, self.every_s, self.got = send, every_s, []
        self.halt = threading.Event()

    def run(self):
        while not self.halt.wait(self.every_s):
            self.got.append(self.send())

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *_):
        self.halt.set()
        self.join(30)


def test_a_flood_of_overlong_conversation_ids_leaves_ordinary_clients_served():
    """The reproduction: 9,000-byte ids at 10 a second, which the front copied upstream,
    where the instance's parser answered a bare 400 and liveness ejected it."""
    with scripted(ttft_ms=1, itl_ms=1) as a, scripted(ttft_ms=1, itl_ms=1) as b:
        proxy = Proxy([a, b])
        with running_app(proxy.app) as url:
            hostile = json.dumps({**BODY, "conversation_id": "c" * 9000}).encode()
            with _Flood(lambda: _status(url + "/v1/completions", hostile), 0.1) as flood:
                served = []
                for k in range(150):
                    ok = json.dumps({**BODY, "conversation_id": f"user-{k % 7}"}).encode()
                    served.append(_status(url + "/v1/completions", ok) == 200)
                    time.sleep(0.02)
            assert len(flood.got) >= 20 and set(flood.got) == {400}
            assert sum(served) >= 0.99 * len(served), served.count(False)
            assert not proxy.liveness.down


def test_2000_trickling_bodies_from_one_address_leave_a_real_front_serving():
    with scripted(ttft_ms=1, itl_ms=1) as instance:
        port = free_port()
        front = subprocess.Popen([sys.executable, "-m", "engine.fronts.proxy", "--decode",
                                  instance, "--port", str(port)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        socks: list[socket.socket] = []
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, None, timeout_s=60)
            head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                    b"\r\nContent-Length: 100000\r\n\r\n{")
            served = []
            for k in range(2000):
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(head)
                socks.append(s)
                if k % 100 == 99:  # an ordinary request now and then, from the same address
                    served.append(_status(url + "/v1/completions", json.dumps(BODY).encode()))
            time.sleep(2 * connections.CHECK_EVERY_S + 0.5)
            for s in socks[-300:]:
                s.sendall(b" ")  # still trickling
            served += [_status(url + "/v1/completions", json.dumps(BODY).encode())
                       for _ in range(10)]
            assert served == [200] * 30
            still_open = len(socks) - len(_closed(socks, 1.0))
            assert still_open <= connections.MAX_PER_CLIENT
            assert front.poll() is None
        finally:
            for s in socks:
                s.close()
            front.terminate()
            front.wait(30)


def test_a_20_mib_derender_is_a_413_at_once_and_health_answers_throughout():
    server = RenderServer(FrontendConfig(model_dir="tiny"), "tiny")
    with running_app(server.app) as url:
        waits: list[float] = []

        def health() -> int:
            t = time.monotonic()
            with urllib.request.urlopen(url + "/health", timeout=10) as r:
                waits.append(time.monotonic() - t)
                return r.status

        huge = json.dumps({"generate_response": {"token_ids": [7] * (7 << 20)}}).encode()
        assert len(huge) > 20 << 20
        fits = json.dumps({"generate_response": {"token_ids": [7] * 2048,
                                                 "finish_reason": "length"},
                           "chat_request": {"model": "tiny", "messages": [
                               {"role": "user", "content": "x " * 200_000}]}}).encode()
        with _Flood(health, 0.05) as poll:
            start = time.monotonic()
            assert _status(url + DERENDER, huge) == 413
            assert time.monotonic() - start < 2
            start = time.monotonic()
            assert _status(url + DERENDER, fits) < 500
            assert time.monotonic() - start < 2
            time.sleep(0.3)
        assert poll.got and set(poll.got) == {200} and max(waits) < 1.0, max(waits)
