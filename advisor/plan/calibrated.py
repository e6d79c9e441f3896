"""`advisor plan --calibrate RUN_DIR [--replay OTHER]`: the simulator fitted to a measured
sweep (its calibration, its KV transfers, its runs under load: advisor.plan.loadfit),
then every measured run replayed with its own arrivals and lengths; `compare` sets the
predictions beside the measurements."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np

from advisor.engines.placement import Placement, counts
from advisor.errors import UsageError
from advisor.goodput.outcomes import Outcome
from advisor.output import console
from advisor.plan import sim_runs
from advisor.plan.loadfit import fit_to_runs, instances, requests_of
from advisor.plan.options import PlanOptions
from advisor.plan.simulate import Simulation
from advisor.plan.steptime import FittedStep, fit
from advisor.plan.system import EngineSpec
from advisor.probe.links import Link
from advisor.probe.shapes import ModelShape, shape_of
from advisor.rundata.evidence import Calibration
from advisor.rundata.files import RunDataError
from advisor.rundata.manifest import Manifest
from advisor.rundata.result import RunResult
from advisor.rundata.rundir import RunDir
from advisor.rundata.slo import DEFAULT_SLO
from engine.api import DTYPE_BYTES, EngineConfig

GIB = 1 << 30
URL_KV_TOKENS = 1 << 40  # a deployment measured by URL: KV that never runs short
URL_DTYPE = "bfloat16"  # a deployment measured by URL that did not say its dtype


def _dir(path: str, flag: str) -> RunDir:
    try:
        return RunDir.existing(path)
    except RunDataError as e:
        raise UsageError(f"{flag} {e}") from None


def _calibration(run_dir: RunDir) -> Calibration:
    cal = run_dir.read_manifest().calibration
    if cal is None:
        raise UsageError(f"--calibrate {run_dir}: no calibration in its manifest (a sweep of "
                         "the bundled engine has one)")
    return cal


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


def _engine(step: FittedStep, shape: ModelShape, dtype: str, by_url: bool) -> EngineSpec:
    """The bundled engine's defaults around `step` (its token budget and sequences are
    vLLM's defaults too); a deployment measured `by_url` gets KV that never runs short,
    since its size is not known here."""
    base = EngineConfig()
    kv = URL_KV_TOKENS if by_url else \
        int(base.kv_cache_memory_gib * GIB // shape.kv_bytes_per_token(dtype))
    return EngineSpec(step, kv, base.max_num_batched_tokens, base.max_num_seqs,
                      base.enable_chunked_prefill, block_size=base.block_size)


def _shapes(names: list[str], kinds: dict[str, str], given: tuple[str, ...]) -> dict[str, str]:
    """Each measured placement's simulated shape: its own name where that is one
    (collocated-N, disagg-XpYd: the bundled engine's), else what `--topology NAME=SHAPE`
    says (a deployment measured by URL: collocated-url, disagg-url)."""
    out = {}
    for item in given:
        name, _, shape = item.partition("=")
        kind, _, size = shape.partition(":")
        if name not in names or kind != kinds[name] or counts(kind, size) is None:
            raise UsageError(f"--topology {item!r}: expected NAME=collocated:N or "
                             f"NAME=disagg:XpYd of the same kind, NAME one of {', '.join(names)}")
        out[name] = f"{kind}-{size}"
    for name in names:
        out.setdefault(name, name)
        if instances(out[name]) is not None:
            continue
        if kinds[name] not in ("collocated", "disagg"):
            raise UsageError(f"placement {name!r} ({kinds[name]}) cannot be simulated: the "
                             "planner runs collocated and disagg placements")
        example = "collocated:2" if kinds[name] == "collocated" else "disagg:1p1d"
        raise UsageError(f"placement {name!r} cannot be simulated without its shape: give "
                         f"it, for example --topology {name}={example}")
    return out


def run_calibrated(measured: str, replay: str | None, out: str, as_json: bool,
                   report: bool = True, topologies: tuple[str, ...] = (),
                   model: str | None = None) -> sim_runs.Planned:
    """Fit to `measured`, predict `replay` (default: `measured` itself); the recommendation
    with `compare` (predicted beside measured, per placement and rate); with `report`, its
    report drawn too. `topologies` (NAME=SHAPE) give a deployment measured by URL its shape,
    `model` its model's (default: the sweep's --model)."""
    fitted_on = _dir(measured, "--calibrate")
    target = _dir(replay, "--replay") if replay else fitted_on
    cal = _calibration(fitted_on)
    step = fit(cal)
    link = _link(fitted_on)
    m = target.read_manifest()
    cfg = m.config
    ran = m.dtype_ran or "float32"
    # NOTE: a sweep by URL records "auto", and vLLM's auto is the model's dtype: bfloat16
    dtype = ran if ran in DTYPE_BYTES else URL_DTYPE
    model = model or m.model or "small"
    try:
        shape = shape_of(model)
    except ValueError as e:
        raise UsageError(f"--model: {e}") from None
    by_url = m.by_url
    engine = _engine(step, shape, dtype, by_url)
    problems: list[str] = []
    measured_runs = target.read_runs(problems)
    if not measured_runs:
        raise UsageError(f"{target}: no readable runs ({'; '.join(problems) or 'none'})")
    if any(r.described.multi_turn for r in measured_runs):
        raise UsageError(f"{target}: multi-turn runs cannot be replayed (a turn's prompt "
                         "depends on the previous reply)")
    fitted_runs = fitted_on.read_runs(problems) if replay else measured_runs
    kv_bytes = lambda t: shape.kv_bytes(t, dtype)  # noqa: E731
    # (placement, rate, run): RunDir.read_runs keeps only runs that name both
    named = [(r.placement, r.rate, r) for r in measured_runs
             if r.placement is not None and r.rate is not None]
    kinds = {name: r.kind or "" for name, _, r in named}
    names = sorted(kinds)
    shapes = _shapes(names, kinds, topologies)
    systems, why = fit_to_runs(engine, fitted_runs, names, link, kv_bytes,
                               fitted_on.read_evidence().slo, cal.wake_curve(), shapes)
    if by_url:
        why += ("; measured by URL: " + ", ".join(f"{n} as {shapes[n]}" for n in names)
                + f", {shape.name}'s shapes, KV not limited (its size is not known here), "
                  "vLLM's default token budget"
                + ("" if dtype == ran else f", KV bytes in {dtype} (the deployment's dtype, "
                   f"{ran}, is not known here)"))
    slo = m.sizing.slo if m.sizing else cfg.slo or DEFAULT_SLO
    opts = PlanOptions(model=model, slo=slo, dtype=dtype,
                       attainment=cfg.attainment if cfg.attainment is not None else 0.9,
                       operating_rate=cfg.operating_rate,
                       workload=cfg.workload or PlanOptions.workload, report=report)
    label = (f"simulated by advisor plan --calibrate: step times fitted to {fitted_on.name}'s "
             f"calibration, scaled to its measured runs ({why}); KV link "
             f"{link.source}; replaying {target.name}'s requests")
    run_dir = RunDir.create(out, f"plan-replay-{target.name}")
    run_dir.write_manifest(Manifest.new(m.seed, {**cfg.options(), "fitted_on": str(fitted_on),
                                                 "replayed": str(target)},
                                        simulated=label, dtype=m.dtype, calibration=m.calibration))
    placements = [Placement(n, kinds[n])
                  for n in sorted(kinds, key=lambda n: kinds[n] != "collocated")]
    done: dict[str, list[Outcome]] = {p.name: [] for p in placements}
    sims: dict[str, list[Simulation]] = {p.name: [] for p in placements}
    compare: list[dict[str, Any]] = []
    for name, rate, run in sorted(named, key=lambda n: (n[0], n[1])):
        p = next(x for x in placements if x.name == name)
        reqs = requests_of(run)
        system = systems[p.name]
        sim = sim_runs.run(system, reqs, p, rate, opts.slo, opts.attainment, label,
                           run.described.workload or opts.workload,
                           run.described.workload_params)
        run_dir.write_run(sim.result)
        done[p.name].append(sim.outcome)
        sims[p.name].append(sim.sim)
        compare.append(_row(p.name, run, sim.result))
    grid = sorted({rate for _, rate, _ in named})
    shown = [next(p for p in placements if p.kind == k) for k in ("collocated", "disagg")
             if any(p.kind == k for p in placements)]
    dis = next((p for p in shown if p.kind == "disagg"), None)
    kv = sim_runs.kv_evidence(sims[dis.name], shape.kv_bytes_per_token(dtype), link.name) \
        if dis else None
    prompt = float(np.mean([x["prompt_tokens"] for r in measured_runs for x in r.records or []]))
    planned = sim_runs.decide(run_dir, opts, shown, placements, done, grid, _calibration(target),
                          prompt, kv, label, model, compare=compare)
    if as_json:
        print(json.dumps(planned.to_json(), indent=2, default=str))
    else:
        _print_compare(compare)
        console.print_recommendation(planned.recommendation)
        print(f"run directory: {run_dir} (every figure simulated)")
    return planned


def _row(name: str, measured: RunResult, predicted: RunResult) -> dict[str, Any]:
    """Predicted beside measured, with the measurement's bootstrap 95% intervals (where the
    run has them): how far a prediction could be off by the measurement's own chance."""
    keys = ("median_ttft_ms", "p99_itl_ms", "p50_itl_ms", "slo_attainment")
    ci = dataclasses.asdict(measured.stats.ci95) if measured.stats.ci95 else {}
    return {"placement": name, "rate": measured.rate,
            # the host's cores the measured run kept busy, which the simulation does not model
            "measured_cores_busy": measured.host_cores_busy(),
            **{f"measured_{k}": measured.get(k) for k in keys},
            **{f"predicted_{k}": predicted.get(k) for k in keys},
            **{f"measured_{k}_ci95": ci[k] for k in keys if k in ci}}


def _print_compare(rows: list[dict[str, Any]]) -> None:
    print("predicted (simulated) against measured, per placement and rate:")
    print(f"  {'placement':>14} {'rate':>7}  {'median TTFT ms':>22}  {'p99 ITL ms':>22}")
    for r in rows:
        print(f"  {r['placement']:>14} {r['rate']:7.3g}  "
              f"{r['predicted_median_ttft_ms']:9.1f} vs {r['measured_median_ttft_ms']:9.1f}  "
              f"{r['predicted_p99_itl_ms']:9.1f} vs {r['measured_p99_itl_ms']:9.1f}")
