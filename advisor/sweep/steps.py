"""A sweep's measuring, step by step. For each placement: deploy it (or find it kept),
calibrate on the first deployment, run its first pass, then, where its goodput interval
still overlaps another's and the time budget allows, its second pass (each rate within
noise measured again first, then the search's next rate: advisor.sweep.rate_search), then
the user's operating rate; last, where the decision states a ratio of max goodputs, the
two placements' intervals bisected until it is narrower than 2x (`sharpen`). Every step
reads and extends one `SweepState`; what a deployment is and how a rate is run are the
subclass's (advisor.sweep.sweep.Sweep)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from functools import partial

from advisor.engines.placement import Placement
from advisor.errors import UsageError
from advisor.goodput.outcomes import Outcome, goodput_interval, max_goodput_rate, outcome_of
from advisor.measure.failures import refused
from advisor.output.progress import Bars
from advisor.rundata.result import RunResult
from advisor.rundata.rundir import RunDir
from advisor.sweep.budget import TimeBudget
from advisor.sweep.kept_placements import KeptPlacements, OnDemand
from advisor.sweep.options import span_s
from advisor.sweep.rate_search import (
    grid_of,
    next_rate,
    others_of,
    replay_grid,
    to_refine,
    to_sharpen,
    top_up,
    unsettled,
)
from advisor.sweep.state import SweepState

Urls = tuple[str, list[str], str]  # front URL, every instance's /metrics, one instance's URL


def _best_pair(placements: list[Placement], done: dict[str, list[Outcome]]
               ) -> tuple[str, str] | None:
    """The collocated and the disaggregated placement of most goodput, which the decision
    compares; None without one of each."""
    best = {}
    for kind in ("collocated", "disagg"):
        of = [p.name for p in placements if p.kind == kind and done.get(p.name)]
        if of:
            best[kind] = max(of, key=lambda n: max_goodput_rate(done[n]))
    return (best["collocated"], best["disagg"]) if len(best) == 2 else None


class Steps:
    """The steps over `state`, writing each run into `run_dir`."""

    def __init__(self, state: SweepState, run_dir: RunDir, budget: TimeBudget,
                 kept: KeptPlacements, bars: Bars, calibrates: bool = True) -> None:
        self.state, self.run_dir, self.budget, self.kept = state, run_dir, budget, kept
        self.bars, self.task = bars, bars.add_task("sweep", total=None)
        self.calibrates = calibrates  # a run directory of format 1 resumes without one
        # placement -> what says why its deployment is gone (its command exited), else None
        self.gone: dict[str, Callable[[], str | None]] = {}

    # ---- what a subclass provides --------------------------------------------------------
    def deploy(self, p: Placement, stack: contextlib.ExitStack) -> Urls:
        """Start `p` (or wait until it is ready) inside `stack`."""
        raise NotImplementedError

    def run(self, url: str, metrics: list[str], p: Placement, rate: float,
            before: RunResult | None) -> RunResult:
        """`p` at `rate` through `url`; with `before`, measured again and pooled with it."""
        raise NotImplementedError

    def calibrate(self, p: Placement, url: str) -> None:
        """Calibrate on `p` at `url` and size the workload into the state."""
        raise NotImplementedError

    # ---- the sweep -----------------------------------------------------------------------
    def measure_all(self, placements: list[Placement]) -> None:
        """Every placement's first pass; then second passes, one placement at a time,
        while intervals overlap and the budget lasts. The last placement goes straight
        on to its second pass, while it is still deployed, when it is the one to refine."""
        refined: set[str] = set()
        for p in placements:
            if self.measure(p, last=p is placements[-1]):
                refined.add(p.name)
        while not self.budget.spent:
            name = to_refine(self.state.done, refined)
            if name is None:
                break
            refined.add(name)
            self.measure(next(p for p in placements if p.name == name), refine=True)
        self.sharpen(placements)

    def sharpen(self, placements: list[Placement]) -> None:
        """The best collocated and best disaggregated placements' goodput intervals bisected,
        the wider first, while the budget lasts and the ratio of their max goodputs is
        stated no narrower than the grid's factor of 2 (`rate_search.to_sharpen`). A fixed
        grid (--rates) is no search."""
        s = self.state
        pair = _best_pair(placements, s.done)
        stuck: set[str] = set()
        while pair and not s.opts.rates and not self.budget.spent:
            pick = to_sharpen(s.done, pair, stuck, s.plan)
            if pick is None:
                return
            name, rate, again = pick
            p = next(p for p in placements if p.name == name)
            before = goodput_interval(s.done[name])
            with contextlib.ExitStack() as own:
                at = self._deployment(p, own)
                if (again or not self.run_dir.has_run(name, rate)) and not self._fits(rate, at):
                    return
                if again:
                    self._again(p, rate, s.done[name], at)
                else:
                    self._measure_at(p, rate, s.done[name], at)
            if again and goodput_interval(s.done[name]) == before:  # noise, measured twice
                stuck.add(name)

    def measure(self, p: Placement, refine: bool = False, last: bool = False) -> bool:
        """`p`'s first pass (runs already in the run directory are read, not run), then its
        second where `refine`, or where `last` and it is the next to refine, then the
        operating rate; whether it ran the second. Calibrates on the first deployment."""
        s = self.state
        outcomes: list[Outcome] = []
        s.done[p.name] = outcomes
        lead = not s.opts.rates and s.leader in (None, p.name)
        s.leader = p.name if lead else s.leader
        with contextlib.ExitStack() as own:
            at = self._deployment(p, own)
            if s.calibration is None and self.calibrates:
                self.calibrate(p, at.start())
            if s.missed:
                return False
            grid = None if lead else s.replay
            self._first_pass(p, outcomes, at, grid)
            if lead and s.grid is None:
                s.grid, s.replay = grid_of(outcomes, s.plan), replay_grid(outcomes, s.plan)
            second = refine or (last and to_refine(s.done, set(), deployed=p.name) == p.name)
            if second:
                self._second_pass(p, outcomes, at, grid)
            self._at_operating_rate(p, outcomes, at)
        return second

    def _deployment(self, p: Placement, own: contextlib.ExitStack) -> OnDemand:
        """`p`'s deployment, started when first needed. The bundled engine's stay up for a
        second pass (advisor.sweep.kept_placements); one at a URL stops before the next starts (they
        may share GPUs)."""
        if p.url is None:
            return self.kept.get(p.name, partial(self._timed_start, p))
        return OnDemand(partial(self._timed_start, p, own))

    def _timed_start(self, p: Placement, stack: contextlib.ExitStack) -> Urls:
        with self.budget.timing():
            return self.deploy(p, stack)

    def _first_pass(self, p: Placement, outcomes: list[Outcome], at: OnDemand,
                    grid: list[float] | None) -> None:
        s = self.state
        while True:
            rate = next_rate(outcomes, s.plan, grid, bool(s.opts.rates), refine=False)
            if rate is None:
                return
            self._measure_at(p, rate, outcomes, at)

    def _second_pass(self, p: Placement, outcomes: list[Outcome], at: OnDemand,
                     grid: list[float] | None) -> None:
        """Before each rate it searches, not only the first, the rates within noise are
        measured again: a step down or a bisection may find a new bound within noise."""
        s = self.state
        while self._measure_again(p, outcomes, at):
            rate = next_rate(outcomes, s.plan, grid, bool(s.opts.rates), refine=True)
            if rate is None:
                return
            if not self.run_dir.has_run(p.name, rate) and not self._fits(rate, at):
                return
            self._measure_at(p, rate, outcomes, at)

    def _measure_again(self, p: Placement, outcomes: list[Outcome], at: OnDemand) -> bool:
        """Measure again the rates within noise that hold `p`'s interval open
        (`rate_search.top_up`) while it overlaps another's and the time budget allows;
        whether it still overlaps and there is time. A fixed grid (--rates) is no search:
        nothing is measured again."""
        done = self.state.done
        others = others_of(done, p.name)
        while not self.state.opts.rates and p.name in unsettled(done):
            rate = top_up(outcomes, others)
            if rate is None or not self._fits(rate, at):
                break
            self._again(p, rate, outcomes, at)
        return p.name in unsettled(done) and not self.budget.spent

    def _again(self, p: Placement, rate: float, outcomes: list[Outcome], at: OnDemand) -> None:
        """`p` measured again at `rate`, pooled with the run already there; its outcome
        replaced."""
        before = self.run_dir.read_run(p.name, rate, records=True)
        self._store(p, rate, self._timed_run(at, p, rate, before))
        outcomes[[o.rate for o in outcomes].index(rate)] = self.outcome(p, rate)
        self.bars.advance(self.task)

    def _at_operating_rate(self, p: Placement, outcomes: list[Outcome], at: OnDemand) -> None:
        """`p` measured at the user's --operating-rate where its search did not reach it:
        the rows are judged there, never at a rate beside it. Outside the time budget (asked
        for by name) and after the search, so the search's steps are its own."""
        rate = self.state.opts.operating_rate
        if rate is not None and not any(math.isclose(o.rate, rate) for o in outcomes):
            self._measure_at(p, rate, outcomes, at)

    def _measure_at(self, p: Placement, rate: float, outcomes: list[Outcome],
                    at: OnDemand) -> None:
        """`p` at `rate` unless the run directory has it; its outcome added."""
        if not self.run_dir.has_run(p.name, rate):
            self._store(p, rate, self._timed_run(at, p, rate))
        outcomes.append(self.outcome(p, rate))
        self.bars.advance(self.task)

    def _store(self, p: Placement, rate: float, run: RunResult) -> None:
        """Store `run`; UsageError where `p`'s deployment is gone (its command exited), or
        where it refused every one of its requests: no rate takes a request the deployment
        will not (a prompt past its context, a model it does not serve), and searching on
        would spend minutes measuring refusals."""
        self.run_dir.write_run(run)
        bound = run.client_bound()
        if bound:
            print(f"{p.name} @ {rate:g} req/s: {bound}; this run is not used for the decision",
                  flush=True)
        gone = self.gone.get(p.name)
        why = gone() if gone is not None else None
        if why is not None:
            # NOTE: the run is kept: its requests failed as the deployment went down
            raise UsageError(f"{why}; the run at {rate:g} req/s is kept, failures and all: "
                             f"--resume {self.run_dir.path} measures the rest")
        records = run.records or []
        why = refused(records)
        if why is not None:
            raise UsageError(
                f"{p.name} refused all {len(records)} requests at {rate:g} req/s ({why}): "
                "the requests this sweep sends do not fit that deployment; change them "
                "(--scale, --output-scale, --workload, --model) or the deployment. Its "
                f"records: {self.run_dir.run_path(p.name, rate)}")

    def _fits(self, rate: float, at: OnDemand) -> bool:
        """Whether a run at `rate` (and a start, where `at` is not running) ends within
        the time budget."""
        return self.budget.fits(span_s(self.state.opts, rate), at.live)

    def _timed_run(self, at: OnDemand, p: Placement, rate: float,
                   before: RunResult | None = None) -> RunResult:
        """`run` where `at` runs (started now if it is not), timed for the budget."""
        with self.budget.timing(span_s(self.state.opts, rate)):
            url, metrics = at.urls()
            return self.run(url, metrics, p, rate, before)

    def outcome(self, p: Placement, rate: float) -> Outcome:
        """`p`'s run at `rate` against the SLO, as stored."""
        return outcome_of(self.run_dir.read_run(p.name, rate), rate,
                          self.state.opts.attainment, self.state.slo)
