"""A placement's two passes as the sweep runs them (advisor.sweep.sweep._Sweep.measure), on
scripted outcomes instead of deployments: which rates it measures, and which again."""

from types import SimpleNamespace

from advisor.sweep import sweep as sweep_module
from advisor.sweep.placements import Placement
from advisor.sweep.rate_search import Outcome, SearchPlan, goodput_interval


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


def _measured(truth: dict[float, list[Outcome]], others: dict[str, list[Outcome]],
              replay: list[float], start: float) -> tuple[list[tuple[float, bool]], list]:
    """Run a follower placement's passes, each rate's n-th measurement giving
    truth[rate][n - 1]; (what it measured, its outcomes)."""
    runs = _Runs()
    s = object.__new__(sweep_module._Sweep)
    s.run_dir, s.task, s.opts = runs, None, SimpleNamespace(rates=())
    s.bars = SimpleNamespace(advance=lambda *_: None, update=lambda *a, **k: None)
    s.calibration, s.calibrates, s.missed = object(), False, None
    s.plan, s.grid, s.replay = SearchPlan(start=start), None, replay
    s.leader, s.done = "collocated-2", dict(others)
    s._deploy = lambda p, stack: ("url", [], "one")
    s._run_one = lambda url, metrics, p, rate, before=None: (rate, before is not None)
    s._outcome = lambda p, rate: truth[rate][sum(r == rate for r, _ in runs.written) - 1]
    s.measure(Placement("disagg-1p1d", "disagg"), refine=True)
    return runs.written, s.done["disagg-1p1d"]


def test_a_bound_the_second_pass_finds_within_noise_is_measured_again():
    # collocated [0.74, 1.48]; disaggregated missed at every replayed rate, then met at the
    # step down for 0.97 of 33 requests, not surely (a sweep of 2026-12-02): measured again,
    # it surely meets and the intervals part. Before, the step down was left unsure and the
    # interval stayed [0, 5.92], within noise of collocated's.
    collocated = [Outcome(0.74, True, False, sure_meets=True),
                  Outcome(1.48, False, True, sure_misses=True)]
    truth = {2.96: [Outcome(2.96, False, False)],
             5.92: [Outcome(5.92, False, True, sure_misses=True)],
             2.093: [Outcome(2.093, True, False),
                     Outcome(2.093, True, False, sure_meets=True, topped_up=True)]}
    written, outcomes = _measured(truth, {"collocated-2": collocated}, [2.96, 5.92], 0.74)
    assert written == [(2.96, False), (5.92, False), (2.093, False), (2.093, True)]
    assert goodput_interval(outcomes) == (2.093, 5.92)


def test_a_second_pass_that_parts_the_intervals_searches_no_further():
    # the same, but the step down surely meets at once: nothing is measured again, and no
    # bisection follows (the intervals have parted)
    collocated = [Outcome(0.74, True, False, sure_meets=True),
                  Outcome(1.48, False, True, sure_misses=True)]
    truth = {2.96: [Outcome(2.96, False, False)],
             5.92: [Outcome(5.92, False, True, sure_misses=True)],
             2.093: [Outcome(2.093, True, False, sure_meets=True)]}
    written, _ = _measured(truth, {"collocated-2": collocated}, [2.96, 5.92], 0.74)
    assert written == [(2.96, False), (5.92, False), (2.093, False)]
