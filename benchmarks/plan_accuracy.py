"""The planner against measurements on this machine, and its speed.

1. Runs the default `advisor sweep` (long-prompt) and a short-chat sweep of the bundled
   engine (or takes run directories already made: --fit-run, --other-run).
2. Fits the simulator to the default sweep (`advisor plan --calibrate`) and predicts both
   sweeps' runs, request for request; the short-chat one was not used to fit.
3. Prints predicted beside measured median TTFT and p99 ITL per placement and rate, the
   ratio, whether it is within 20% (goal: at each rate below collapse), the host's cores
   the measured run kept busy (marked "host full" where the report marks it), and each side's
   max-goodput ordering of the placements (goal: the same). Beside each measured figure,
   its bootstrap 95% interval: a row whose predictions miss 20% but fall inside those is
   marked "within noise" (the run's own chance could put its figure there), and counted
   apart from the goal. Last, each side's gaps over the ITL SLO, as counts: a p99 of a few
   hundred gaps is one of its largest few, so at a knee, where ~1% of the gaps are a
   prompt's stall, one stall more or less moves it several times over; the counts show
   whether the model has the stalls' share right when the p99s part.
4. Measures the default sweep again, as the same experiment (its workload scales, SLO,
   rates per placement and seed: the same requests), and prints how often the two
   measurements agree within 20% below collapse: the ceiling this host's own noise puts on
   any prediction (--no-repeat leaves it out, ~4 minutes less).
5. Times one placement's rate sweep in the simulator (10 rates x 1,000 requests of the
   guide's L40S case) against its goal of 2 s on one core.

Usage: python benchmarks/plan_accuracy.py [--fit-run DIR] [--other-run DIR] [--out DIR]
           [--no-repeat]
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from advisor.output.report_data import fills_host
from advisor.plan import candidates, hardware, runs
from advisor.plan.calibrated import run_calibrated
from advisor.plan.loadfit import below_collapse
from advisor.plan.simulate import simulate
from advisor.probe.shapes import shape_of
from advisor.rundata.rundir import RunDir
from workloads.presets import preset_spec

WITHIN = 0.2


def sweep(workload: str, out: Path, *flags: str) -> str:
    before = set(out.glob("*")) if out.exists() else set()
    subprocess.run([sys.executable, "-m", "advisor.cli", "sweep", "--workload", workload,
                    "--out", str(out), *flags], check=True)
    (new,) = set(out.glob("*")) - before
    return str(new)


def _figures(run_dir: str) -> dict[tuple[str, float], tuple[float, float]]:
    """(median TTFT, p99 ITL) in ms of each run in `run_dir`, by (placement, rate)."""
    return {(r.placement, round(r.rate, 6)): (r.get("median_ttft_ms"), r.get("p99_itl_ms"))
            for r in RunDir(run_dir).read_runs([])}


def repeat(first: str, out: Path) -> list[str]:
    """The sweep in `first` measured again as the same experiment: one fixed-rate sweep per
    placement at the rates it ran, with its workload scales, SLO and seed."""
    rd = RunDir(first)
    slo, config = rd.read_evidence().slo, rd.read_manifest()["config"]
    params = next(r.get("workload_params") for r in rd.read_runs([]))
    rates: dict[str, list[float]] = {}
    for placement, rate in _figures(first):
        rates.setdefault(placement, []).append(rate)
    dirs = []
    for placement, rs in sorted(rates.items()):
        kind, _, shape = placement.partition("-")  # collocated-2 -> collocated:2
        dirs.append(sweep(config["workload"], out, "--topologies", f"{kind}:{shape}", "--rates",
                          ",".join(f"{r:g}" for r in sorted(rs)),
                          "--scale", str(params["scale"]),
                          "--output-scale", str(params["output_scale"]),
                          "--slo", f"ttft:{slo.ttft_ms:g}", f"itl:{slo.itl_ms:g}",
                          "--model", config["model"], "--seed", str(config["seed"]),
                          "--no-report"))
    return dirs


def _close(pairs) -> bool:
    """Whether each (x, y) pair of figures is within 20%: y of x."""
    return all(x and y is not None and abs(y / x - 1) <= WITHIN for x, y in pairs)


def agreement(first: str, again: list[str], rec: dict) -> None:
    """Print the second measurement against the first, and the prediction fitted to the
    first (`rec`) against the second, row by row; count the rows below collapse (in the
    first) where each agrees within 20% on both figures."""
    slo = RunDir(first).read_evidence().slo
    a = _figures(first)
    b = {k: v for d in again for k, v in _figures(d).items()}
    pred = {(r["placement"], round(r["rate"], 6)):
            (r["predicted_median_ttft_ms"], r["predicted_p99_itl_ms"]) for r in rec["compare"]}
    when = [datetime.fromisoformat(RunDir(d).read_manifest()["created"]) for d in (first, *again)]
    print(f"\nthe default sweep measured again {(when[1] - when[0]).total_seconds() / 60:.0f} "
          "minutes later (same workload, SLO, rates and seed): the ceiling of this host's own "
          "noise")
    print(f"  {'placement':>14} {'rate':>6}  {'median TTFT ms: again / first':>30}  "
          f"{'p99 ITL ms: again / first':>28}  predicted / again: TTFT, p99 ITL")
    same = fits = counted = 0
    for key in sorted(a.keys() & b.keys()):
        (t1, p1), (t2, p2) = a[key], b[key]
        t3, p3 = pred.get(key, (None, None))
        below = below_collapse(p1, t1, slo)
        good = _close(((t1, t2), (p1, p2)))
        counted += below
        same += below and good
        fits += below and _close(((t2, t3), (p2, p3)))
        mark = "collapsed" if not below else "within 20%" if good else "off"
        mine = f"{t3 / t2:4.2f}, {p3 / p2:4.2f}" if t3 is not None else "-"
        print(f"  {key[0]:>14} {key[1]:6.3g}  {t2:9.1f} / {t1:9.1f} ({t2 / t1:4.2f})      "
              f"{p2:8.1f} / {p1:8.1f} ({p2 / p1:4.2f})  {mine:>10}  {mark}")
    print(f"  below collapse, within 20% on both: the second measurement of the first in "
          f"{same} of {counted} rows; the prediction of the second in {fits} of {counted}")


def ordering(run_dir: str) -> str:
    """Placements by max goodput, best first ('=' between a tie), as a run directory says."""
    ev = RunDir(run_dir).read_evidence()
    best = sorted(((s.max_goodput_rps or 0.0, s.placement) for s in (ev.collocated,
                   ev.disaggregated) if s is not None and s.placement), reverse=True)
    out = f"{best[0][1]} {best[0][0]:.3g}"
    for (g0, _), (g, name) in itertools.pairwise(best):
        out += f" {'=' if g == g0 else '>'} {name} {g:.3g}"
    return out


def over_slo(run_dir: str, itl_ms: float) -> dict[tuple[str, float], tuple[int, int]]:
    """(gaps over `itl_ms`, gaps) of each run in `run_dir`, by (placement, rate)."""
    out = {}
    for run in RunDir(run_dir).read_runs([]):
        gaps = [b - a for x in run.records or () if x["ok"]
                for a, b in zip(x["chunks"], x["chunks"][1:])]
        out[(run.placement, round(run.rate, 6))] = (sum(g * 1000 > itl_ms for g in gaps),
                                                     len(gaps))
    return out


def table(title: str, rec: dict, slo, cores: int | None, measured: str) -> tuple[int, int, int]:
    """Print predicted against measured, with the host's cores each measured run kept busy
    (of `cores`; "host full" where the report marks the run: the simulation has no term
    for a full host); (rows within 20% on both, rows where each figure is within 20% or inside
    the measurement's bootstrap 95% interval, rows below collapse: measured p99 ITL within
    twice its SLO and median TTFT within its SLO, as the fit has them)."""
    print(f"\n{title}")
    print(f"  {'placement':>14} {'rate':>6}  {'median TTFT ms: pred / meas [95%]':>38}  "
          f"{'p99 ITL ms: pred / meas [95%]':>36}  {'gaps > ITL SLO: pred / meas':>27}")
    over = {side: over_slo(d, slo.itl_ms) for side, d in (("pred", rec["run_dir"]),
                                                          ("meas", measured))}
    ok = noise = counted = 0
    for r in rec["compare"]:
        cells, good, near = [], True, True
        for k in ("median_ttft_ms", "p99_itl_ms"):
            p, m = r[f"predicted_{k}"], r[f"measured_{k}"]
            lo, hi = r.get(f"measured_{k}_ci95") or (m, m)
            ratio = p / m if m else float("nan")
            good &= abs(ratio - 1) <= WITHIN
            near &= abs(ratio - 1) <= WITHIN or lo <= p <= hi
            cells.append(f"{p:7.1f} / {m:7.1f} [{lo:.0f}, {hi:.0f}] ({ratio:4.2f})")
        collapsed = not below_collapse(r["measured_p99_itl_ms"], r["measured_median_ttft_ms"],
                                       slo)
        if not collapsed:
            counted += 1
            ok += good
            noise += near
        mark = "collapsed" if collapsed else ("within 20%" if good else
                                              "within noise" if near else "off")
        busy = r.get("measured_cores_busy")
        full = fills_host(busy, cores)
        host = "" if busy is None else f"  cores {busy:.2f}" + (" host full" if full else "")
        key = (r["placement"], round(r["rate"], 6))
        gaps = " / ".join("{} of {}".format(*over[side].get(key, (0, 0)))
                          for side in ("pred", "meas"))
        print(f"  {r['placement']:>14} {r['rate']:6.3g}  {cells[0]:>38}  {cells[1]:>36}  "
              f"{gaps:>27}  {mark}{host}")
    return ok, noise, counted


def speed() -> float:
    """Seconds to simulate 10 rates x 1,000 requests of collocated-2 (L40S, qwen2.5-7b)."""
    shape, g = shape_of("qwen2.5-7b"), hardware.gpu("l40s")
    c = candidates.candidates(shape, g, 2)[0]
    system = candidates.system(c, shape, g, hardware.link("pcie4", True, g))
    spec = preset_spec("long-prompt")
    reqs = [runs.requests(spec, 0.1 * 1.3 ** i, 1000, i) for i in range(10)]
    t = time.process_time()
    for r in reqs:
        simulate(system, r)
    return time.process_time() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit-run", help="a default sweep's run directory (else one is run)")
    ap.add_argument("--other-run", help="a short-chat sweep's run directory (else one is run)")
    ap.add_argument("--out", default="results/plan-accuracy")
    ap.add_argument("--no-repeat", action="store_true",
                    help="do not measure the default sweep again (its noise ceiling)")
    a = ap.parse_args()
    out = Path(a.out)
    fit_run = a.fit_run or sweep("long-prompt", out / "measured")
    other = a.other_run or sweep("short-chat", out / "measured")
    # NOTE: after the short-chat sweep, so that the two measurements of the default sweep lie
    # at least as far apart as the fit and the sweep it predicts without fitting
    again = [] if a.no_repeat else repeat(fit_run, out / "again")
    slo = {run: RunDir(run).read_evidence().slo for run in (fit_run, other)}
    results = {}
    for title, replay in (("fitted to and predicting the default sweep", None),
                          ("fitted to the default sweep, predicting short-chat (not fitted)",
                           other)):
        rec = run_calibrated(fit_run, replay, str(out / "predicted"), as_json=False).to_json()
        results[title] = (rec, replay or fit_run)
    print("\n==== plan accuracy: the bundled engine on this machine (say which CPU: lscpu) ====")
    for title, (rec, measured) in results.items():
        host = RunDir(measured).read_manifest().get("host") or {}
        ok, noise, counted = table(title, rec, slo[measured], host.get("cpus_usable"),
                                   measured)
        print(f"  within 20% on both below collapse: {ok} of {counted} rows; within 20% or "
              f"the measurement's 95% interval: {noise} of {counted}")
        m_order, p_order = ordering(measured), ordering(rec["run_dir"])
        print(f"  max-goodput ordering (req/s): measured {m_order}; predicted {p_order}")
    if not a.no_repeat:
        agreement(fit_run, again, results["fitted to and predicting the default sweep"][0])
    s = speed()
    print(f"\nsimulator: 10 rates x 1,000 requests of one placement in {s:.2f} s of CPU "
          f"(goal 2 s: {2 / s:.1f}x faster than needed)")


if __name__ == "__main__":
    main()
