"""Faults: a dying decoder, an unpulled KV lease, corrupted frames, disconnecting clients."""

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from engine.core.kv_layout import KVLayout
from engine.fronts.proxy import FALLBACK
from engine.kv import connector, connectors, frame
from engine.processes.launch import Topology, launch
from tests.cli import advisor
from tests.serving.helpers import blocks_in_use, post, running_server

pytestmark = pytest.mark.integration  # starts servers or runs the CLI

LAYOUT = KVLayout(num_layers=2, num_kv_heads=2, head_dim=16, dtype="float32")


def _signal_mid_stream(url: str, body: dict, proc, sig: int, timeout: float = 60):
    """Stream `body`, send `sig` to `proc` after 5 chunks; return (chunks, the error event
    line or b"", seconds from the signal to the stream's end)."""

    async def consume():
        got, line, t_sig = 0, b"", None
        async with (
            aiohttp.ClientSession() as s,
            s.post(url + "/v1/completions", json={**body, "stream": True}) as r,
        ):
            try:
                async for line in r.content:
                    got += line.startswith(b"data: {")
                    if got == 5 and t_sig is None:
                        proc.send_signal(sig)
                        t_sig = time.monotonic()
                    if b'"error"' in line:
                        break
                else:
                    line = b""
            except aiohttp.ClientError:
                line = b""
        assert t_sig is not None, f"the stream ended after {got} chunks: {line!r}"
        return got, line, time.monotonic() - t_sig

    return asyncio.run(asyncio.wait_for(consume(), timeout=timeout))


def _post_fallback(url: str, body: dict) -> tuple[int, dict, str | None]:
    """(status, body, the proxy's fallback header) of a POST."""
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read()), r.headers.get(FALLBACK)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), e.headers.get(FALLBACK)


def _until_served(url: str, body: dict, within_s: float = 15) -> None:
    """Wait until the front serves `body` the normal way again (200, no tier served around:
    every instance back in its rotation)."""
    deadline = time.monotonic() + within_s
    while _post_fallback(url, body)[::2] != (200, None):
        assert time.monotonic() < deadline, "not served the normal way again"
        time.sleep(0.2)


def test_decoder_killed_mid_stream_ends_the_client_stream_quickly():
    with launch(Topology(mode="disagg", connector="shm")) as d:
        decoder = d.processes[1]  # prefill, decode, proxy
        body = {"prompt": [5, 6, 7], "max_tokens": 1900, "temperature": 0, "ignore_eos": True}
        got, _line, after_kill = _signal_mid_stream(d.url, body, decoder, signal.SIGKILL, 30)
        assert got < 1900 and after_kill < 5


def test_unpulled_kv_is_freed_at_lease_expiry():
    with running_server(role="prefill", kv_lease_duration=0.5) as (url, server):
        status, body = post(url, {"prompt": list(range(3, 60)), "max_tokens": 1, "temperature": 0,
                                  "kv_transfer_params": {"do_remote_decode": True}})
        assert status == 200
        params = body["kv_transfer_params"]
        assert connector.can_pull(params) and len(params["remote_block_ids"]) == 4
        bm = server.engine.block_manager
        assert bm.num_free_blocks == bm.num_blocks - 4
        time.sleep(1.0)
        assert bm.num_free_blocks == bm.num_blocks and not server.engine.held
        with pytest.raises(frame.FrameError, match="no KV held"):
            connectors.get("tcp").pull(params, LAYOUT)


def test_pull_then_release_frees_the_prefill_blocks():
    with running_server(role="prefill") as (url, server):
        _, body = post(url, {"prompt": list(range(3, 40)), "max_tokens": 1,
                             "kv_transfer_params": {"do_remote_decode": True}})
        params = body["kv_transfer_params"]
        for mode in ("tcp", "shm"):
            got = connectors.get(mode).pull(params, LAYOUT)
            assert got.payload.token_ids == list(range(3, 40)) and got.record.nbytes == 512 * 37
            got.close()
        connector.release(params)
        time.sleep(0.3)
        bm = server.engine.block_manager
        assert bm.num_free_blocks == bm.num_blocks and not server.engine.held


def _serve_once(payload: bytes) -> int:
    """A fake prefill side channel that answers any request with `payload`."""
    srv = socket.create_server(("127.0.0.1", 0))

    def run():
        conn, _ = srv.accept()
        with conn:
            frame.read(conn)
            conn.sendall(payload)
        srv.close()

    threading.Thread(target=run, daemon=True).start()
    return srv.getsockname()[1]


def _params(port):
    return {"do_remote_prefill": True, "remote_engine_id": "e", "remote_request_id": "r",
            "remote_host": "127.0.0.1", "remote_port": port}


