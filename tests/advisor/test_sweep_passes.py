"""A placement's two passes as the sweep runs them (advisor.sweep.steps.Steps.measure), on
scripted outcomes instead of deployments: which rates it measures, and which again."""

import contextlib
from types import SimpleNamespace
from typing import ClassVar

from advisor.engines.placement import Placement
from advisor.goodput.outcomes import Outcome, goodput_interval
from advisor.rundata.slo import DEFAULT_SLO
from advisor.sweep.budget import TimeBudget
from advisor.sweep.kept_placements import KeptPlacements
from advisor.sweep.options import span_s
from advisor.sweep.rate_search import SearchPlan, ratio_width
from advisor.sweep.state import SweepState
from advisor.sweep.steps import Steps


class _Run(tuple):
    """A measured run as (rate, measured again), with no records (none refused)."""

    records: ClassVar[list] = []

    def client_bound(self) -> None:  # its client kept up
        return None


class _Runs:
    """The run directory's side of it: which runs exist, and each measurement written."""

    def __init__(self):
        self.written: list[tuple[float, bool]] = []  # (rate, measured again)

    def has_run(self, _name, rate) -> bool:
        return any(r == rate for r, _ in self.written)

    def write_run(self, run) -> None:
        self.written.append(run)

    def read_run(self, _name, rate, records=False):
        return rate


# collocated's interval [0.74, 1.48]; disaggregated replays from 2.96, missing there (not
# surely) and surely at 5.92, so its second pass steps down to 2.96 / sqrt(2)
COLLOCATED = [Outcome(0.74, True, False, sure_meets=True),
              Outcome(1.48, False, True, sure_misses=True)]
REPLAYED = {2.96: [Outcome(2.96, False, False)],
            5.92: [Outcome(5.92, False, True, sure_misses=True)]}


class _Scripted(Steps):
    """The steps against a fake clock and run directory: each rate's n-th measurement gives
    its n-th outcome in `truth`, and each run takes its requests' span and 2 s more."""

    def __init__(self, truth: dict[float, list[Outcome]], runs: _Runs, budget: TimeBudget,
                 now: list[float], opts):
        state = SweepState(opts, DEFAULT_SLO, SearchPlan(start=0.74), calibration=object(),
                           replay=list(REPLAYED), leader="collocated-2",
                           done={"collocated-2": list(COLLOCATED)})
        bars = SimpleNamespace(add_task=lambda *a, **k: None, advance=lambda *_: None,
                               update=lambda *a, **k: None)
        super().__init__(state, runs, budget, KeptPlacements(contextlib.ExitStack(),
                                                             room=lambda: True), bars)
        self.truth, self.runs, self.now = truth, runs, now

    def deploy(self, p, stack):
        return "url", [], "one"

    def run(self, url, metrics, p, rate, before=None):
        self.now[0] += span_s(self.state.opts, rate) + 2.0
        return _Run((rate, before is not None))

    def outcome(self, p, rate):
        return self.truth[rate][sum(r == rate for r, _ in self.runs.written) - 1]


def _measured(step_down: list[Outcome], budget_s: float | None = None,
              sweep=None) -> tuple[list[tuple[float, bool]], list]:
    """Run disaggregated's passes against COLLOCATED, each rate's n-th measurement giving
    its n-th outcome (REPLAYED, and `step_down` at 2.093), each run taking its requests'
    span and 2 s more on a fake clock, with a time budget of `budget_s` (into `sweep`'s
    namespace when given); (what it measured, its outcomes)."""
    now = [0.0]
    opts = SimpleNamespace(rates=(), num_prompts=None, repeats=1, window_s=16.0,
                           operating_rate=None)
    budget = TimeBudget(budget_s, clock=lambda: now[0])
    runs = _Runs()
    s = _Scripted({**REPLAYED, 2.093: step_down}, runs, budget, now, opts)
    s.measure(Placement("disagg-1p1d", "disagg"), refine=True)
    if sweep is not None:
        sweep.budget = s.budget
    return runs.written, s.state.done["disagg-1p1d"]


def test_a_bound_the_second_pass_finds_within_noise_is_measured_again():
    # disaggregated missed at every replayed rate, then met at the step down for 0.97 of 33
    # requests, not surely (a sweep of 2026-12-02): measured again, it surely meets and the
    # intervals part. Before, the step down was left unsure and the interval stayed
    # [0, 5.92], within noise of collocated's.
    written, outcomes = _measured([Outcome(2.093, True, False),
                                   Outcome(2.093, True, False, sure_meets=True, topped_up=True)])
    assert written == [(2.96, False), (5.92, False), (2.093, False), (2.093, True)]
    assert goodput_interval(outcomes) == (2.093, 5.92)


