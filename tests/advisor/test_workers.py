"""The client in several processes: every request sent once, on its schedule, from one
clock, and timed as truly as by one process (against the scripted server's own record)."""

import numpy as np
import pytest

from advisor.measure.records import Endpoint
from advisor.measure.selfcheck import client_check
from advisor.measure.workers import deal, default_workers
from advisor.measure.workload_run import measure
from tests.advisor.helpers import received, scripted, workload
from tests.cli import advisor_here

pytestmark = pytest.mark.integration


def test_dealing_keeps_each_conversation_whole_and_the_schedule():
    w = workload(n=14, turns=2, rate=100.0)
    assert len(w.conversations) == 7
    parts = deal(w, 3)
    assert [len(p.conversations) for p in parts] == [3, 2, 2]
    ids = [c.conversation_id for p in parts for c in p.conversations]
    assert sorted(ids) == sorted(c.conversation_id for c in w.conversations)
    assert all(len(c.turns) == 2 for p in parts for c in p.conversations)
    assert len(deal(workload(n=2), 4)) == 2  # no idle workers


def test_two_workers_send_every_request_on_one_clock():
    w = workload(n=120, out=4, rate=100.0, turns=2)
    with scripted(ttft_ms=20, itl_ms=5) as url:
        run = measure(Endpoint(url, "scripted", timeout_s=30), w, num_warmups=2, workers=2)
        truth = received(url)
    assert run.workers == 2
    done = [r for r in run.records if not r.warmup]
    assert len(done) == 120 and all(r.ok for r in done)
    assert sum(r.warmup for r in run.records) == 2
    assert [r.index for r in run.records] == list(range(len(run.records)))
    # one clock: each first turn left at its schedule, t=0 + its start, whichever process
    starts = {c.conversation_id: c.start for c in w.conversations}
    late = [r.dispatched - (run.start + starts[r.conversation_id]) for r in done if r.turn == 0]
    assert max(late) < 0.01 and min(late) > -0.001
    # timed as the server saw it: its arrival stamps and writes, per request
    arrivals = sorted(t["timing"]["arrived"] for t in truth)[2:]  # after the warm-ups
    sent = sorted(r.sent for r in done)
    assert np.abs(np.array(sent) - np.array(arrivals)).max() < 0.005
    ttft = np.array([r.chunks[0] - r.sent for r in done]) * 1000
    assert 20 <= np.median(ttft) < 23
    check = client_check(run)
    assert check["cpu_share"] < 0.5 and check["bound"] is None  # per process, not summed


def test_workers_is_a_flag_with_a_floor(tmp_path):
    p = advisor_here("bench", "--base-url", "http://127.0.0.1:9", "--workers", "0")
    assert p.returncode == 2 and "--workers" in p.stderr
    assert default_workers(engines_here=True) == 1