@pytest.mark.parametrize("corrupt", ["magic", "crc", "shape", "truncated"])
def test_corrupted_tcp_frame_is_rejected(corrupt):
    header = {"request_id": "r", "dtype": "float32", "shape": [2, 2, 3, 2, 16],
              "nbytes": 2 * 2 * 3 * 2 * 16 * 4, "token_ids": [1, 2, 3]}
    if corrupt == "shape":
        header["shape"] = [2, 2, 3, 2, 17]
    data = bytearray(frame.encode(header)) + bytes(header["nbytes"])
    if corrupt == "magic":
        data[0:4] = b"EVIL"
    elif corrupt == "crc":
        data[12] ^= 0xFF  # a byte inside the JSON header
    elif corrupt == "truncated":
        data = data[:-100]
    with pytest.raises(frame.FrameError):
        connectors.get("tcp").pull(_params(_serve_once(bytes(data))), LAYOUT)


def test_client_disconnect_aborts_and_frees_blocks():
    with running_server() as (url, server):
        async def go():
            async with aiohttp.ClientSession() as s:
                body = {"prompt": list(range(3, 50)), "max_tokens": 1900, "temperature": 0,
                        "ignore_eos": True, "stream": True}
                async with s.post(url + "/v1/completions", json=body) as r:
                    async for _ in r.content:
                        break  # read one chunk, then hang up

        asyncio.run(go())
        bm = server.engine.block_manager
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (bm.num_free_blocks < bm.num_blocks
                                               or server.engine.has_unfinished()):
            time.sleep(0.05)
        assert bm.num_free_blocks == bm.num_blocks and not server.engine.has_unfinished()


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


@pytest.mark.parametrize("sig,mode,processes", [
    # NOTE: ~7 s each: the fast tier keeps the render one (a front, a tier and an engine)
    pytest.param(signal.SIGINT, "disagg", 3, marks=pytest.mark.slow),
    pytest.param(signal.SIGTERM, "disagg", 3, marks=pytest.mark.slow),
    (signal.SIGTERM, "render", 1)])
