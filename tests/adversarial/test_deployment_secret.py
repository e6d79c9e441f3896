"""Findings 1-3: a deployment trusts no one it did not start. Against a 1P1D `tiny`
deployment from the launcher, as another process on the same host would try it:

1. its instances' HTTP ports want the deployment's key; with it (leaked), kv_transfer_params
   that the deployment did not sign are refused, pull target and `reuse` alike, and a
   forged header is refused before anything is allocated or mapped;
2. 200 sockets trickling bytes at the KV side channel hold no slot a real pull needs;
3. a process that takes a dead instance's port never gets the deployment's traffic."""

import contextlib
import os
import signal
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine.core import deployment
from engine.core.kv_layout import KVLayout
from engine.kv import connectors, frame
from engine.processes.children import LaunchError, wait_healthy
from engine.processes.launch import Topology, launch
from tests.serving.helpers import post

pytestmark = pytest.mark.integration

BODY = {"model": "tiny", "prompt": [5, 6, 7, 8, 9], "max_tokens": 3, "temperature": 0,
        "ignore_eos": True}


@pytest.fixture(scope="module")
def pd():
    with launch(Topology(mode="disagg", model="tiny", dtype="float32")) as d:
        yield d


def call(url: str, body: dict, key: str | None, path: str = "/v1/completions"):
    return post(url, body, path, headers={"Authorization": f"Bearer {key}"} if key else None)


class _FakeSideChannel:
    """A side channel on loopback that answers every pull with `header`, counting who came."""

    def __init__(self, header: dict):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port, self.came = self.sock.getsockname()[1], 0
        threading.Thread(target=self._serve, args=(header,), daemon=True).start()

    def _serve(self, header: dict) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.came += 1
            with conn:
                try:
                    frame.read(conn)
                    conn.sendall(frame.encode(header))
                except (OSError, frame.FrameError):
                    pass

    def params(self, **extra) -> dict:
        return {"do_remote_prefill": True, "remote_engine_id": "e", "remote_request_id": "r",
                "remote_host": "127.0.0.1", "remote_port": self.port, "remote_block_ids": [0],
                **extra}


def test_instance_ports_want_the_deployments_key(pd):
    dec = pd.instance_urls["decode"][0]
    assert call(dec, BODY, None)[0] == 401
    assert call(dec, BODY, "guess")[0] == 401
    assert call(dec, BODY, pd.instance_key)[0] == 200
    assert call(pd.url, BODY, None)[0] == 200  # the front is the way in


def test_unsigned_kv_params_are_refused_before_anything_connects(pd):
    fake = _FakeSideChannel({"error": "nothing here"})
    dec, pre = pd.instance_urls["decode"][0], pd.instance_urls["prefill"][0]
    status, err = call(dec, {**BODY, "kv_transfer_params": fake.params()}, pd.instance_key)
    assert status == 400 and "not signed by this deployment" in err["error"]["message"]
    status, err = call(pre, {**BODY, "kv_transfer_params": {"do_remote_decode": True,
                                                            "reuse": fake.params()}},
                       pd.instance_key)
    assert status == 400 and "reuse is not signed" in err["error"]["message"]
    assert fake.came == 0  # the decoder never connected where it was told


def test_signed_params_are_bound_to_what_they_name(pd):
    """The prefiller's own signed params, one field changed (another port, other blocks):
    refused as unsigned."""
    pre, dec = pd.instance_urls["prefill"][0], pd.instance_urls["decode"][0]
    status, out = call(pre, {**BODY, "kv_transfer_params": {"do_remote_decode": True}},
                       pd.instance_key)
    params = out["kv_transfer_params"]
    assert status == 200 and params["remote_signature"]
    for change in ({"remote_port": params["remote_port"] + 1}, {"remote_block_ids": [0, 1, 2]},
                   {"remote_expires": params["remote_expires"] + 3600}):
        status, err = call(dec, {**BODY, "kv_transfer_params": {**params, **change}},
                           pd.instance_key)
        assert status == 400 and "not signed" in err["error"]["message"], change
    assert call(dec, {**BODY, "kv_transfer_params": params}, pd.instance_key)[0] == 200


