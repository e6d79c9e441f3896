"""Fitting the simulator to a measured sweep's runs: what the unloaded calibration cannot
know about the loaded machine (the request's way in and out, slower steps, their jitter,
engines slowing each other down on shared cores), each taken from the runs themselves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from advisor.engines.placement import counts
from advisor.errors import UsageError
from advisor.goodput.outcomes import COLLAPSE
from advisor.measure.stats import latency
from advisor.plan.simulate import simulate
from advisor.plan.steptime import FittedStep
from advisor.plan.system import EngineSpec, SimRequest, System
from advisor.probe.links import Link
from advisor.rundata.evidence import wake_text
from advisor.rundata.result import RunResult
from advisor.rundata.slo import Slo

PROXY_MS = 3.0  # the bundled P/D's extra HTTP leg and proxy hop per request (assumed)
MAX_CONTENTION = 1.0  # a neighbour that doubles a step is the most fitted
CLOSE = 0.02  # median ITLs this close at every rate without contention: none is fitted


def instances(name: str) -> tuple[int, int] | None:
    """(prefillers, decoding engines) of a placement by its sweep name, collocated-N (0, N)
    or disagg-XpYd (X, Y); None for any other name (nothing the simulator can run)."""
    kind, _, shape = name.partition("-")
    return counts(kind, shape)


def system_of(name: str, engine: EngineSpec, link: Link | None,
              kv_bytes: Callable[[int], int] | None,
              front_ms: float = 0.0, wake: tuple[Any, ...] = (), contention: float = 0.0) -> System:
    """A bundled-engine placement by its sweep name: collocated-N or disagg-XpYd."""
    shape = instances(name)
    if shape is None:
        raise UsageError(f"placement {name!r} cannot be simulated (collocated-N and "
                         "disagg-XpYd can)")
    p, d = shape
    if not p:
        return System(decode=(engine,) * d, front_ms=front_ms, wake=wake, contention=contention)
    return System(decode=(engine,) * d, prefill=(engine,) * p, link=link, kv_bytes=kv_bytes,
                  front_ms=front_ms, proxy_ms=PROXY_MS, wake=wake, contention=contention)


def scaled(engine: EngineSpec, prefill: float, decode: float) -> EngineSpec:
    """`engine` with its prompt tokens' cost (per token and per attention pair) times
    `prefill` and its decode steps, and every step's fixed cost, times `decode`.

    A prefill step's fixed cost is a decode step's (`_outside_steps`: the same layers once,
    the same per-step Python), not scaled with the prompt's tokens, so a scale fitted on
    long prompts does not stretch a short one's step."""
    s = engine.step
    assert isinstance(s, FittedStep)  # what a calibration fits
    return dataclasses.replace(engine, step=dataclasses.replace(
        s, prefill_base_ms=s.prefill_base_ms * decode,
        prefill_ms_per_token=s.prefill_ms_per_token * prefill,
        ms_per_pair=s.ms_per_pair * prefill, decode_base_ms=s.decode_base_ms * decode,
        decode_ms_per_token=s.decode_ms_per_token * decode,
        row_extra_ms=tuple(x * decode for x in s.row_extra_ms)))


def _figures(system: System, run: RunResult) -> tuple[float, float, float]:
    """(median TTFT, median ITL, p99 ITL) in ms of `run`'s requests simulated on `system`,
    as `summarize` has them (its intervals, which a fit has no use for, left out)."""
    lats = [lat for r in simulate(system, requests_of(run)).records if (lat := latency(r))]
    ttft = np.median([lat.ttft for lat in lats]) if lats else 0.0
    gaps = np.concatenate([lat.itls for lat in lats]) if lats else np.empty(0)  # [all gaps]
    p50, p99 = np.percentile(gaps, [50, 99]) if gaps.size else (0.0, 0.0)
    return max(ttft * 1000, 1e-9), max(p50 * 1000, 1e-9), max(p99 * 1000, 1e-9)


def _outside_steps(engine: EngineSpec) -> tuple[EngineSpec, float]:
    """(`engine` with its prefill's fixed cost cut to a decode step's, the ms cut): what an
    unloaded TTFT has beyond that is the request's own way in and out (HTTP, tokenizing,
    waiting for a step boundary), paid once per request, not in every step it shares.

    Both steps run the same layers once with the same per-step Python; only the
    calibration's TTFT line also holds the request's path through the server."""
    s = engine.step
    assert isinstance(s, FittedStep)  # what a calibration fits
    outside = max(0.0, s.prefill_base_ms - s.decode_base_ms)
    step = dataclasses.replace(s, prefill_base_ms=s.prefill_base_ms - outside)
    return dataclasses.replace(engine, step=step), outside


