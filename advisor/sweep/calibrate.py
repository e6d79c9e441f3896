"""Calibration: the deployed engine's unloaded timings, measured before the rate search:
TTFT at a few prompt lengths, the decode step at batch 1, 2 and a larger batch with its
tail, and the TTFT after a few idle times. The sweep sizes its workload from it
(advisor.sweep.sizing) and compares the SLO with the floor it sets before searching."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import numpy as np

from advisor.errors import UsageError
from advisor.measure.failures import reason
from advisor.measure.records import ClientRun, Endpoint
from advisor.measure.stats import latency
from advisor.measure.workload_run import measure
from advisor.output.progress import Bars
from advisor.probe.wakeup import NOTABLE, Wakeup
from advisor.rundata.evidence import Calibration
from workloads.arrivals import Arrivals
from workloads.lengths import LengthDist
from workloads.spec import SyntheticSpec, Workload, synthesize

# prompt tokens whose unloaded TTFT is measured (capped by context), from 16 because a line
# through 64-1024 alone let one point's noise tilt a short chat prompt's TTFT
PROMPTS = (16, 64, 256, 1024)
BATCH = 8  # the larger decode batch
# batch 2 too: on some CPUs two rows cost ~2x one, far off the line through 1 and 8,
# and a P/D decoder usually runs about 2
BATCHES = (1, 2, BATCH)
STEPS = 24  # decode steps timed per request
# each figure is the median of rounds that alternate with the others', so that a slow
# spell of the host (tens of percent, for seconds) falls on all of them, not on one
ROUNDS = 3
TAIL_SHARE = 0.9  # the share of unloaded requests whose own p99 ITL the tail covers
SEED = 7_777_777  # prompts no measured run uses
# idle before one request of the shortest and one of the longest prompt: the wake-up
# curve's points, as long as the sweep's low rates leave an instance idle
IDLE_S = (0.3, 1.0, 3.0)


def _workload(prompt: int, output: int, n: int, seed: int) -> Workload:
    spec = SyntheticSpec(input=LengthDist("fixed", prompt), output=LengthDist("fixed", output),
                         arrivals=Arrivals("poisson", math.inf), num_prompts=n)
    return synthesize(spec, seed, "calibration")


def _median_ms(values_s: list[float], run: ClientRun, what: str, url: str) -> float:
    """The median in ms; a clear error naming the failure when every request of `run`
    failed (a deployment that fails its calibration cannot be measured)."""
    if not values_s:
        why = next((reason(r.status, r.error) for r in run.records if r.error),
                   "no tokens streamed")
        raise UsageError(f"{url}: every request {what} failed ({why}): the deployment "
                         "cannot be calibrated")
    return float(np.median(values_s)) * 1000


def warm_up(endpoint: Endpoint, workload: Workload | None = None, bars: Bars | None = None
            ) -> None:
    """A fresh instance's first-call costs, paid before anything is timed: `workload`'s
    requests one at a time (default: two of the calibration's shortest prompts)."""
    if workload is None:
        workload = _workload(PROMPTS[0], 2, 2, SEED - 1)
    measure(endpoint, workload, max_concurrency=1, label="warmup", bars=bars)


def calibrate(endpoint: Endpoint, context: int, bars: Bars | None = None,
              host: Wakeup | None = None) -> Calibration:
    """Measure `endpoint` (one engine instance, nothing else running on it). `host`: the
    host's own wake-up check (advisor.probe.wakeup); where it shows no slowdown after an
    idle (under NOTABLE), the wake-up points are not measured: they would cost ~10 s of
    idling to find nothing."""
    prompts = [p for p in PROMPTS if p + STEPS < context // 2] or [min(PROMPTS[0], context // 4)]
    firsts: dict[int, list[float]] = {p: [] for p in prompts}
    gaps: dict[int, list[float]] = {b: [] for b in BATCHES}
    tails: dict[int, list[float]] = {b: [] for b in gaps}  # each request's own p99 ITL
    # the last run of each figure: where every one failed, the error names its failure
    last_ttft, last_decode = {}, {}
    pairs = list(enumerate(prompts))
    for i in range(ROUNDS):
        # each round starts at the next prompt length, so that no figure sits at the
        # same place in every round (a deployment failing every k-th request fails one)
        for j, p in pairs[i % len(pairs):] + pairs[:i % len(pairs)]:
            last_ttft[p] = run = measure(endpoint, _workload(p, 2, 1, SEED + 10 * i + j),
                                         label=f"calibrating TTFT at {p} tokens", bars=bars)
            firsts[p] += [lat.ttft for r in run.records if (lat := latency(r))]
        for b in gaps:
            last_decode[b] = run = measure(
                endpoint, _workload(16, STEPS + 1, b, SEED + 100 + 10 * i + b),
                label=f"calibrating decode at batch {b}", bars=bars)
            lats = [lat for r in run.records if (lat := latency(r)) and lat.itls.size]
            gaps[b] += [float(g) for lat in lats for g in lat.itls]
            tails[b] += [lat.p99_itl for lat in lats]
    ttft = [_median_ms(firsts[p], last_ttft[p], f"timing TTFT at {p} tokens",
                       endpoint.base_url) for p in prompts]
    steps = [_median_ms(gaps[b], last_decode[b], f"timing decode at batch {b}",
                        endpoint.base_url) for b in gaps]
    slope, base = np.polyfit(prompts, ttft, 1) if len(prompts) > 1 else (ttft[0] / prompts[0], 0)
    ends = sorted({0, len(prompts) - 1})  # the shortest and the longest prompt
    idle: Sequence[float] = ()
    extra: Sequence[float] = ()
    tokens: Sequence[float] = ()
    if host is None or host.ratio >= NOTABLE:
        idle, extra, tokens = _wake_up(endpoint, [(prompts[i], ttft[i]) for i in ends], bars)
    # only where every batch answered (else _median_ms has raised above)
    tail = [float(np.quantile(tails[b], TAIL_SHARE)) * 1000 for b in gaps]
    return Calibration(prompt_tokens=prompts, ttft_ms=ttft, batches=list(BATCHES), step_ms=steps,
                       tail_ms=tail,
                       prefill_ms_per_token=max(float(slope), 1e-6), prefill_base_ms=float(base),
                       wake_idle_s=idle, wake_extra_ms=extra, wake_prompt_tokens=tokens,
                       wake_host=host.summary() if host else None)


def _wake_up(endpoint: Endpoint, prompts: list[tuple[int, float]], bars: Bars | None
             ) -> tuple[list[float], ...]:
    """(idle s, extra ms, prompt tokens) for each idle time in IDLE_S and each (prompt,
    back-to-back TTFT ms) in `prompts` whose request answered, by idle time: the TTFT of
    one request of that prompt after the machine sat idle that long, beyond its TTFT right
    after other work. A failed request leaves its point out.

    The first prompt after the longest idle goes first: where that costs under NOTABLE
    times its back-to-back TTFT, it is the only point (the extra grows with the idle, so
    the shorter ones would find less; a deployment that does not slow down pays 3 s of
    idling, not 9)."""
    first = (len(IDLE_S) - 1, 0)
    order = [first] + [(i, j) for i in range(len(IDLE_S)) for j in range(len(prompts))
                       if (i, j) != first]
    points = []
    for i, j in order:
        prompt, back_to_back_ms = prompts[j]
        time.sleep(IDLE_S[i])
        run = measure(endpoint, _workload(prompt, 2, 1, SEED + 200 + 10 * i + j),
                      label=f"calibrating wake-up after {IDLE_S[i]:g} s idle", bars=bars)
        for lat in filter(None, map(latency, run.records)):
            points.append((i, j, max(0.0, lat.ttft * 1000 - back_to_back_ms)))
        if (i, j) == first and points and points[0][2] < (NOTABLE - 1) * back_to_back_ms:
            break
    points.sort()
    return ([IDLE_S[i] for i, _, _ in points], [x for _, _, x in points],
            [prompts[j][0] for _, j, _ in points])