def test_a_forged_header_is_refused_before_allocating_or_mapping(monkeypatch):
    """What a fake side channel says is checked before it costs anything: a block size of
    2^21 tokens (a 2 GB buffer once), and, inside a deployment, a segment not of it."""
    layout = KVLayout(num_layers=2, num_kv_heads=2, head_dim=16, dtype="float32")
    shape = [2, 2, 4, 2, 16]
    base = {"request_id": "r", "dtype": "float32", "shape": shape, "nbytes": 4 * 2 * 2 * 4 * 2 * 16,
            "token_ids": [1, 2, 3, 4], "start": 0, "block_ids": [0],
            "cache_shape": [2, 2, 1, 1 << 21, 2, 16], "shm_name": "psm_victim"}
    fake = _FakeSideChannel(base)
    with pytest.raises(frame.FrameError, match="block size"):
        connectors.get("shm").pull(fake.params(), layout)
    monkeypatch.setenv(deployment.SECRET_ENV, deployment.new())
    fake = _FakeSideChannel({**base, "cache_shape": [2, 2, 1, 16, 2, 16]})
    with pytest.raises(frame.FrameError, match="not one of this deployment's"):
        connectors.get("shm").pull(fake.params(), layout)


def _side_channel(pd) -> tuple[str, int]:
    pre = pd.instance_urls["prefill"][0]
    _, out = call(pre, {**BODY, "kv_transfer_params": {"do_remote_decode": True}},
                  pd.instance_key)
    return out["kv_transfer_params"]["remote_host"], out["kv_transfer_params"]["remote_port"]


def test_two_hundred_trickling_sockets_hold_no_slot_a_pull_needs(pd):
    host, port = _side_channel(pd)
    stop = threading.Event()
    socks = []
    for _ in range(200):
        try:
            s = socket.create_connection((host, port), timeout=5)
            s.sendall(struct.pack("!4sH", frame.MAGIC, frame.VERSION))  # a frame begun...
            socks.append(s)
        except OSError:
            pass

    def trickle():  # ...and a byte every 0.5 s, never finished
        while not stop.wait(0.5):
            for s in socks:
                with contextlib.suppress(OSError):
                    s.send(b"\0")

    threading.Thread(target=trickle, daemon=True).start()
    try:
        time.sleep(1.0)
        results = [post(pd.url, BODY)[0] for _ in range(10)]
    finally:
        stop.set()
        for s in socks:
            s.close()
    assert results == [200] * 10


def test_a_process_on_a_dead_instances_port_gets_no_traffic(pd):
    """The decoder killed; another process binds its port at once and answers everything
    with 200. The front sends it nothing, from the first request on (a new connection is
    checked before use); the launcher's health wait names it."""
    dec = pd.instance_urls["decode"][0]
    port = int(dec.rsplit(":", 1)[1])
    child = next(c for c in pd.children if c.url == dec)
    seen = []

    class Squatter(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _answer(self):
            seen.append(self.path)
            body = b'{"status": "ok"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

    os.kill(child.proc.pid, signal.SIGKILL)
    child.proc.wait()
    server = None
    for _ in range(50):
        try:
            server = ThreadingHTTPServer(("127.0.0.1", port), Squatter)
            break
        except OSError:
            time.sleep(0.1)
    assert server is not None
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        answers = [post(pd.url, BODY) for _ in range(3)]  # at once: before any health check
        with pytest.raises(LaunchError, match="another process holds its port"):
            wait_healthy(dec, child.start(), 10, bytes.fromhex(pd.secret))  # as on a restart
    finally:
        server.shutdown()
        server.server_close()
    assert [s for s, _ in answers] == [200] * 3  # served around the dead decoder
    assert all(a["choices"][0]["token_ids"] for _, a in answers)
    assert not [p for p in seen if not p.startswith("/health")]  # nothing but health checks