def _solve(figure: Callable[[float], float], lo: float, hi: float, target: float) -> float:
    """The x in [lo, hi] at which `figure(x)`, growing with x, reaches `target`
    (bisection); `lo` when it is there already."""
    if figure(lo) >= target:
        return lo
    for _ in range(12):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if figure(mid) < target else (lo, mid)
    return (lo + hi) / 2


def _jitter_for(system: Callable[[float], System], low: RunResult, p99: float) -> float:
    """The step jitter (lognormal sigma) with which `low`'s requests simulated on
    `system(sigma)` have p99 ITL `p99` (0 when none is needed)."""
    return _solve(lambda j: _figures(system(j), low)[2], 0.0, 1.5, p99)


def _closest(error: Callable[[float], float], lo: float, hi: float, log: bool = True
             ) -> float:
    """The x in [lo, hi] where `error(x)`, one valley, is least: golden section on log x
    (both > 0) or, without `log`, on x."""
    to, back = (np.log, np.exp) if log else (float, float)
    g = (np.sqrt(5) - 1) / 2
    a, b = to(lo), to(hi)
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = error(back(c)), error(back(d))
    for _ in range(10):  # the bracket shrinks to 0.8% of its width
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = error(back(c))
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = error(back(d))
    return float(back((a + b) / 2))


def _log_error(system: System, rows: list[RunResult], figure: int, key: str) -> float:
    """Squared log ratio of simulated (`_figures`' `figure`-th) to measured (`key`),
    summed over `rows`."""
    return cast("float", sum(np.log(_figures(system, r)[figure] / r.get(key)) ** 2 for r in rows))


def _contention(make: Callable[[float, float], System], low: RunResult, rows: list[RunResult],
                dec: float) -> tuple[float, float]:
    """(contention, decode scale) with which `make(contention, decode scale)`'s simulated
    median ITLs fit the measured ones at every rate in `rows` (below collapse), the decode
    scale re-fitted at the lowest rate `low` for each contention tried; (0, `dec`) with
    fewer than two rates to fit to, or where none fits them within CLOSE already.

    The calibration times one engine alone; in a run the other instances share the cores
    and the memory, so a P/D decoder steps slower the busier its prefiller is, more than
    its batch explains."""
    if len({r.rate for r in rows}) < 2:
        return 0.0, dec
    target = low.get("p50_itl_ms")

    def dec_at(k: float) -> float:
        return cast("float", dec * target / _figures(make(k, dec), low)[1])

    def error(k: float) -> float:
        return _log_error(make(k, dec_at(k)), rows, 1, "p50_itl_ms")

    if error(0.0) <= len(rows) * np.log(1 + CLOSE) ** 2:
        return 0.0, dec
    k = _closest(error, 0.0, MAX_CONTENTION, log=False)
    return k, dec_at(k)


