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


# collocated's interval [0.74, 1.48]; disaggregated replays from 2.96, missing there (not
# surely) and surely at 5.92, so its second pass steps down to 2.96 / sqrt(2)
COLLOCATED = [Outcome(0.74, True, False, sure_meets=True),
              Outcome(1.48, False, True, sure_misses=True)]
REPLAYED = {2.96: [Outcome(2.96, False, False)],
            5.92: [Outcome(5.92, False, True, sure_misses=True)]}


def _measured(step_down: list[Outcome]) -> tuple[list[tuple[float, bool]], list]:
    """Run disaggregated's passes against COLLOCATED, each rate's n-th measurement giving
    its n-th outcome (REPLAYED, and `step_down` at 2.093); (what it measured, its
    outcomes)."""
    truth = {**REPLAYED, 2.093: step_down}
    runs = _Runs()
    s = object.__new__(sweep_module._Sweep)
    s.run_dir, s.task, s.opts = runs, None, SimpleNamespace(rates=())
    s.bars = SimpleNamespace(advance=lambda *_: None, update=lambda *a, **k: None)
    s.calibration, s.calibrates, s.missed = object(), False, None
    s.plan, s.grid, s.replay = SearchPlan(start=0.74), None, list(REPLAYED)
    s.leader, s.done = "collocated-2", {"collocated-2": COLLOCATED}
    s._deploy = lambda p, stack: ("url", [], "one")
    s._run_one = lambda url, metrics, p, rate, before=None: (rate, before is not None)
    s._outcome = lambda p, rate: truth[rate][sum(r == rate for r, _ in runs.written) - 1]
    s.measure(Placement("disagg-1p1d", "disagg"), refine=True)
    return runs.written, s.done["disagg-1p1d"]


def test_a_bound_the_second_pass_finds_within_noise_is_measured_again():
    # disaggregated missed at every replayed rate, then met at the step down for 0.97 of 33
    # requests, not surely (a sweep of 2026-12-02): measured again, it surely meets and the
    # intervals part. Before, the step down was left unsure and the interval stayed
    # [0, 5.92], within noise of collocated's.
    written, outcomes = _measured([Outcome(2.093, True, False),
                                   Outcome(2.093, True, False, sure_meets=True, topped_up=True)])
    assert written == [(2.96, False), (5.92, False), (2.093, False), (2.093, True)]
    assert goodput_interval(outcomes) == (2.093, 5.92)


def test_a_second_pass_that_parts_the_intervals_searches_no_further():
    # the same, but the step down surely meets at once: nothing is measured again, and no
    # bisection follows (the intervals have parted)
    written, _ = _measured([Outcome(2.093, True, False, sure_meets=True)])
    assert written == [(2.96, False), (5.92, False), (2.093, False)]
