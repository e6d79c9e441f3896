"""`render_server --workers 2`: two processes behind one port. A stream started on one worker
continues on the other with the same output; /metrics on either counts both; a killed worker
is replaced; stopping the server leaves no worker behind."""

import http.client
import json
import os
import signal
import time
import urllib.parse

import pytest

from engine.processes.launch import Topology, launch, serve_module
from tests.serving.helpers import post

pytestmark = pytest.mark.integration  # starts servers

DERENDER = "/v1/chat/completions/derender"
RENDER = "/v1/chat/completions/render"
CHAT = {"model": "tiny", "max_tokens": 64, "temperature": 0, "messages": [
    {"role": "user", "content": "what is the weather in Paris?"}]}
TEXT = "<think>first look it up</think>Sure: the weather in Paris is mild and sunny today."


@pytest.fixture(scope="module")
def render():
    with launch(Topology(mode="render", model="tiny", render_workers=2)) as dep:
        yield dep.url


def connection_to(url: str, worker: int, tries: int = 200) -> http.client.HTTPConnection:
    """A kept-alive connection that the kernel gave to worker `worker`."""
    u = urllib.parse.urlsplit(url)
    for _ in range(tries):
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        if call(conn, "GET", "/health")["worker"] == worker:
            return conn
        conn.close()
    raise AssertionError(f"no connection reached worker {worker} in {tries} tries")


def call(conn: http.client.HTTPConnection, method: str, path: str, body=None) -> dict:
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    out = json.loads(resp.read())
    assert resp.status == 200, out
    return out


def stream(conns: list[http.client.HTTPConnection], ids: list[int]) -> tuple[str, str]:
    """Derender `ids` one token per chunk, chunk k on conns[k % len(conns)]: (reasoning,
    content)."""
    state, reasoning, content = None, "", ""
    for k, t in enumerate(ids):
        last = k == len(ids) - 1
        body = {"generate_chunk": {"request_id": "s1", "token_ids": [t],
                                   "finish_reason": "stop" if last else None}}
        body.update({"stream_state": state} if state else {"chat_request": CHAT})
        out = call(conns[k % len(conns)], "POST", DERENDER, body)
        state, delta = out["stream_state"], out["chunk"]["choices"][0]["delta"]
        reasoning += delta.get("reasoning_content") or ""
        content += delta.get("content") or ""
    return reasoning, content


def output_ids(url: str) -> list[int]:
    status, out = post(url, {**CHAT, "messages": [{"role": "assistant", "content": TEXT}]},
                       RENDER)
    assert status == 200, out
    return out["token_ids"]


def test_a_stream_moves_between_workers_unchanged(render):
    ids = output_ids(render)[-40:]
    one = connection_to(render, 0)
    two = [one, connection_to(render, 1)]
    alone, across = stream([one], ids), stream(two, ids)
    assert across == alone and alone[1]  # the same split, and content came out


def test_metrics_on_either_worker_count_both(render):
    conns = [connection_to(render, w) for w in (0, 1)]
    before = [_renders(c) for c in conns]
    assert before[0] == before[1]
    for c in conns:
        for _ in range(3):
            call(c, "POST", RENDER, CHAT)
    assert [_renders(c) for c in conns] == [before[0] + 6] * 2


def _renders(conn: http.client.HTTPConnection) -> float:
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    line = next(x for x in text.splitlines()
                if x.startswith("engine:frontend_requests_total") and 'stage="render"' in x)
    assert "process_cpu_seconds_total" in text
    return float(line.split()[-1])


def test_a_killed_worker_is_replaced_and_stop_leaves_none():
    with serve_module("engine.fronts.render_server", ["--model", "tiny", "--workers", "2"]) as url:
        pid = call(connection_to(url, 1), "GET", "/health")["pid"]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while True:  # the replacement answers as worker 1 from another process
            try:
                new = call(connection_to(url, 1, tries=20), "GET", "/health")["pid"]
                if new != pid:
                    break
            except (AssertionError, OSError):
                pass
            assert time.monotonic() < deadline, "worker 1 was not replaced"
        pids = {pid, new, call(connection_to(url, 0), "GET", "/health")["pid"]}
    time.sleep(0.5)
    assert not [p for p in pids if _alive(p)]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