def test_advisor_serve_leaves_no_process_behind(sig, mode, processes):
    proc = subprocess.Popen([sys.executable, "-m", "advisor.cli", "serve", "--model", "tiny",
                             "--dtype", "float32", "--mode", mode, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        if "front:" in line:
            front = line.split()[-1]
        if "Ctrl-C" in line:
            break
    kids = _children(proc.pid)
    assert len(kids) == processes
    if mode == "render":  # it serves, and loads no model
        status, out = post(front, {"messages": [{"role": "user", "content": "hi"}]},
                           "/v1/chat/completions/render")
        assert status == 200 and out["token_ids"][0] == 1  # <|im_start|>
        assert "torch" not in Path(f"/proc/{kids[0]}/maps").read_text()
    proc.send_signal(sig)
    assert proc.wait(timeout=20) == 0
    time.sleep(0.2)
    assert [k for k in kids if os.path.exists(f"/proc/{k}")] == []


@pytest.mark.parametrize("args,needle", [
    (["--mode", "renderer"], "--mode must be collocated, disagg, render or render-split"),
    (["--mode", "render", "--reasoning-parser", "deepseek"], "--reasoning-parser must be one of"),
    (["--tool-call-parser", "mistral"], "--tool-call-parser must be one of"),
    (["--mode", "render", "--chat-template", "/no/such.jinja"], "--chat-template /no/such.jinja"),
    (["--model", "/no/such/model"], "--model: unknown model '/no/such/model'"),
])
def test_advisor_serve_bad_flags_are_one_line(args, needle):
    p = advisor("serve", *args, timeout=60)
    assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr


def test_a_chatty_child_never_blocks_on_its_stderr():
    """A child's stderr is a file, not a pipe nobody reads: 1 MB of tracebacks (aiohttp logs
    each handler's) must not block it."""
    from engine.processes.children import log_tail, spawn, stop

    code = "import sys; sys.stderr.write('x' * 1_000_000 + 'end'); sys.stderr.flush()"
    proc = spawn(["-c", code], None, dict(os.environ))
    try:
        assert proc.wait(timeout=20) == 0
        assert log_tail(proc, 10).endswith("xxxxxxxend")
    finally:
        stop([proc])


def test_sigterm_lets_a_prefiller_unlink_its_shared_memory():
    from pathlib import Path

    from engine.processes.children import free_port, log_tail, spawn, stop, wait_healthy

    before = set(Path("/dev/shm").iterdir())
    port = free_port()
    proc = spawn(["-m", "engine.serve.server", "--model", "tiny", "--role", "prefill",
                  "--connector", "shm", "--dtype", "float32", "--port", str(port)],
                 None, dict(os.environ))
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, 60)
        assert set(Path("/dev/shm").iterdir()) - before  # its KV cache
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert not (set(Path("/dev/shm").iterdir()) - before)
        assert "leaked shared_memory" not in log_tail(proc)
    finally:
        stop([proc])


@pytest.mark.slow  # waits out stalls and restarts
def test_a_stopped_prefiller_or_decoder_costs_seconds_not_minutes():
    """SIGSTOP keeps the sockets open and answers nothing: the front asks the instances'
    /health while it waits and gives up on a stopped one within ~5 s (the read timeout
    would have been 120 s), then serves around it: the decoder prefills itself, or the
    prefiller decodes too. A stream in flight on a stopped decoder ends with an error event.
    After SIGCONT everything serves as before."""
    body = {"prompt": [5, 6, 7], "max_tokens": 40, "temperature": 0, "ignore_eos": True}
    with launch(Topology(mode="disagg", connector="shm", dtype="float32")) as d:
        prefill, decoder = d.processes[0], d.processes[1]
        normal = post(d.url, body)[1]["choices"][0]["token_ids"]
        prefill.send_signal(signal.SIGSTOP)
        t = time.monotonic()
        try:
            status, out, fallback = _post_fallback(d.url, body)
        finally:
            prefill.send_signal(signal.SIGCONT)
        assert status == 200 and fallback == "decoder-prefills"
        assert out["choices"][0]["token_ids"] == normal
        assert time.monotonic() - t < 10
        _until_served(d.url, {**body, "max_tokens": 3})  # back in the rotation

        long = {**body, "max_tokens": 400}
        try:
            got, line, waited = _signal_mid_stream(d.url, long, decoder, signal.SIGSTOP)
            status, out, fallback = _post_fallback(d.url, body)  # the decoder is still stopped
        finally:
            decoder.send_signal(signal.SIGCONT)
        assert b"stopped answering" in line and waited < 10 and got < 400
        assert status == 200 and fallback == "prefiller-decodes"
        assert out["choices"][0]["token_ids"] == normal
        _until_served(d.url, {**body, "max_tokens": 3})  # back in the rotation


@pytest.mark.slow  # a herd of stalled streams, ~5 s
def test_a_herd_of_streams_nobody_reads_never_starves_a_normal_request():
    body = json.dumps({"prompt": [5, 6, 7], "max_tokens": 300, "ignore_eos": True,
                       "stream": True}).encode()
    with launch(Topology(mode="collocated", replicas=1, dtype="float32")) as d:
        host, port = d.url.removeprefix("http://").split(":")
        herd = []
        try:
            for _ in range(110):  # more than aiohttp's default pool of 100 upstream connections
                s = socket.create_connection((host, int(port)))
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                          b"application/json\r\nContent-Length: " + str(len(body)).encode()
                          + b"\r\n\r\n" + body)
                herd.append(s)  # and never read
            time.sleep(1.0)
            t = time.monotonic()
            status, out = post(d.url, {"prompt": [5, 6], "max_tokens": 4})
            assert status == 200 and out["usage"]["completion_tokens"] == 4
            assert time.monotonic() - t < 10
        finally:
            for s in herd:
                s.close()


def test_kv_params_naming_another_prompts_kv_are_a_400_at_the_decoder():
    with (running_server(role="prefill") as (p_url, _p),
          running_server(role="decode") as (d_url, _d)):
        status, body = post(p_url, {"prompt": list(range(3, 40)), "max_tokens": 1,
                                    "kv_transfer_params": {"do_remote_decode": True}})
        assert status == 200
        status, err = post(d_url, {"prompt": list(range(50, 90)), "max_tokens": 2,
                                   "kv_transfer_params": body["kv_transfer_params"]})
        assert status == 400 and err["error"]["param"] == "kv_transfer_params"
        assert "other tokens" in err["error"]["message"]


@pytest.mark.parametrize("change,needle", [
    ({"remote_port": 70000}, "remote_port an integer in 1-65535"),
    ({"remote_port": "22"}, "remote_port an integer"),
    ({"remote_host": "10.9.8.7"}, "is not one this decoder pulls from"),
    ({"remote_request_id": 5}, "must be strings"),
])
def test_a_decoder_refuses_nonsense_kv_params_with_a_400(change, needle):
    params = {**_params(9), **change}
    with running_server(role="decode") as (url, _server):
        status, err = post(url, {"prompt": [5, 6, 7], "max_tokens": 2,
                                 "kv_transfer_params": params})
    assert status == 400 and needle in err["error"]["message"]
    assert err["error"]["param"] == "kv_transfer_params"


def test_a_pull_aimed_at_another_service_never_echoes_what_answered():
    banner = socket.socket()
    banner.bind(("127.0.0.1", 0))
    banner.listen(4)

    def answer():
        conn, _ = banner.accept()
        conn.sendall(b"SSH-2.0-OpenSSH_9.6 secret-build\r\n" + b"\0" * 64)
        time.sleep(0.5)
        conn.close()

    threading.Thread(target=answer, daemon=True).start()
    params = _params(banner.getsockname()[1])
    with running_server(role="decode") as (url, _server):
        status, err = post(url, {"prompt": [5, 6, 7], "max_tokens": 2,
                                 "kv_transfer_params": params})
    banner.close()
    assert status == 500 and "not a KV side channel" in err["error"]["message"]
    assert "SSH" not in err["error"]["message"]


