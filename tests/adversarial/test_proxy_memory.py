"""Finding 9, the proxy's growth: what it remembers per conversation (the sticky instance,
where a decoder kept the last turn) is bounded in bytes and in time, however many
conversations clients make up and however large the notes. Through the proxy's HTTP port,
in front of two small apps playing vLLM's prefiller and decoder."""

import json
import time
import tracemalloc

import pytest

from engine.fronts import liveness, proxy
from engine.fronts.recent import ENTRY_BYTES, Recent
from tests.serving.helpers import running_app
from tests.serving.test_proxy_vllm_bidirectional import D_KEPT, chat, vllm_instances

pytestmark = pytest.mark.integration


def test_notes_for_many_conversations_stay_within_their_bytes_and_expire(monkeypatch):
    big_note = {**D_KEPT, "remote_block_ids": [list(range(200))]}  # ~1 KB of JSON each
    monkeypatch.setattr(proxy, "KEPT_BYTES", 32 << 10)
    monkeypatch.setattr(proxy, "KEPT_TTL_S", 3.0)
    monkeypatch.setattr(liveness, "STICKY_BYTES", 16 << 10)
    seen = {"prefill": [], "decode": []}
    p_app, d_app = vllm_instances(seen, big_note)
    with running_app(p_app) as p, running_app(d_app) as d:
        front = proxy.Proxy([d], [p], bidirectional=True)
        with running_app(front.app) as url:
            for i in range(300):
                chat(url, f"conversation-{i}", stream=i % 2 == 0)
            kept = front._kept
            assert kept.bytes <= 32 << 10 and 10 < len(kept) < 40, (kept.bytes, len(kept))
            sticky = list(front.liveness._sticky.values())
            assert sticky and all(s.bytes <= 16 << 10 for s in sticky)
            chat(url, "conversation-299", stream=False)  # the newest note is still there
            assert seen["prefill"][-1]["kv_transfer_params"]["remote_block_ids"] == \
                big_note["remote_block_ids"]
            time.sleep(3.2)
            assert "conversation-298" not in kept and len(kept) <= 1


def test_recent_drops_the_oldest_past_its_bytes_and_everything_past_its_ttl():
    now = [0.0]
    each = 30 + ENTRY_BYTES  # an entry's value and what holding it costs
    r: Recent[str] = Recent(10.0, 3 * each + 10, lambda k, v: len(v), clock=lambda: now[0])
    for i in range(5):
        r.put(f"k{i}", "x" * 30)
        now[0] += 1
    assert len(r) == 3 and r.bytes == 3 * each and "k0" not in r and r.get("k4") == "x" * 30
    r.put("k2", "y" * 30)  # put again: the most recent now, and its clock starts again
    now[0] += 9.5
    assert [k for k in ("k2", "k3", "k4") if k in r] == ["k2"]
    r.put("huge", "z" * (3 * each))  # alone over the bytes: not kept, nothing else dropped
    assert "huge" not in r and "k2" in r
    assert r.pop("k2") == "y" * 30 and r.bytes == 0


def test_the_notes_table_holds_no_more_memory_than_its_budget(monkeypatch):
    """Issue 56, item 10: counted by their JSON's length, 8 MiB of small notes took 3.3x
    that in memory; what is counted now is what they hold."""
    budget = 8 << 20
    monkeypatch.setattr(proxy, "KEPT_BYTES", budget)
    table = proxy.Proxy(["http://127.0.0.1:9"], ["http://127.0.0.1:8"], bidirectional=True)._kept
    note = json.dumps({**D_KEPT, "remote_block_ids": [[1, 2, 3]]})
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(120_000):
            table.put(f"conversation-{i:08d}", ("vllm", note[:-1] + f', "n": {i}}}'))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(table) < 120_000  # the budget was reached
    assert held <= 1.1 * budget, held / budget
