"""A rate counts as sustained only when its placement completed requests as fast as they
arrived: attainment over a short run cannot see a queue that is still growing."""

import pytest

from advisor.measure.records import Endpoint
from advisor.measure.run import measure
from advisor.measure.stats import summarize
from advisor.rundata.result import KEEP_PACE, RunResult
from advisor.sweep.rate_search import outcome_of
from tests.advisor.helpers import scripted, workload

SLOS = {"ttft": 2000.0, "itl": 100.0}


def _run(url, w, cap=None) -> RunResult:
    run = measure(Endpoint(url, "scripted"), w, max_concurrency=cap)
    return RunResult.of(summarize(run.records, run.duration, SLOS, [50, 99]),
                        num_prompts=w.num_requests, request_rate=50.0,
                        arrival_offsets=[c.start for c in w.conversations])


def test_pace_is_completions_over_the_arrivals_own_rate():
    stats = {"completed": 11, "failed": 0, "slo_attainment": 1.0, "duration": 11.0}
    steady = RunResult.of(stats, num_prompts=11, arrival_offsets=[i * 1.0 for i in range(11)])
    assert steady.pace() == pytest.approx(1.0)  # 11 in 11 s, arriving at 1 per s over 10 s
    chats = RunResult.of(stats, num_prompts=11, multi_turn=True,
                         arrival_offsets=[i * 1.0 for i in range(11)])
    assert chats.pace() is None


@pytest.mark.integration
def test_a_run_that_fell_behind_its_arrivals_surely_misses_whatever_its_attainment():
    # 40 requests at ~50 req/s of ~100 ms each: the scripted server keeps up with any
    # load; one request at a time (the client's cap) serves ~10 per second, and the queue
    # waits before each send, where TTFT does not see it: every request meets the SLO
    w = workload(n=40, out=6, rate=50.0)
    with scripted(ttft_ms=50, itl_ms=10) as url:
        free, capped = _run(url, w), _run(url, w, cap=1)
    assert free.get("slo_attainment") == capped.get("slo_attainment") == 1.0
    assert free.pace() > 0.9 and capped.pace() < KEEP_PACE
    kept, fell = (outcome_of(r, 50.0, 0.9, SLOS["itl"]) for r in (free, capped))
    assert kept.meets and not kept.behind
    assert fell.behind and not fell.meets and fell.sure_misses and not fell.sure_meets
