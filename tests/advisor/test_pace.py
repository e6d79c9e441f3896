"""A rate counts as sustained only when its placement completed requests as fast as they
arrived: attainment over a short run cannot see a queue that is still growing."""

import pytest

from advisor.goodput.outcomes import outcome_of
from advisor.measure.records import Endpoint
from advisor.measure.stats import summarize
from advisor.measure.workload_run import measure
from advisor.rundata.result import KEEP_PACE, RunResult
from advisor.rundata.slo import Slo
from advisor.rundata.stats import RunStats
from tests.advisor.helpers import scripted, workload
from workloads.arrivals import Arrivals
from workloads.lengths import LengthDist
from workloads.spec import SyntheticSpec, synthesize

SLOS = Slo.of(2000, 100)


def _read(stats: dict) -> RunStats:
    """Statistics as a result.json holds them."""
    return RunStats.from_json(stats, "a test")


def _run(url, w, cap=None, rate=50.0) -> RunResult:
    run = measure(Endpoint(url, "scripted"), w, max_concurrency=cap)
    return RunResult.of(summarize(run.records, run.duration, SLOS, [50, 99]),
                        num_prompts=w.num_requests, request_rate=rate,
                        arrival_offsets=[c.start for c in w.conversations],
                        multi_turn=w.multi_turn)


def test_pace_is_completions_over_the_arrivals_own_rate():
    stats = {"completed": 11, "failed": 0, "slo_attainment": 1.0, "duration": 11.0}
    steady = RunResult.of(_read(stats), num_prompts=11,
                          arrival_offsets=[i * 1.0 for i in range(11)])
    assert steady.pace() == pytest.approx(1.0)  # 11 in 11 s, arriving at 1 per s over 10 s
    chats = RunResult.of(_read(stats), num_prompts=11, multi_turn=True,
                         arrival_offsets=[i * 1.0 for i in range(11)])
    assert chats.pace() is None  # recorded before conversations' statistics were


def test_multi_turn_pace_counts_conversations_and_at_most_the_load_they_built():
    def chats(offsets, life_s, duration, rate, peak):
        stats = {"completed": 40, "failed": 0, "slo_attainment": 1.0, "duration": duration,
                 "completed_conversations": 10, "conversation_life_ms": life_s * 1000,
                 "early_conversation_ms": life_s * 1000, "peak_conversations": peak}
        return RunResult.of(_read(stats), num_prompts=40, request_rate=rate, multi_turn=True,
                            arrival_offsets=offsets)

    # 10 conversations of 4 turns and 1 s each, one a second (4 req/s): done 1 s after the
    # last arrived (10 done against the 9 that the 9 s between first and last arrival hold)
    steady = [float(i) for i in range(10)]
    assert chats(steady, 1.0, 10.0, 4.0, 1).pace() == pytest.approx(1.0)  # the rate's 1
    assert chats(steady, 1.0, 15.0, 4.0, 1).pace() < KEEP_PACE  # fell behind
    # 10 within 0.9 s at 40 req/s (10 conversations a second), lasting 3 s: the rate keeps
    # 30 under way, the run never more than its 10, though all were done as fast as they came
    burst = [i * 0.1 for i in range(10)]
    assert chats(burst, 3.0, 3.9, 40.0, 10).pace() == pytest.approx(1 / 3)
    # the same draw at 4 req/s: a chance burst above the rate's 3 under way, not short of it
    assert chats(burst, 3.0, 3.9, 4.0, 10).pace() == pytest.approx(10 / 9)