def fit_to_runs(engine: EngineSpec, measured: list[RunResult], names: list[str], link: Link,
                kv_bytes: Callable[[int], int] | None, slo: Slo, wake: tuple[Any, ...] = (),
                shapes: dict[str, str] | None = None) -> tuple[dict[str, System], str]:
    """Each placement in `names` as a system fitted to the rates measured (in `measured`):
    the request's path outside the steps (_outside_steps) as a fixed latency; prompt
    tokens' cost scaled to collocated's median TTFT at its lowest rate below collapse
    (`slo`: the sweep's; else at its lowest rate); each placement's
    decode steps to its own median ITL at that rate of its own, and its step jitter to
    its p99 ITL there (a placement with no rate below collapse, or whose stalls alone
    reach that p99, takes the jitter fitted where the host's noise showed); how much a
    busy neighbour slows a step to its median ITLs at every rate below collapse; and P/D's
    prompt tokens to its median TTFTs at those rates. `shapes`: the shape each name is
    simulated as (collocated-N, disagg-XpYd; default the name itself). The calibration
    times one engine alone, where in the runs the client, the proxy and the other instances
    share the cores: every step is slower and varies more.
    """
    lowest: dict[str | None, RunResult] = {}  # each placement's calm lowest, else lowest
    for r in sorted(measured, key=lambda r: (not _calm(r, slo), r.rate)):
        lowest.setdefault(r.placement, r)
    engine, outside = _outside_steps(engine)

    def system(name: str, spec: EngineSpec, contention: float = 0.0) -> System:
        return system_of((shapes or {}).get(name, name), spec, link, kv_bytes, outside, wake,
                         contention)

    pre = 1.0
    col = next((r for r in lowest.values() if r.kind == "collocated"), None)
    if col is not None:
        target = col.get("median_ttft_ms")
        if target:
            name = col.placement or ""  # a stored run's (RunDir.read_runs)
            pre = _solve(lambda x: _figures(system(name, scaled(engine, x, 1.0)), col)[0],
                         0.25, 4.0, target)

    def own_jitter(name: str, dec: float, k: float, low: RunResult) -> float:
        spec = scaled(engine, pre, dec)
        return _jitter_for(lambda j: system(name, dataclasses.replace(spec, jitter=j), k), low,
                           low.get("p99_itl_ms") or 0.0)

    systems, notes, fits = {}, {}, {}
    calm = {n: _calm(lowest.get(n), slo) for n in names}
    for name in names:
        low = lowest.get(name)
        if low is None:
            systems[name] = system(name, scaled(engine, pre, 1.0))
            notes[name] = f"{name}: prefill x{pre:.2f}, not measured there"
            continue
        _, itl, _ = _figures(system(name, scaled(engine, pre, 1.0)), low)
        dec = (low.get("p50_itl_ms") or itl) / itl
        rows = [r for r in measured if r.placement == name and _calm(r, slo)]
        def made(x: float, d: float, n: str = name) -> System:
            return system(n, scaled(engine, pre, d), x)

        k, dec = _contention(made, low, rows, dec) if low.get("p50_itl_ms") else (0.0, dec)
        fits[name] = (low, rows, dec, k, own_jitter(name, dec, k, low) if calm[name] else None)
    # NOTE: a jitter of 0 (or one fitted past collapse) says only that stalls already reach
    # the p99, not that the host is quiet: such a placement takes the host's jitter, fitted
    # where its noise showed
    shown = [fit[-1] for fit in fits.values() if fit[-1]]
    host = float(np.median(shown)) if shown else None
    for name, (low, rows, dec, k, own) in fits.items():
        jitter, fitted_at = own, f"at {low.rate:g} req/s"
        if host is not None and not own:
            jitter, fitted_at = host, "the host's, fitted where its noise showed"
        elif own is None:  # past collapse, and no placement ran calm: its own
            jitter = own_jitter(name, dec, k, low)
        spec, p = dataclasses.replace(scaled(engine, pre, dec), jitter=jitter or 0.0), pre
        if low.kind == "disagg" and rows:
            # NOTE: one prefiller's queue decides P/D's TTFT from low rates to the knee, so
            # its prefill scale is fitted to all of them
            def error(x: float, n: str = name, e: EngineSpec = spec,
                      at: list[RunResult] = rows, c: float = k) -> float:
                return _log_error(system(n, scaled(e, x / pre, 1.0), c), at, 0,
                                  "median_ttft_ms")

            p = _closest(error, 0.5 * pre, 2.0 * pre)
            spec = scaled(spec, p / pre, 1.0)
        systems[name] = system(name, spec, k)
        notes[name] = (f"{name}: prefill x{p:.2f}"
                       + (f" (fitted at {len(rows)} rates)" if low.kind == "disagg" else "")
                       + f", decode x{dec:.2f} (at {low.rate:g} req/s), jitter {jitter:.2f} "
                       f"({fitted_at}), +{k:.2f} of a step per busy neighbour")
    head = [f"{outside:.1f} ms per request outside the steps"]
    if wake:
        head.append("an idle engine's first step " + wake_text(wake[1:]))
    return systems, "; ".join(head + [notes[n] for n in names])


def _calm(run: RunResult | None, slo: Slo) -> bool:
    """Whether `run` (None: not measured) ran below collapse."""
    return run is not None and below_collapse(run.get("p99_itl_ms"), run.get("median_ttft_ms"),
                                              slo)


def below_collapse(p99_itl_ms: float | None, median_ttft_ms: float | None, slo: Slo) -> bool:
    """Whether a run with these figures is below collapse: its p99 ITL within the sweep's
    bound (COLLAPSE x the ITL SLO) and its median TTFT within the TTFT SLO (past it, a
    queue that grows for the whole run). The fit uses only such runs, and
    benchmarks/plan_accuracy.py judges the predictions at them."""
    return (p99_itl_ms or 0.0) <= COLLAPSE * slo.gap_ms \
        and 0.0 < (median_ttft_ms or 0.0) <= slo.ttft_ms


def requests_of(run: RunResult) -> list[SimRequest]:
    """A measured run's requests as they were scheduled, with the lengths they had (a
    failed request: the run's median output)."""
    rows = run.records or []
    outs = [x["output_tokens"] for x in rows if x["ok"]] or [1]
    typical = int(np.median(outs))
    return [SimRequest(x["scheduled"] or 0.0, x["prompt_tokens"],
                       x["output_tokens"] if x["ok"] else typical)
            for x in sorted(rows, key=lambda x: x["scheduled"] or 0.0)]