def test_the_second_pass_starts_no_run_that_would_end_past_the_time_budget():
    # the replayed first pass (2.96 and 5.92 req/s) takes ~36 s on the fake clock; the step
    # down's ~16 s of requests and the 2 s every run took beyond its span would end past a
    # 50 s budget: it is not measured, and the evidence says the budget ended the search
    unsure = [Outcome(2.093, True, False), Outcome(2.093, True, False, sure_meets=True)]
    out = SimpleNamespace()
    written, outcomes = _measured(unsure, budget_s=50.0, sweep=out)
    assert written == [(2.96, False), (5.92, False)]
    assert out.budget.spent and out.budget.extra_s == 2.0
    assert "time budget (50 s, --time-budget; 0 for none) ran out" in out.budget.note()
    assert goodput_interval(outcomes) == (0.0, 5.92)  # still open: within noise
    # with the time to spare, the same sweep goes on as before, and the budget says nothing
    written, _ = _measured(unsure, budget_s=90.0, sweep=out)
    assert written == [(2.96, False), (5.92, False), (2.093, False), (2.093, True)]
    assert not out.budget.spent and out.budget.note() is None


def test_a_second_pass_that_parts_the_intervals_searches_no_further():
    # the same, but the step down surely meets at once: nothing is measured again, and no
    # bisection follows (the intervals have parted)
    written, _ = _measured([Outcome(2.093, True, False, sure_meets=True)])
    assert written == [(2.96, False), (5.92, False), (2.093, False)]


def test_the_budget_adds_a_start_for_a_placement_not_running_and_the_median_overrun():
    now = [0.0]
    budget = TimeBudget(100.0, clock=lambda: now[0])

    with budget.timing():  # a start
        now[0] += 12.0
    for took in (12.0, 13.0, 40.0):  # runs of 10 s of requests; the last drained a queue
        with budget.timing(span_s=10.0):
            now[0] += took
    assert budget.start_s == 12.0 and budget.extra_s == 3.0
    # 77 s spent: 10 s of requests and 3 more end at 90 while running, at 102 with a start
    assert budget.fits(10.0, live=True) and not budget.spent
    assert not budget.fits(10.0, live=False) and budget.spent
    assert not budget.fits(0.1, live=True)  # once one did not fit, nothing more starts
    assert TimeBudget(None).fits(1e9, live=False)


# the third pass: collocated [0.74, 1.48], disaggregated [2.093, 5.92], a ratio between
# 1.41x and 8.0x (5.7x wide); each bisection at the wider interval's geometric middle
SHARPEN = {3.52: [Outcome(3.52, True, False, sure_meets=True)],
           1.0465: [Outcome(1.0465, False, False, sure_misses=True)],
           4.5649: [Outcome(4.5649, True, False, sure_meets=True)]}


def _sharpened(budget_s: float | None, truth: dict | None = None,
               collocated: list[Outcome] | None = None) -> tuple[list[tuple[float, bool]], Steps]:
    """The third pass against COLLOCATED (or `collocated`) and disaggregated's [2.093, 5.92],
    each rate's n-th measurement giving its n-th outcome in `truth` (default SHARPEN)."""
    now = [0.0]
    opts = SimpleNamespace(rates=(), num_prompts=None, repeats=1, window_s=16.0,
                           operating_rate=None)
    runs = _Runs()
    s = _Scripted(truth or SHARPEN, runs, TimeBudget(budget_s, clock=lambda: now[0]), now, opts)
    if collocated is not None:
        runs.written += [(o.rate, False) for o in collocated if not o.sure_misses]
        s.state.done["collocated-2"] = collocated
    s.state.done["disagg-1p1d"] = [Outcome(2.093, True, False, sure_meets=True),
                                   Outcome(5.92, False, True, sure_misses=True)]
    s.sharpen([Placement("collocated-2", "collocated"), Placement("disagg-1p1d", "disagg")])
    return runs.written, s