def test_single_turn_pace_is_at_most_the_load_its_requests_built():
    def run(offsets, life_s, peak, rate=10.0):
        n = len(offsets)
        stats = {"completed": n, "failed": 0, "slo_attainment": 1.0,
                 "duration": offsets[-1] + life_s, "early_e2el_ms": life_s * 1000,
                 "request_life_ms": life_s * 1000, "peak_requests": peak}
        return RunResult.of(_read(stats), num_prompts=n, request_rate=rate, arrival_offsets=offsets)

    # 100 requests at 10 req/s lasting 2 s each: 20 under way from 2 s on, all done in time
    steady = [i * 0.1 for i in range(100)]
    assert run(steady, 2.0, 20).pace() == pytest.approx(1.0)
    # the same 100 lasting 20 s: the rate keeps 200 under way, the run never more than 100
    assert run(steady, 20.0, 100).pace() == pytest.approx(0.5)
    # 6 drawn within 20 ms at 64 req/s, 40 ms each: a chance burst (all 6 under way), not a
    # run short of the 2.6 the rate keeps under way
    burst = [i * 0.004 for i in range(6)]
    assert run(burst, 0.04, 6, rate=64.0).pace() == pytest.approx(6 * 0.06 / (5 * 0.06))
    # a run recorded before the load's statistics: completions alone
    old = RunResult.of(RunStats(100, 0, 1.0, duration=11.9, early_e2el_ms=2000.0),
                       num_prompts=100, arrival_offsets=steady)
    assert old.pace() == pytest.approx(100 / 99)


def test_summaries_count_the_requests_under_way_at_once():
    from advisor.measure.records import RequestRecord

    def rec(i, start, end):  # scheduled at `start`, its one chunk at `end`
        r = RequestRecord(i, f"c{i}", 0, False, start, start, start, prompt_tokens=4)
        r.chunks, r.end, r.status, r.output_tokens = [end], end, 200, 1
        return r

    # three overlapping (0-3, 1-4, 2-5), then one that starts as the first two have ended
    recs = [rec(0, 0.0, 3.0), rec(1, 1.0, 4.0), rec(2, 2.0, 5.0), rec(3, 4.0, 5.0)]
    stats = summarize(recs, 5.0, SLOS, [50])
    assert stats["peak_requests"] == 3 and stats["request_life_ms"] == pytest.approx(3000)


@pytest.mark.integration
@pytest.mark.slow  # a run against a scripted server, ~5 s
def test_a_run_that_fell_behind_its_arrivals_surely_misses_whatever_its_attainment():
    # 40 requests at ~50 req/s of ~100 ms each: the scripted server keeps up with any
    # load; one request at a time (the client's cap) serves ~10 per second, and the queue
    # waits before each send, where TTFT does not see it: every request meets the SLO
    w = workload(n=40, out=6, rate=50.0)
    with scripted(ttft_ms=50, itl_ms=10) as url:
        free, capped = _run(url, w), _run(url, w, cap=1)
    assert free.get("slo_attainment") == capped.get("slo_attainment") == 1.0
    assert free.pace() > 0.9 and capped.pace() < KEEP_PACE
    kept, fell = (outcome_of(r, 50.0, 0.9, SLOS) for r in (free, capped))
    assert kept.meets and not kept.behind
    assert fell.behind and not fell.meets and fell.sure_misses and not fell.sure_meets


@pytest.mark.integration
@pytest.mark.slow  # a load drill of 10 s or more
def test_a_multi_turn_run_whose_conversations_came_at_once_did_not_carry_its_rate():
    # 10 conversations of 4 turns with ~0.3 s of thought between: at 1000 req/s they all
    # start at once and overlap, so the server sees what 10 users send, not 1000 req/s
    def chats(rate):
        return synthesize(SyntheticSpec(input=LengthDist("fixed", 8),
                                        output=LengthDist("fixed", 4),
                                        arrivals=Arrivals("poisson", rate), num_prompts=40,
                                        turns=4, think_s=0.3), 0)
    with scripted(ttft_ms=20, itl_ms=5) as url:
        burst, steady = (_run(url, chats(rate), rate=rate) for rate in (1000.0, 8.0))
    for r in (burst, steady):
        assert r.get("slo_attainment") == 1.0 and r.get("completed_conversations") == 10
    assert burst.pace() < 0.2 and steady.pace() > KEEP_PACE
    assert outcome_of(burst, 1000.0, 0.9, SLOS).sure_misses
    assert outcome_of(steady, 8.0, 0.9, SLOS).meets
