"""What a sweep has learnt so far, in one place: the options as sized, where its rate
search starts, its calibration, and every placement's outcomes. The steps
(advisor.sweep.steps) read and extend it; the evidence is built from it at the end."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from advisor.goodput.outcomes import Outcome
from advisor.rundata.evidence import Calibration
from advisor.rundata.manifest import Sizing
from advisor.rundata.slo import Metric, Slo
from advisor.sweep.options import FALLBACK_START, SweepOptions
from advisor.sweep.rate_search import SearchPlan


def search_plan(opts: SweepOptions, start: float) -> SearchPlan:
    """The rate search for `opts`, from `start` req/s (or the first of --rates)."""
    return SearchPlan(opts.rates[0] if opts.rates else start, opts.max_steps, opts.bisect_steps)


@dataclass
class SweepState:
    opts: SweepOptions  # with the sizing's lengths and SLO, once sized
    slo: Slo  # what every run is judged against: the options', as sized once sized
    plan: SearchPlan
    calibration: Calibration | None = None
    prompt_tokens: float | None = None  # the sized workload's mean prompt
    missed: dict[Metric, float] = field(default_factory=dict)  # metric -> its unloaded floor
    grid: list[float] | None = None  # the leading placement's rates (or --rates)
    replay: list[float] | None = None  # the rates the others measure first
    leader: str | None = None  # the placement that builds the grid
    done: dict[str, list[Outcome]] = field(default_factory=dict)  # placement -> its outcomes

    @classmethod
    def start(cls, opts: SweepOptions, calibration: Calibration | None = None,
              sized: Sizing | None = None) -> SweepState:
        """A sweep before its first run; with a calibration and its sizing (a resumed
        sweep's), sized already."""
        grid = list(opts.rates) or None
        state = cls(opts, opts.judged_slo, search_plan(opts, opts.start_rate or FALLBACK_START),
                    grid=grid, replay=grid)
        if calibration is not None and sized is not None:
            state.size(calibration, sized)
        return state

    def size(self, calibration: Calibration, sized: Sizing) -> None:
        """Run with `calibration` and a sizing's lengths, SLO and first rate (unless
        --start-rate was given), and note which SLO metrics its unloaded floor misses."""
        self.calibration, self.slo = calibration, sized.slo
        self.opts = dataclasses.replace(self.opts, scale=sized.scale,
                                        output_scale=sized.output_scale, slo=sized.slo)
        start = self.opts.start_rate or sized.start_rate or FALLBACK_START
        self.plan = search_plan(self.opts, start)
        self.prompt_tokens = sized.prompt_tokens
        floors = calibration.floors(self.prompt_tokens)
        self.missed = {m: v for m, v in floors.items() if m in self.slo and v > self.slo.ms(m)}
