"""Intervals behind the advice: bootstrap 95% intervals of a run's statistics, the bracket of
a placement's max goodput, and when two placements are told apart with confidence."""

import numpy as np
import pytest

from advisor.goodput.outcomes import Outcome, goodput_interval
from advisor.measure.confidence import intervals, requests_to_separate


def test_intervals_bracket_the_truth_and_are_reproducible():
    rng = np.random.default_rng(1)
    good = list(rng.random(200) < 0.8)
    ttft = list(rng.normal(300, 30, 200))
    itl = [list(rng.exponential(20, 50)) for _ in range(200)]
    ci = intervals(good, ttft, itl)
    assert ci["slo_attainment"][0] < 0.8 < ci["slo_attainment"][1]
    assert ci["slo_attainment"][1] - ci["slo_attainment"][0] < 0.15  # ~±1.96 sqrt(.16/200)
    assert ci["median_ttft_ms"][0] < 300 < ci["median_ttft_ms"][1]
    true_p99 = 20 * np.log(100)  # exponential(20)'s 99th percentile
    assert ci["p99_itl_ms"][0] < true_p99 * 1.1 and ci["p99_itl_ms"][1] > true_p99 * 0.9
    assert intervals(good, ttft, itl) == ci


def test_more_requests_narrow_the_attainment_interval():
    def width(n):
        ci = intervals([i % 4 != 0 for i in range(n)], [1.0] * n, [[1.0]] * n)["slo_attainment"]
        return ci[1] - ci[0]
    assert width(400) < width(100) / 1.5


def test_a_conversations_turns_are_resampled_together():
    # 10 conversations of 5 turns, each wholly good or wholly bad (as turns on one slow
    # instance are): 50 requests, but only 10 independent draws
    groups = [f"c{i // 5}" for i in range(50)]
    good = [i // 5 % 2 == 0 for i in range(50)]
    ttft = [100.0 + 50 * (i // 5) for i in range(50)]
    itl = [[10.0 + i // 5] * 4 for i in range(50)]

    def width(ci, key):
        return ci[key][1] - ci[key][0]
    alone, whole = intervals(good, ttft, itl), intervals(good, ttft, itl, groups)
    for key in ("slo_attainment", "median_ttft_ms"):
        assert width(whole, key) > 1.5 * width(alone, key)
    assert whole["slo_attainment"][0] < 0.5 < whole["slo_attainment"][1]
    # one request per conversation: the same as resampling requests
    assert intervals(good, ttft, itl, [str(i) for i in range(50)]) == alone


def test_failed_requests_count_and_have_no_latency():
    ci = intervals([False, False], [None, None], [[], []])
    assert ci == {"slo_attainment": [0.0, 0.0], "median_ttft_ms": None, "p99_itl_ms": None}


@pytest.mark.parametrize("done,expected", [
    # surely met at 1, surely missed at 2: the maximum lies in [1, 2]
    ([Outcome(1, True, False, True, False), Outcome(2, False, True, False, True)], (1, 2)),
    # met at 2 only by its point estimate: the interval widens down to 1
    ([Outcome(1, True, False, True, False), Outcome(2, True, False, False, False),
      Outcome(4, False, True, False, True)], (1, 4)),
    # every rate surely met: no upper bound from what was tried
    ([Outcome(1, True, False, True, False), Outcome(2, True, False, True, False)], (2, None)),
    ([Outcome(1, False, True, False, True)], (0.0, 1)),
])
def test_the_goodput_interval_is_what_the_attainment_intervals_allow(done, expected):
    assert goodput_interval(done) == expected


def test_requests_to_separate_grows_as_the_gap_narrows():
    wide = requests_to_separate(30, 0.80, [0.65, 0.95], 0.70, [0.55, 0.85])
    narrow = requests_to_separate(30, 0.80, [0.65, 0.95], 0.76, [0.61, 0.91])
    assert 30 < wide < narrow
    assert requests_to_separate(30, 0.9, [0.8, 1.0], 0.9, [0.8, 1.0]) == 0


def test_a_lopsided_interval_that_holds_the_target_asks_for_more_than_ran():
    """Measured: 0.95 in [0.896, 0.99] at 77 requests, against the 0.9 target; its lower
    side (0.054) is past the gap (0.05), so 77 cannot be enough: (0.054 / 0.05)^2 x 77."""
    assert requests_to_separate(77, 0.95, [0.896, 0.99], 0.9, [0.9, 0.9]) == 90
    assert requests_to_separate(77, 0.9, [0.9, 0.9], 0.95, [0.896, 0.99]) == 90  # either order
