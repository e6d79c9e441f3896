"""Screening: where there are many placements (every TP per role on many GPUs), each is
first simulated briefly (SCREEN_REQUESTS per rate, no statistics written), and only the
best few of each kind by max goodput per GPU (then by the room they met it with) are
simulated in full. The screening's figures are approximate (a few hundred requests per
rate) and are kept in the manifest."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from advisor.measure.stats import is_good, latency, pace_figures, slo_scale
from advisor.plan import sim_runs
from advisor.plan.candidates import Candidate
from advisor.plan.simulate import Simulation, simulate
from advisor.plan.system import System
from advisor.rundata.result import KEEP_PACE, RunResult
from advisor.rundata.slo import Slo
from advisor.rundata.stats import RunStats
from workloads.presets import seed_for
from workloads.spec import SyntheticSpec

SCREEN_ABOVE = 12  # placements; this many or fewer are all simulated in full
SCREEN_REQUESTS = 400
FINALISTS = 3  # of each kind (collocated, disagg)


def finalists(candidates: list[Candidate], system_of: Callable[[Candidate], System],
              spec: SyntheticSpec, rates: list[float], slo: Slo, attainment: float, seed: int,
              progress: Callable[[str], None], concurrency: int | None = None
              ) -> tuple[list[Candidate], dict[str, float]]:
    """The candidates to simulate in full, in their order, and what the screening found of
    each (max goodput per GPU, req/s; empty when there was no screening)."""
    if len(candidates) <= SCREEN_ABOVE:
        return list(candidates), {}
    per_gpu: dict[str, float] = {}
    slack: dict[str, float] = {}  # the SLO multiple met at the best rate: lower is better
    for c in candidates:
        best, slack[c.name] = _screen(c, system_of(c), spec, rates, slo, attainment, seed,
                                      progress, concurrency)
        per_gpu[c.name] = best / c.gpus
    keep: set[str] = set()
    for kind in ("collocated", "disagg"):
        # NOTE: a rate grid's steps are coarse, and a few hundred requests never build the
        # load a longer run does: among placements meeting the same rate, the one meeting
        # it with the most room is the likelier to hold it for longer
        ranked = sorted((c for c in candidates if c.kind == kind),
                        key=lambda c: (-per_gpu[c.name], slack[c.name]))
        keep |= {c.name for c in ranked[:FINALISTS]}
    return [c for c in candidates if c.name in keep], per_gpu


def _screen(c: Candidate, system: System, spec: SyntheticSpec, rates: list[float], slo: Slo,
            attainment: float,
            seed: int, progress: Callable[[str], None], concurrency: int | None
            ) -> tuple[float, float]:
    """One placement's highest rate meeting the SLO in the screen (0 where none did), and
    the least multiple of the SLO met there (infinite where none did)."""
    return screened(system, spec, rates, slo, attainment, seed, concurrency,
                    lambda rate: progress(f"screening {c.name} at {rate:g} req/s"))


def screened(system: System, spec: SyntheticSpec, rates: list[float], slo: Slo,
             attainment: float, seed: int, concurrency: int | None = None,
             progress: Callable[[float], None] | None = None,
             requests: int = SCREEN_REQUESTS) -> tuple[float, float]:
    """`system`'s highest of `rates` meeting the SLO in a screen of `requests` a rate
    (0 where none did), and the least multiple of the SLO met there (infinite where none
    did)."""
    scales: dict[float, float] = {}

    def meets(rate: float) -> bool:
        if progress is not None:
            progress(rate)
        reqs = sim_runs.requests(spec, rate, requests, seed_for(seed, rate))
        met, scales[rate] = _judge(simulate(system, reqs, concurrency), rate, slo,
                                   attainment)
        return met

    best = highest(rates, meets)
    return (0.0, math.inf) if best is None else (best, scales[best])


def scale_at(system: System, spec: SyntheticSpec, rate: float, slo: Slo, attainment: float,
             seed: int, concurrency: int | None = None,
             requests: int = SCREEN_REQUESTS) -> float:
    """The least multiple of the SLO that `attainment` of a screen's `requests` met at
    `rate` (under 1: met)."""
    reqs = sim_runs.requests(spec, rate, requests, seed_for(seed, rate))
    return _judge(simulate(system, reqs, concurrency), rate, slo, attainment)[1]


def _judge(sim: Simulation, rate: float, slo: Slo, attainment: float) -> tuple[bool, float]:
    """Whether a screening run at `rate` met the SLO as a full one is judged (its
    attainment, and its pace: `RunResult.pace`, since a few hundred requests can arrive
    and be served before a growing queue or the rate's full load shows in their
    latencies), and the least multiple of the SLO that its `attainment` share of requests
    met."""
    lats = [latency(r) for r in sim.records]
    scale = float(np.quantile([slo_scale(lat, slo) for lat in lats], attainment,
                              method="inverted_cdf"))
    gaps = [lat.itls for lat in lats if lat is not None]
    if slo.pooled:  # the run's p99 ITL, held to each pooled limit too
        p99 = float(np.percentile(np.concatenate(gaps), 99)) * 1000 if gaps else 0.0
        scale = max(scale, *(p99 / o.ms for o in slo.pooled))
    share = float(np.mean([is_good(lat, slo) for lat in lats]))
    if share < attainment or scale > 1:
        return False, scale
    completed = sum(lat is not None for lat in lats)
    stats = RunStats(completed, len(lats) - completed, share, duration=sim.duration,
                     **pace_figures(sim.records, lats))
    run = RunResult.of(stats, num_prompts=len(sim.records), request_rate=rate,
                       arrival_offsets=[r.scheduled - sim.start for r in sim.records])
    pace = run.pace()
    return pace is None or pace >= KEEP_PACE, scale


def highest(rates: list[float], meets: Callable[[float], bool]) -> float | None:
    """The highest of the ascending `rates` that `meets`, found by bisection (log2 of the
    rates' count tries, not one per rate); None where none does. Bisection takes
    attainment to fall as the rate rises, as a screen may: the finalists' full simulations
    try every rate."""
    lo, hi = -1, len(rates)  # rates[lo] met (or none), rates[hi] missed (or past the grid)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if meets(rates[mid]) else (lo, mid)
    return rates[lo] if lo >= 0 else None
