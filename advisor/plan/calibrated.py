"""`advisor plan --calibrate RUN_DIR [--replay OTHER]`: the simulator fitted to a measured
bundled-engine sweep, predicting that sweep's runs (or another's) request for request.

The step model is fitted to the sweep's calibration (advisor.plan.steptime.fit), the KV
link to its measured transfers, what waking an idle machine costs to the calibration's
TTFTs after idle times; every measured run is replayed with its own arrivals and
lengths on the same placements, and the predictions go through the decision table as
a sweep's measurements do. `compare` sets predicted beside measured.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from advisor import console
from advisor.errors import UsageError
from advisor.measure.stats import summarize
from advisor.plan import runs
from advisor.plan.hardware import Link
from advisor.plan.plan import PlanOptions
from advisor.plan.simulate import EngineSpec, SimRequest, System, simulate
from advisor.plan.steptime import FittedStep, fit
from advisor.probe.shapes import shape_of
from advisor.rundata.evidence import Calibration, wake_text
from advisor.rundata.files import RunDataError, manifest
from advisor.rundata.rundir import RunDir
from advisor.sweep.options import DEFAULT_SLO
from advisor.sweep.placements import Placement
from advisor.sweep.rate_search import COLLAPSE
from engine.core.config import EngineConfig

PROXY_MS = 3.0  # the bundled P/D's extra HTTP leg and proxy hop per request (assumed)
GIB = 1 << 30


def _dir(path: str, flag: str) -> RunDir:
    try:
        return RunDir.existing(path)
    except RunDataError as e:
        raise UsageError(f"{flag} {e}") from None


def _calibration(run_dir: RunDir) -> Calibration:
    cal = run_dir.read_manifest().get("calibration")
    if not cal:
        raise UsageError(f"--calibrate {run_dir}: no calibration in its manifest (a sweep of "
                         "the bundled engine has one)")
    return Calibration.from_json(cal, str(run_dir))


def _link(run_dir: RunDir) -> Link:
    """The KV link as the sweep measured it: its throughput per transfer (wire and all)."""
    try:
        kv = run_dir.read_evidence().kv_transfer
    except RunDataError:
        kv = None
    if kv is None or not kv.gbps:
        return Link("unmeasured", 1.0, 0.0, 0.0, "no transfers measured: 1 GB/s assumed")
    return Link(f"measured {kv.connector or 'link'}", kv.gbps, 0.0, 0.0,
                f"{run_dir.name}: {kv.mean_ms:.1f} ms per transfer at {kv.gbps:.2f} GB/s")


def _system(name: str, engine: EngineSpec, link: Link | None, kv_bytes,
            front_ms: float = 0.0, wake: tuple = ()) -> System:
    """A bundled-engine placement by its sweep name: collocated-N or disagg-XpYd."""
    kind, _, shape = name.partition("-")
    if kind == "collocated" and shape.isdigit():
        return System(decode=(engine,) * int(shape), front_ms=front_ms, wake=wake)
    p, _, d = shape.removesuffix("d").partition("p")
    if kind == "disagg" and p.isdigit() and d.isdigit():
        return System(decode=(engine,) * int(d), prefill=(engine,) * int(p), link=link,
                      kv_bytes=kv_bytes, front_ms=front_ms, proxy_ms=PROXY_MS, wake=wake)
    raise UsageError(f"placement {name!r} cannot be simulated (collocated-N and disagg-XpYd "
                     "can)")


def _engine(step: FittedStep, shape, dtype: str) -> EngineSpec:
    """The bundled engine's defaults around `step`."""
    base = EngineConfig()
    return EngineSpec(step, int(base.kv_cache_memory_gib * GIB // shape.kv_bytes_per_token(dtype)),
                      base.max_num_batched_tokens, base.max_num_seqs, base.enable_chunked_prefill)


def _scaled(engine: EngineSpec, prefill: float, decode: float) -> EngineSpec:
    s = engine.step
    return dataclasses.replace(engine, step=dataclasses.replace(
        s, prefill_base_ms=s.prefill_base_ms * prefill,
        prefill_ms_per_token=s.prefill_ms_per_token * prefill,
        ms_per_pair=s.ms_per_pair * prefill, decode_base_ms=s.decode_base_ms * decode,
        decode_ms_per_token=s.decode_ms_per_token * decode))


def _figures(system: System, run) -> tuple[float, float, float]:
    """(median TTFT, median ITL, p99 ITL) in ms of `run`'s requests simulated on `system`."""
    sim = simulate(system, _requests(run))
    stats = summarize(sim.records, sim.duration, {"ttft": 1e9, "itl": 1e9}, runs.PERCENTILES)
    return (max(stats["median_ttft_ms"], 1e-9), max(stats["p50_itl_ms"], 1e-9),
            max(stats["p99_itl_ms"], 1e-9))


def _outside_steps(engine: EngineSpec) -> tuple[EngineSpec, float]:
    """(`engine` with its prefill's fixed cost cut to a decode step's, the ms cut): what an
    unloaded TTFT has beyond that is the request's own way in and out (HTTP, tokenizing,
    waiting for a step boundary), paid once per request, not in every step it shares.

    # NOTE: both steps run the same layers once with the same per-step Python; only the
    # calibration's TTFT line also holds the request's path through the server."""
    s = engine.step
    outside = max(0.0, s.prefill_base_ms - s.decode_base_ms)
    step = dataclasses.replace(s, prefill_base_ms=s.prefill_base_ms - outside)
    return dataclasses.replace(engine, step=step), outside


def _solve(figure, lo: float, hi: float, target: float) -> float:
    """The x in [lo, hi] at which `figure(x)`, growing with x, reaches `target`
    (bisection); `lo` when it is there already."""
    if figure(lo) >= target:
        return lo
    for _ in range(12):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if figure(mid) < target else (lo, mid)
    return (lo + hi) / 2


def _jitter_for(system, low, p99: float) -> float:
    """The step jitter (lognormal sigma) with which `low`'s requests simulated on
    `system(sigma)` have p99 ITL `p99` (0 when none is needed)."""
    return _solve(lambda j: _figures(system(j), low)[2], 0.0, 1.5, p99)


def _closest(error, lo: float, hi: float) -> float:
    """The x in [lo, hi] (both > 0) where `error(x)`, one valley, is least (golden
    section on log x)."""
    a, b, g = np.log(lo), np.log(hi), (np.sqrt(5) - 1) / 2
    for _ in range(10):  # the bracket shrinks to 0.8% of its width
        c, d = b - g * (b - a), a + g * (b - a)
        a, b = (a, d) if error(np.exp(c)) < error(np.exp(d)) else (c, b)
    return float(np.exp((a + b) / 2))


def _ttft_error(system, rows: list) -> float:
    """Squared log ratio of simulated to measured median TTFT, summed over `rows`."""
    return sum(np.log(_figures(system, r)[0] / r.get("median_ttft_ms")) ** 2 for r in rows)


def _under_load(engine: EngineSpec, measured: list, names: list[str], link: Link,
                kv_bytes, slo, wake: tuple = ()) -> tuple[dict[str, System], str]:
    """Each placement in `names` as a system fitted to the rates measured (in `measured`):
    the request's path outside the steps (_outside_steps) as a fixed latency, prefill
    steps scaled to collocated's median TTFT at its lowest rate, each placement's decode
    steps to its own median ITL there, step jitter to its p99 ITL there, and P/D's prefill
    steps to its median TTFTs at every rate below collapse (`slo`: the sweep's).

    # NOTE: the calibration times one engine alone, unloaded. In the runs the client, the
    # proxy and the other instances share this machine's cores: every step is slower, and
    # its time varies (the p99 gap of an unloaded run is well above its median here).
    """
    lowest = {}
    for r in measured:
        if r.placement not in lowest or r.rate < lowest[r.placement].rate:
            lowest[r.placement] = r
    engine, outside = _outside_steps(engine)

    def system(name: str, spec: EngineSpec) -> System:
        return _system(name, spec, link, kv_bytes, outside, wake)

    pre = 1.0
    col = next((r for r in lowest.values() if r.kind == "collocated"), None)
    if col is not None:
        ttft, _, _ = _figures(system(col.placement, engine), col)
        pre = max(1e-3, (col.get("median_ttft_ms") or ttft) - outside) / max(1e-3, ttft - outside)
    systems, notes = {}, [f"{outside:.1f} ms per request outside the steps"]
    if wake:
        notes.append("an idle engine's first step " + wake_text(wake[1:]))
    for name in names:
        low = lowest.get(name)
        scaled = _scaled(engine, pre, 1.0)
        if low is None:
            systems[name] = system(name, scaled)
            notes.append(f"{name}: prefill x{pre:.2f}, not measured there")
            continue
        _, itl, _ = _figures(system(name, scaled), low)
        dec = (low.get("p50_itl_ms") or itl) / itl
        scaled = _scaled(engine, pre, dec)
        jitter = _jitter_for(lambda j, n=name, e=scaled: system(n, dataclasses.replace(
            e, jitter=j)), low, low.get("p99_itl_ms") or 0.0)
        scaled = dataclasses.replace(scaled, jitter=jitter)
        p, rows = pre, [r for r in measured if r.placement == name and _below(r, slo)]
        if low.kind == "disagg" and rows:
            # NOTE: the prefiller runs no decodes but shares the cores with the decoder and
            # the proxy, and its queue (one prefiller) decides P/D's TTFT from low rates to
            # the knee: its prefill scale is the one that fits them all
            p = _closest(lambda x, n=name, e=scaled, at=rows: _ttft_error(
                system(n, _scaled(e, x / pre, 1.0)), at), 0.5 * pre, 2.0 * pre)
            scaled = _scaled(scaled, p / pre, 1.0)
        systems[name] = system(name, scaled)
        notes.append(f"{name}: prefill x{p:.2f}"
                     + (f" (fitted at {len(rows)} rates)" if low.kind == "disagg" else "")
                     + f", decode x{dec:.2f}, jitter {jitter:.2f} (at {low.rate:g} req/s)")
    return systems, "; ".join(notes)


def run_calibrated(measured: str, replay: str | None, out: str, as_json: bool) -> dict:
    """Fit to `measured`, predict `replay` (default: `measured` itself); the recommendation
    with `compare` (predicted beside measured, per placement and rate)."""
    fitted_on = _dir(measured, "--calibrate")
    target = _dir(replay, "--replay") if replay else fitted_on
    cal = _calibration(fitted_on)
    step = fit(cal)
    link = _link(fitted_on)
    m = target.read_manifest()
    cfg = m.get("config") or {}
    dtype = (m.get("dtype") or {}).get("ran") or "float32"
    shape = shape_of(cfg.get("model") or "small")
    engine = _engine(step, shape, dtype)
    problems: list[str] = []
    measured_runs = target.read_runs(problems)
    if not measured_runs:
        raise UsageError(f"{target}: no readable runs ({'; '.join(problems) or 'none'})")
    if any(r.described.multi_turn for r in measured_runs):
        raise UsageError(f"{target}: multi-turn runs cannot be replayed (a turn's prompt "
                         "depends on the previous reply)")
    fitted_runs = fitted_on.read_runs(problems) if replay else measured_runs
    kv_bytes = lambda t: shape.kv_bytes(t, dtype)  # noqa: E731
    systems, why = _under_load(engine, fitted_runs,
                               sorted({r.placement for r in measured_runs}), link, kv_bytes,
                               fitted_on.read_evidence().slo, cal.wake_curve())
    slo = tuple((m.get("sizing") or {}).get("slo") or cfg.get("slo") or DEFAULT_SLO)
    opts = PlanOptions(model=cfg.get("model") or "small", slo=slo, dtype=dtype,
                       attainment=cfg.get("attainment", 0.9),
                       operating_rate=cfg.get("operating_rate"), workload=cfg.get("workload"))
    label = (f"simulated by advisor plan --calibrate: step times fitted to {fitted_on.name}'s "
             f"calibration, scaled to its measured runs ({why}); KV link "
             f"{link.source}; replaying {target.name}'s requests")
    run_dir = RunDir.create(out, f"plan-replay-{target.name}")
    run_dir.write_manifest({**manifest(cfg.get("seed", 0), {**cfg, "fitted_on": str(fitted_on),
                                                            "replayed": str(target)}),
                            "simulated": label, "dtype": m.get("dtype"),
                            "calibration": m.get("calibration")})
    kinds = {r.placement: r.kind for r in measured_runs}
    placements = [Placement(n, kinds[n])
                  for n in sorted(kinds, key=lambda n: kinds[n] != "collocated")]
    done = {p.name: [] for p in placements}
    sims, compare = {p.name: [] for p in placements}, []
    for run in sorted(measured_runs, key=lambda r: (r.placement, r.rate)):
        p = next(x for x in placements if x.name == run.placement)
        reqs = _requests(run)
        system = systems[p.name]
        sim = runs.run(system, reqs, p, run.rate, opts.slos, opts.attainment, label,
                       run.described.workload, run.described.workload_params)
        run_dir.write_run(sim.result)
        done[p.name].append(sim.outcome)
        sims[p.name].append(sim.sim)
        compare.append(_row(p.name, run, sim.result))
    grid = sorted({r.rate for r in measured_runs})
    shown = [next(p for p in placements if p.kind == k) for k in ("collocated", "disagg")
             if any(p.kind == k for p in placements)]
    dis = next((p for p in shown if p.kind == "disagg"), None)
    kv = runs.kv_evidence(sims[dis.name], shape.kv_bytes_per_token(dtype), link.name) \
        if dis else None
    prompt = float(np.mean([x["prompt_tokens"] for r in measured_runs for x in r.records]))
    rec = runs.decide(run_dir, opts, shown, placements, done, grid, _calibration(target),
                      prompt, kv, label, opts.model, {"compare": compare})
    if as_json:
        print(json.dumps(rec, indent=2, default=str))
    else:
        _print_compare(compare)
        console.print_recommendation(rec)
        print(f"run directory: {run_dir} (every figure simulated)")
    return rec


def _below(run, slo) -> bool:
    """Whether a measured run is below collapse (its p99 ITL within the sweep's bound) and
    its median TTFT within the TTFT SLO (past it, a queue that grows for the whole run)."""
    return (run.get("p99_itl_ms") or 0.0) <= COLLAPSE * slo.itl_ms \
        and 0.0 < (run.get("median_ttft_ms") or 0.0) <= slo.ttft_ms


def _requests(run) -> list[SimRequest]:
    """A measured run's requests as they were scheduled, with the lengths they had (a
    failed request: the run's median output)."""
    outs = [x["output_tokens"] for x in run.records if x["ok"]] or [1]
    typical = int(np.median(outs))
    return [SimRequest(x["scheduled"] or 0.0, x["prompt_tokens"],
                       x["output_tokens"] if x["ok"] else typical)
            for x in sorted(run.records, key=lambda x: x["scheduled"] or 0.0)]


def _row(name: str, measured, predicted) -> dict:
    keys = ("median_ttft_ms", "p99_itl_ms", "p50_itl_ms", "slo_attainment")
    return {"placement": name, "rate": measured.rate,
            **{f"measured_{k}": measured.get(k) for k in keys},
            **{f"predicted_{k}": predicted.get(k) for k in keys}}


def _print_compare(rows: list[dict]) -> None:
    print("predicted (simulated) against measured, per placement and rate:")
    print(f"  {'placement':>14} {'rate':>7}  {'median TTFT ms':>22}  {'p99 ITL ms':>22}")
    for r in rows:
        print(f"  {r['placement']:>14} {r['rate']:7.3g}  "
              f"{r['predicted_median_ttft_ms']:9.1f} vs {r['measured_median_ttft_ms']:9.1f}  "
              f"{r['predicted_p99_itl_ms']:9.1f} vs {r['measured_p99_itl_ms']:9.1f}")