def test_the_third_pass_bisects_until_the_ratio_is_stated_narrower_than_2x():
    from advisor.sweep.rate_search import ratio_width

    written, s = _sharpened(None)
    # the wider interval first: disaggregated's (2.8x), then collocated's (2x), then
    # disaggregated's again; stopped once the ratio's interval is under 2x
    assert [r for r, _ in written] == [3.52, 1.0465, 4.5649]
    done = s.state.done
    assert goodput_interval(done["collocated-2"]) == (0.74, 1.0465)
    assert goodput_interval(done["disagg-1p1d"]) == (4.5649, 5.92)
    assert ratio_width(done["disagg-1p1d"], done["collocated-2"]) < 2


def test_the_third_pass_stops_at_the_budget_and_the_evidence_says_so():
    written, s = _sharpened(30.0)  # one run of ~18 s fits, the next does not
    assert [r for r, _ in written] == [3.52]
    assert s.budget.spent and "ran out before its search was done" in s.budget.note()


def test_the_third_pass_first_measures_again_a_bound_within_noise():
    # collocated met at 0.74 but not surely: its interval is [0, 1.48] and the ratio has
    # no bound; measured again, 0.74 surely meets, and bisection goes on from there
    truth = {0.74: [Outcome(0.74, True, False), Outcome(0.74, True, False, sure_meets=True,
                                                        topped_up=True)], **SHARPEN}
    written, s = _sharpened(None, truth, [Outcome(0.74, True, False),
                                          Outcome(1.48, False, True, sure_misses=True)])
    assert written[1:] == [(0.74, True), (3.52, False), (1.0465, False), (4.5649, False)]
    assert goodput_interval(s.state.done["collocated-2"]) == (0.74, 1.0465)


def test_a_bisection_within_noise_is_measured_again_before_giving_up():
    # collocated's bisection at 1.0465 missed, not surely (a sweep of 2026-12-06 stopped
    # there with the ratio 2.2x wide); measured again, it surely misses
    truth = {**SHARPEN, 1.0465: [Outcome(1.0465, False, False),
                                 Outcome(1.0465, False, False, sure_misses=True,
                                         topped_up=True)]}
    written, s = _sharpened(None, truth)
    assert written == [(3.52, False), (1.0465, False), (1.0465, True), (4.5649, False)]
    assert goodput_interval(s.state.done["collocated-2"]) == (0.74, 1.0465)


def test_the_third_pass_steps_down_until_collocated_surely_meets():
    # the default sweep of 2026-12-07 (Zen 4): collocated missed at 1.1 and surely at 2.2,
    # so it surely met at no rate and no ratio was bounded; halving its lowest rate finds
    # one that surely meets (0.55), and from there the ratio is bounded
    truth = {**SHARPEN, 0.55: [Outcome(0.55, True, False, sure_meets=True)],
             0.7778: [Outcome(0.7778, True, False, sure_meets=True)],
             1.1: [Outcome(1.1, False, False),
                   Outcome(1.1, False, False, sure_misses=True, topped_up=True)]}
    written, s = _sharpened(None, truth, [Outcome(1.1, False, False),
                                          Outcome(2.2, False, True, sure_misses=True)])
    assert written[1] == (0.55, False)  # [0]: 1.1, as the sweep wrote it
    assert goodput_interval(s.state.done["collocated-2"]) == (0.7778, 1.1)
    assert ratio_width(s.state.done["disagg-1p1d"], s.state.done["collocated-2"]) < 2


def test_the_third_pass_steps_down_at_most_twice_below_the_first_rate():
    # nothing ever surely meets: 0.37 and 0.185 are tried (the first rate 0.74), no lower
    truth = {r: [Outcome(r, False, False, sure_misses=True)] for r in (0.37, 0.185)}
    truth[5.1985] = [Outcome(5.1985, True, False, sure_meets=True)]  # disaggregated's
    written, s = _sharpened(None, {**SHARPEN, **truth},
                            [Outcome(0.74, False, False),
                             Outcome(1.48, False, True, sure_misses=True)])
    assert [r for r, _ in written if r < 0.74] == [0.37, 0.185]
    assert goodput_interval(s.state.done["collocated-2"])[0] == 0


def test_the_third_pass_does_not_step_down_a_placement_whose_failures_alone_missed():
    # every other request failed at its lowest rate: no lower rate would meet the SLO
    truth = {**SHARPEN, 5.1985: [Outcome(5.1985, True, False, sure_meets=True)]}
    written, _ = _sharpened(None, truth, [
        Outcome(0.74, False, False, failing=True),
        Outcome(1.48, False, True, sure_misses=True, failing=True)])
    assert all(r >= 0.74 for r, _ in written)