@pytest.mark.slow  # waits out stalls and restarts
def test_a_killed_instance_is_restarted_ejected_meanwhile_and_served_again():
    from engine.processes.supervise import supervise

    logs: list[str] = []
    body = {"prompt": [5, 6, 7], "max_tokens": 3, "temperature": 0}
    with launch(Topology(mode="disagg", connector="shm", dtype="float32")) as d:
        stop = threading.Event()
        watcher = threading.Thread(target=supervise, args=(d, stop, logs.append), daemon=True)
        watcher.start()
        try:
            decoder = d.processes[1]
            decoder.send_signal(signal.SIGKILL)
            t = time.monotonic()
            # while it is down: refused at once, so a prefiller decodes this one too
            status, _, fallback = _post_fallback(d.url, body)
            assert status == 200 and fallback == "prefiller-decodes", _
            assert time.monotonic() - t < 10
            _until_served(d.url, body, within_s=60)
            assert d.processes[1].pid != decoder.pid
            assert any("exited with code -9" in m and "restarting" in m for m in logs)
            assert any(m.endswith("restarted") for m in logs)
        finally:
            stop.set()
            watcher.join(10)
    port = d.instance_urls["decode"][0].rsplit(":", 1)[1]
    alive = subprocess.run(["pgrep", "-f", f"engine.serve.server.*--port {port}"],
                           capture_output=True, text=True).stdout
    assert alive == ""  # the restarted decoder went down with the rest


@pytest.mark.slow  # waits out a restart
def test_a_killed_render_tier_is_restarted_and_chats_are_answered_again():
    """render-split: the render tier and its front are children the supervisor watches,
    as the engines are; while the tier is down a chat gets a clear 502, never a hang."""
    from engine.processes.supervise import supervise

    logs: list[str] = []
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0}
    with launch(Topology(mode="render-split", replicas=1, dtype="float32")) as d:
        path = "/v1/chat/completions"
        status, before = post(d.url, chat, path)
        assert status == 200
        tier = next(c for c in d.children if c.name.startswith("render http"))
        old = tier.proc
        stop = threading.Event()
        watcher = threading.Thread(target=supervise, args=(d, stop, logs.append), daemon=True)
        watcher.start()
        try:
            old.send_signal(signal.SIGKILL)
            old.wait(10)
            status, err = post(d.url, chat, path)
            assert status == 502 and "render" in err["error"]["message"], err
            deadline = time.monotonic() + 60
            while (got := post(d.url, chat, path))[0] != 200:
                assert time.monotonic() < deadline, got
                time.sleep(0.2)
            assert got[1]["choices"][0]["message"] == before["choices"][0]["message"]
            assert tier.proc.pid != old.pid
            assert any("exited with code -9" in m for m in logs)
        finally:
            stop.set()
            watcher.join(10)
    port = tier.url.rsplit(":", 1)[1]
    alive = subprocess.run(["pgrep", "-f", f"engine.fronts.render_server.*--port {port}"],
                           capture_output=True, text=True).stdout
    assert alive == ""  # the restarted tier went down with the rest


@pytest.mark.slow  # a deployment of its own, ~5 s
def test_a_decode_leg_cut_short_or_refused_frees_both_pools_long_before_the_lease():
    """The client hangs up mid-stream, or the decoder refuses the leg (past the context: the
    one-token prefill leg passed): the prefiller's KV, held under a 600 s lease, is freed
    within seconds either way."""
    topo = Topology(mode="disagg", connector="shm", dtype="float32", kv_lease_duration=600)
    with launch(topo) as d:
        async def hang_up():
            body = {"prompt": list(range(3, 200)), "max_tokens": 1500, "ignore_eos": True,
                    "stream": True}
            async with (
                aiohttp.ClientSession() as s,
                s.post(d.url + "/v1/completions", json=body) as r,
            ):
                async for line in r.content:
                    assert b'"error"' not in line
                    break

        instances = d.instance_urls["prefill"] + d.instance_urls["decode"]
        for cut in (hang_up, lambda: None):
            if cut is hang_up:
                asyncio.run(hang_up())
            else:
                status, err = post(d.url, {"prompt": list(range(3, 200)), "max_tokens": 1900})
                assert status == 400 and "context" in err["error"]["message"]
            deadline = time.monotonic() + 10
            while any(blocks_in_use(u) for u in instances):
                assert time.monotonic() < deadline, {u: blocks_in_use(u) for u in instances}
                time.sleep(0.2)
