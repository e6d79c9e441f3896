"""Screening: where there are many placements (every TP per role on many GPUs), each is
first simulated briefly (SCREEN_REQUESTS per rate, no statistics written), and only the
best few of each kind by max goodput per GPU are simulated in full. The screening's
figures are approximate (a few hundred requests per rate) and are kept in the manifest."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from advisor.measure.stats import is_good, latency
from advisor.plan import runs
from advisor.plan.simulate import simulate
from workloads.presets import seed_for

SCREEN_ABOVE = 12  # placements; this many or fewer are all simulated in full
SCREEN_REQUESTS = 400
FINALISTS = 3  # of each kind (collocated, disagg)
MISSES = 2  # rates in a row missed before a placement's screening stops


def finalists(candidates: list, system_of: Callable, spec, rates: list[float],
              slos: dict[str, float], attainment: float, seed: int,
              progress: Callable[[str], None]) -> tuple[list, dict[str, float]]:
    """The candidates to simulate in full, in their order, and what the screening found of
    each (max goodput per GPU, req/s; empty when there was no screening)."""
    if len(candidates) <= SCREEN_ABOVE:
        return list(candidates), {}
    per_gpu: dict[str, float] = {}
    for c in candidates:
        system, best, missed = system_of(c), 0.0, 0
        for rate in rates:
            progress(f"screening {c.name} at {rate:g} req/s")
            reqs = runs.requests(spec, rate, SCREEN_REQUESTS, seed_for(seed, rate))
            records = simulate(system, reqs).records
            met = np.mean([is_good(latency(r), slos) for r in records]) >= attainment
            best, missed = (rate, 0) if met else (best, missed + 1)
            if missed >= MISSES:
                break
        per_gpu[c.name] = best / c.gpus
    keep: set[str] = set()
    for kind in ("collocated", "disagg"):
        ranked = sorted((c for c in candidates if c.kind == kind), key=lambda c: -per_gpu[c.name])
        keep |= {c.name for c in ranked[:FINALISTS]}
    return [c for c in candidates if c.name in keep], per_gpu
