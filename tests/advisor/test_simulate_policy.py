"""The simulator's scheduling against the engine's own (torch-free) scheduler and block
manager: with every step lasting 1 ms, the step at which each request gets each token
must be the same, KV to spare or not (queueing, preemption and recompute included)."""

import random

import pytest

from advisor.plan.simulate import simulate
from advisor.plan.steptime import FittedStep
from advisor.plan.system import EngineSpec, SimRequest, System
from engine.core.block_manager import BlockManager
from engine.core.scheduler import Scheduler
from engine.core.sequence import Request, SamplingParams

ONE_MS = FittedStep(1.0, 0.0, 1.0, 0.0, 0.0, "every step 1 ms")
BS = 16


def engine_times(reqs: list[SimRequest], blocks: int, budget: int, seqs: int,
                 chunked: bool) -> tuple[list[list[float]], int]:
    """For each request, the ms at which it got each token, run through the engine's
    scheduler: every step 1 ms, a request joining at the first step that starts at or
    after its arrival, an idle engine starting one when a request arrives; and how many
    preemptions there were."""
    bm = BlockManager(blocks, BS, enable_prefix_caching=False)
    sched = Scheduler(bm, budget, seqs, chunked, eos_token_id=None)
    order = sorted(range(len(reqs)), key=lambda i: reqs[i].arrival)
    got: list[list[float]] = [[] for _ in reqs]
    now, preempted = 0.0, 0
    while order or sched.has_work():
        if not sched.has_work():
            now = max(now, reqs[order[0]].arrival * 1000)
        while order and reqs[order[0]].arrival * 1000 <= now + 1e-9:
            i = order.pop(0)
            r = reqs[i]  # NOTE: LLMEngine.add_request refuses these two at once
            if bm.blocks_needed(r.prompt + r.output) > blocks or \
                    (not chunked and r.prompt + r.output - 1 > budget):
                continue
            sched.add(Request(str(i), [7] * reqs[i].prompt,
                              SamplingParams(max_tokens=reqs[i].output, ignore_eos=True)))
        if not sched.has_work():  # what arrived was refused
            continue
        out = sched.schedule()
        assert not out.is_empty, "work that can never run"
        sampled = {r.request_id: 1 for r, n in out.scheduled
                   if r.num_computed_tokens + n == r.num_tokens}
        for r in sched.update_from_output(out, sampled):
            bm.free(r)
            preempted += r.num_preemptions
        now += 1.0
        for rid in sampled:
            got[int(rid)].append(now)
    return got, preempted


def sim_times(reqs: list[SimRequest], blocks: int, budget: int, seqs: int,
              chunked: bool) -> list[list[float]]:
    spec = EngineSpec(ONE_MS, blocks * BS, budget, seqs, chunked, block_size=BS)
    out = simulate(System((spec,), front_ms=0.0), reqs)
    return [[(t - rec.sent + r.arrival) * 1000 for t in rec.chunks]
            for rec, r in zip(out.records, reqs)]


def workload(n: int, seed: int, rate_per_ms: float) -> list[SimRequest]:
    rng = random.Random(seed)
    t, reqs = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate_per_ms)
        reqs.append(SimRequest(t / 1000, rng.randint(5, 120),
                               rng.randint(1, 60)))
    return reqs


@pytest.mark.parametrize(("blocks", "preempting"), [(10_000, False), (40, True), (24, True)])
@pytest.mark.parametrize("chunked", [True, False])
def test_the_simulator_schedules_as_the_engine_does(blocks, preempting, chunked):
    reqs = workload(60, seed=blocks, rate_per_ms=0.4)
    want, preempted = engine_times(reqs, blocks, 128, 8, chunked)
    assert (preempted > 0) == preempting  # the case is what it is meant to be
    got = sim_times(reqs, blocks, 128, 8, chunked)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == pytest.approx(w), (i, reqs[i])
