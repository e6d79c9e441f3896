"""`advisor plan --calibrate RUN_DIR [--replay OTHER]`: the simulator fitted to a measured
bundled-engine sweep, predicting that sweep's runs (or another's) request for request.

The step model is fitted to the sweep's calibration (advisor.plan.steptime.fit), the KV
link to its measured transfers; every measured run is replayed with its own arrivals and
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
from advisor.rundata.evidence import Calibration
from advisor.rundata.files import RunDataError, manifest
from advisor.rundata.rundir import RunDir
from advisor.sweep.options import DEFAULT_SLO
from advisor.sweep.placements import Placement
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
            front_ms: float = 0.0) -> System:
    """A bundled-engine placement by its sweep name: collocated-N or disagg-XpYd."""
    kind, _, shape = name.partition("-")
    if kind == "collocated" and shape.isdigit():
        return System(decode=(engine,) * int(shape), front_ms=front_ms)
    p, _, d = shape.removesuffix("d").partition("p")
    if kind == "disagg" and p.isdigit() and d.isdigit():
        return System(decode=(engine,) * int(d), prefill=(engine,) * int(p), link=link,
                      kv_bytes=kv_bytes, front_ms=front_ms, proxy_ms=PROXY_MS)
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


def _under_load(engine: EngineSpec, measured: list, names: list[str], link: Link,
                kv_bytes) -> tuple[dict[str, System], str]:
    """Each placement in `names` as a system fitted to the lowest rate measured (in
    `measured`): the request's path outside the steps (_outside_steps) as a fixed latency,
    prefill steps scaled to collocated's median TTFT there, each placement's decode steps
    to its own median ITL, step jitter to its p99 ITL, and what P/D's median TTFT has
    beyond that as a fixed latency per request (the proxy's HTTP legs).

    # NOTE: the calibration times one engine alone, unloaded. In the runs the client, the
    # proxy and the other instances share this machine's cores: every step is slower, and
    # its time varies (the p99 gap of an unloaded run is well above its median here).
    """
    lowest = {}
    for r in measured:
        if r.placement not in lowest or r.rate < lowest[r.placement].rate:
            lowest[r.placement] = r
    engine, outside = _outside_steps(engine)

    def system(name: str, spec: EngineSpec, extra: float = 0.0) -> System:
        return _system(name, spec, link, kv_bytes, outside + extra)

    pre = 1.0
    col = next((r for r in lowest.values() if r.kind == "collocated"), None)
    if col is not None:
        ttft, _, _ = _figures(system(col.placement, engine), col)
        pre = max(1e-3, (col.get("median_ttft_ms") or ttft) - outside) / max(1e-3, ttft - outside)
    systems, notes = {}, [f"{outside:.1f} ms per request outside the steps"]
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
        ttft, _, _ = _figures(system(name, scaled), low)
        want = low.get("median_ttft_ms") or ttft
        extra, p = 0.0, pre
        if low.kind == "disagg" and want < ttft:
            # NOTE: collocated's prefill scale overshoots this prefiller's own TTFT (it runs
            # no decodes): its prefill is scaled down to it, else its queue fills too early
            p = _solve(lambda x, n=name, e=scaled, r=low:
                       _figures(system(n, _scaled(e, x / pre, 1.0)), r)[0], 0.5 * pre, pre, want)
            scaled = _scaled(scaled, p / pre, 1.0)
        elif low.kind == "disagg":
            extra = want - ttft
        systems[name] = system(name, scaled, extra)
        notes.append(f"{name}: prefill x{p:.2f}, decode x{dec:.2f}, jitter {jitter:.2f}"
                     + (f", +{extra:.0f} ms per request" if extra else "")
                     + f" (at {low.rate:g} req/s)")
    return systems, "; ".join(notes)


def run_calibrated(measured: str, replay: str | None, out: str, as_json: bool) -> dict:
    """Fit to `measured`, predict `replay` (default: `measured` itself); the recommendation
    with `compare` (predicted beside measured, per placement and rate)."""
    fitted_on = _dir(measured, "--calibrate")
    target = _dir(replay, "--replay") if replay else fitted_on
    step = fit(_calibration(fitted_on))
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
                               sorted({r.placement for r in measured_runs}), link, kv_bytes)
    slo = tuple((m.get("sizing") or {}).get("slo") or cfg.get("slo") or DEFAULT_SLO)
    opts = PlanOptions(model=cfg.get("model") or "small", slo=slo, dtype=dtype,
                       attainment=cfg.get("attainment", 0.9),
                       operating_rate=cfg.get("operating_rate"), workload=cfg.get("workload"))
    label = (f"simulated by advisor plan --calibrate: step times fitted to {fitted_on.name}'s "
             f"calibration, scaled to each placement's lowest measured rate ({why}); KV link "
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
