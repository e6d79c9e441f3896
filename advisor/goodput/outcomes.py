"""What one run says of a placement at a rate against the SLO (an `Outcome`), and what a
placement's outcomes say of its max goodput: the highest rate that met the SLO, and the
interval it surely lies in. Shared by the sweep (measured runs) and the planner (simulated
ones)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from advisor.rundata.result import KEEP_PACE

if TYPE_CHECKING:
    from advisor.rundata.result import RunResult
    from advisor.rundata.slo import Slo


@dataclass(frozen=True)
class Outcome:
    rate: float
    meets: bool  # SLO attainment at or above the target
    collapsed: bool
    # the attainment's 95% interval against the target: surely meets / surely misses
    sure_meets: bool = False
    sure_misses: bool = False
    topped_up: bool = False  # measured again with as many requests more (`top_up`)
    behind: bool = False  # completed requests slower than they arrived (`KEEP_PACE`)
    client_bound: bool = False  # the client was the bottleneck: says nothing of the placement
    # its failed requests alone were more than the target lets miss: no latency, so no
    # lower rate, would have met it
    failing: bool = False


TOPPED_UP = "topped_up"  # workload_params key of a run measured again (`top_up`)
COLLAPSE = 2.0  # p99 ITL at twice its SLO has "fallen apart": the grid stops growing there


def outcome_of(result: RunResult, rate: float, target: float, slo: Slo) -> Outcome:
    """A run's outcome against the attainment `target` (the share of requests meeting
    `slo`'s per-request objectives), by its value and its interval, and against `slo`'s
    pooled objectives (the run's p99 ITL and its interval); surely missed, whatever its
    attainment, when its placement fell behind the arrivals (`KEEP_PACE`); collapsed
    (fallen apart) when its p99 ITL is far past the gap SLO or most requests failed
    outright. A run whose measuring client was its bottleneck (`RunResult.client_bound`)
    says nothing either way: neither met nor missed."""
    topped_up = bool(result.described.workload_params.get(TOPPED_UP))
    if result.client_bound():  # measured again, it is not measured a third time
        return Outcome(rate, False, False, topped_up=topped_up, client_bound=True)
    s = result.stats
    p99 = s.latency_ms("itl", "p99")
    collapsed = (p99 or 0) > COLLAPSE * slo.gap_ms \
        or s.failed > result.described.num_prompts / 2
    ci = s.ci95.slo_attainment if s.ci95 else None
    p99_ci = s.ci95.p99_itl_ms if s.ci95 else None
    limits = [o.ms for o in slo.pooled]  # p99 ITL, the only objective judged pooled
    pooled_met = all(p99 is not None and p99 <= ms for ms in limits)
    pooled_sure = all(p99_ci is not None and p99_ci[1] <= ms for ms in limits)
    pooled_missed = any(p99_ci is not None and p99_ci[0] > ms for ms in limits)
    pace = result.pace()
    behind = pace is not None and pace < KEEP_PACE
    return Outcome(rate, s.slo_attainment >= target and pooled_met and not behind, collapsed,
                   sure_meets=ci is not None and ci[0] >= target and pooled_sure
                   and not behind,
                   sure_misses=behind or pooled_missed or (ci is not None and ci[1] < target),
                   topped_up=topped_up, behind=behind,
                   failing=s.failed > (1 - target) * result.described.num_prompts)


WITHIN_NOISE = "within noise"


def ahead(collocated: float, disaggregated: float, margin: float) -> str:
    """Which of two max goodputs (req/s) leads by more than `margin` of the other:
    "disaggregate", "stay-collocated", or WITHIN_NOISE (neither, or neither above 0)."""
    if disaggregated > collocated * (1 + margin) and disaggregated > 0:
        return "disaggregate"
    if collocated > disaggregated * (1 + margin) and collocated > 0:
        return "stay-collocated"
    return WITHIN_NOISE


def max_goodput_rate(done: list[Outcome]) -> float:
    """The highest measured rate that met the SLO (0 when none did)."""
    return max((o.rate for o in done if o.meets), default=0.0)


def goodput_interval(done: list[Outcome]) -> tuple[float, float | None]:
    """Where the highest rate meeting the SLO lies: from the highest rate that surely met
    it (its attainment interval above the target; 0 if none) to the lowest higher rate that
    surely missed it (None: not bounded by any rate tried)."""
    lo = max((o.rate for o in done if o.sure_meets), default=0.0)
    hi = min((o.rate for o in done if o.sure_misses and o.rate > lo), default=None)
    return lo, hi


def apart(a: tuple[float, float | None], b: tuple[float, float | None]) -> bool:
    """Whether two goodput intervals (`goodput_interval`) do not overlap."""
    return a[0] >= top(b) or b[0] >= top(a)


def top(span: tuple[float, float | None]) -> float:
    """An interval's upper end (infinite where no rate bounds it)."""
    return math.inf if span[1] is None else span[1]
