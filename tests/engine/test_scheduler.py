"""The scheduler on the CPU with fabricated model outputs (no torch, no model)."""

from engine.core.block_manager import BlockManager
from engine.core.scheduler import Scheduler
from engine.core.sequence import FinishReason, Request, SamplingParams, Status


def make(budget=16, blocks=64, chunked=True, max_seqs=8, block_size=4):
    return Scheduler(BlockManager(blocks, block_size), budget, max_seqs, chunked, eos_token_id=2)


def add(s, rid, n, max_tokens=4, **kw):
    base = 1000 * ord(rid[0])  # distinct prompts: no accidental prefix sharing
    r = Request(rid, list(range(base, base + n)),
                SamplingParams(max_tokens=max_tokens, **kw))
    s.add(r)
    return r


def step(s, token=7):
    """One step with a fake model that samples `token` for every caught-up request."""
    out = s.schedule()
    sampled = {r.request_id: token for r, n in out.scheduled
               if r.num_computed_tokens + n == r.num_tokens}
    return out, s.update_from_output(out, sampled)


def test_budget_is_respected_and_prefill_is_chunked():
    s = make(budget=16)
    a = add(s, "a", 40)
    sizes = []
    while a.num_computed_tokens < 40:
        out, _ = step(s)
        sizes.append(out.num_batched_tokens)
    assert sizes == [16, 16, 8]
    assert a.output_token_ids == [7]


def test_decodes_go_first_then_prefill_fills_the_budget():
    s = make(budget=10)
    add(s, "a", 3)
    step(s)  # a prefilled, now decoding
    b = add(s, "b", 30)
    out, _ = step(s)
    assert [(r.request_id, n) for r, n in out.scheduled] == [("a", 1), ("b", 9)]
    out, _ = step(s)
    assert [(r.request_id, n) for r, n in out.scheduled] == [("a", 1), ("b", 9)]
    assert b.num_computed_tokens == 18


def test_without_chunking_a_prefill_waits_for_a_budget_it_fits():
    s = make(budget=20, chunked=False)
    add(s, "a", 15)
    add(s, "b", 10)
    out, _ = step(s)
    assert [(r.request_id, n) for r, n in out.scheduled] == [("a", 15)]


def test_stop_conditions():
    s = make()
    a = add(s, "a", 3, max_tokens=2)
    b = add(s, "b", 3, max_tokens=5)
    c = add(s, "c", 3, max_tokens=5, ignore_eos=True)
    d = add(s, "d", 3, max_tokens=5, stop_token_ids=[7])
    finished = []
    for _ in range(3):
        finished += step(s, token=2)[1]  # 2 is EOS
    assert a.finish_reason is FinishReason.STOP and b.finish_reason is FinishReason.STOP
    assert c.status is Status.RUNNING
    assert d.finish_reason is FinishReason.STOP  # eos also stops d
    while c.status is Status.RUNNING:
        step(s, token=2)
    assert c.finish_reason is FinishReason.LENGTH and len(c.output_token_ids) == 5


def test_preemption_picks_the_latest_admitted_and_requeues_it_first():
    s = make(budget=64, blocks=5, block_size=4)
    a = add(s, "a", 8, max_tokens=20)
    b = add(s, "b", 8, max_tokens=20)
    step(s)  # a and b hold 2 blocks each
    step(s)  # 9 tokens each: a takes the 5th block, b is preempted
    assert b.status is Status.WAITING and b.num_preemptions == 1 and b.block_ids == []
    assert s.waiting[0] is b and a.num_computed_tokens == 9


def test_max_num_seqs_caps_admission():
    s = make(max_seqs=2)
    for rid in "abc":
        add(s, rid, 2)
    out, _ = step(s)
    assert len(out.scheduled) == 2 and len(s.waiting) == 1
