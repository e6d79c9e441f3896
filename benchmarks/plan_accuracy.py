"""The planner against this machine's own spread, and its speed.

A prediction can be no closer to a measurement than the same experiment measured twice is
to itself, and on a shared VM two default sweeps minutes apart often differ by more than
20%. So the goal is stated against that spread:

1. Runs the default `advisor sweep` (or takes its run directory: --first).
2. Measures it again as the same experiment: one fixed-rate sweep per placement at the
   rates it ran, with its workload scales, SLO, model and seed, so the same requests
   (or takes those run directories: --again).
3. Fits the plan to the first measurement (`advisor plan --calibrate`) and predicts its
   runs, request for request.
4. Prints, per placement and rate, the band the two measurements span widened by each
   one's bootstrap 95% interval, on median TTFT and p99 ITL, and whether the prediction
   lies inside it. Goal: inside on both figures at >= 80% of the rows below collapse in
   both measurements (p99 ITL within twice its SLO, median TTFT within its SLO).
5. Prints each one's max-goodput ordering of the placements. Goal: the prediction's the
   same as the measurements' (where the two measurements order them differently, no
   ordering is the host's, and that is said).
6. Times one placement's rate sweep in the simulator (10 rates x 1,000 requests of the
   guide's L40S case) against its goal of 2 s on one core.

Usage: python benchmarks/plan_accuracy.py [--first DIR] [--again DIR ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import time
from pathlib import Path

from advisor.plan import candidates, hardware, sim_runs
from advisor.plan.calibrated import run_calibrated
from advisor.plan.loadfit import below_collapse
from advisor.plan.simulate import simulate
from advisor.probe.shapes import shape_of
from advisor.rundata.rundir import RunDir
from workloads.presets import preset_spec

GOAL = 0.8
FIGURES = ("median_ttft_ms", "p99_itl_ms")


def sweep(out: Path, *flags: str) -> str:
    """One `advisor sweep` into `out`; its run directory."""
    before = set(out.glob("*")) if out.exists() else set()
    subprocess.run([sys.executable, "-m", "advisor.cli", "sweep", "--out", str(out), *flags],
                   check=True)
    (new,) = set(out.glob("*")) - before
    return str(new)


def measured(run_dirs: list[str]) -> dict[tuple[str, float], dict[str, tuple]]:
    """Each run's (figure, its bootstrap 95% interval) by figure, by (placement, rate)."""
    out = {}
    for d in run_dirs:
        for r in RunDir(d).read_runs([]):
            ci = r.get("ci95") or {}
            out[(r.placement, round(r.rate, 6))] = {
                k: (r.get(k), tuple(ci.get(k) or (r.get(k), r.get(k)))) for k in FIGURES}
    return out


def repeat(first: str, out: Path) -> list[str]:
    """The sweep in `first` measured again as the same experiment: one fixed-rate sweep per
    placement at the rates it ran, with its workload scales, SLO, model and seed."""
    rd = RunDir(first)
    slo, manifest = rd.read_evidence().slo, rd.read_manifest()
    params = next(r.get("workload_params") for r in rd.read_runs([]))
    rates: dict[str, list[float]] = {}
    for placement, rate in measured([first]):
        rates.setdefault(placement, []).append(rate)
    dirs = []
    for placement, rs in sorted(rates.items()):
        kind, _, shape = placement.partition("-")  # collocated-2 -> collocated:2
        dirs.append(sweep(out, "--workload", str(manifest.config.workload),
                          "--topologies", f"{kind}:{shape}",
                          "--rates", ",".join(f"{r:g}" for r in sorted(rs)),
                          "--scale", str(params["scale"]),
                          "--output-scale", str(params["output_scale"]),
                          "--slo", *(o.text for o in slo),
                          "--model", str(manifest.config.model), "--seed", str(manifest.seed),
                          "--no-report"))
    return dirs


def band(a: tuple, b: tuple) -> tuple[float, float]:
    """The span of two measurements of one figure, each widened by its 95% interval."""
    (m1, (lo1, hi1)), (m2, (lo2, hi2)) = a, b
    return min(m1, m2, lo1, lo2), max(m1, m2, hi1, hi2)


def bands(first: dict, again: dict, predicted: dict, slo) -> tuple[int, int]:
    """Print each row's bands and the prediction against them; (rows inside the band on
    both figures, rows below collapse in both measurements)."""
    print(f"  {'placement':>14} {'rate':>6}  "
          + "  ".join(f"{k + ': pred in [band] (first, again)':>46}" for k in FIGURES))
    inside = counted = 0
    for key in sorted(first.keys() & again.keys() & predicted.keys()):
        a, b, p = first[key], again[key], predicted[key]
        cells, hit = [], True
        for k in FIGURES:
            lo, hi = band(a[k], b[k])
            hit &= lo <= p[k] <= hi
            cells.append(f"{p[k]:7.1f} in [{lo:6.1f}, {hi:6.1f}] ({a[k][0]:6.1f}, {b[k][0]:6.1f})")
        below = all(below_collapse(m["p99_itl_ms"][0], m["median_ttft_ms"][0], slo)
                    for m in (a, b))
        counted += below
        inside += below and hit
        mark = "collapsed" if not below else "inside" if hit else "outside"
        print(f"  {key[0]:>14} {key[1]:6.3g}  " + "  ".join(f"{c:>46}" for c in cells)
              + f"  {mark}")
    return inside, counted


def ordering(goodputs: dict[str, float]) -> tuple[str, tuple]:
    """Placements by max goodput, best first ('=' between a tie), as text and as groups of
    tied names (what two orderings compare by)."""
    best = sorted(((g, name) for name, g in goodputs.items()), reverse=True)
    text, groups = f"{best[0][1]} {best[0][0]:.3g}", [[best[0][1]]]
    for (g0, _), (g, name) in itertools.pairwise(best):
        text += f" {'=' if g == g0 else '>'} {name} {g:.3g}"
        if g == g0:
            groups[-1].append(name)
        else:
            groups.append([name])
    return text, tuple(tuple(sorted(g)) for g in groups)


def max_goodputs(run_dirs: list[str]) -> dict[str, float]:
    """Each placement's max goodput (req/s) as its run directory's evidence says."""
    out = {}
    for d in run_dirs:
        ev = RunDir(d).read_evidence()
        for s in (ev.collocated, ev.disaggregated):
            if s is not None and s.placement:
                out[s.placement] = s.max_goodput_rps or 0.0
    return out


def speed() -> float:
    """Seconds to simulate 10 rates x 1,000 requests of collocated-2 (L40S, qwen2.5-7b)."""
    shape, g = shape_of("qwen2.5-7b"), hardware.gpu("l40s")
    c = candidates.candidates(shape, g, 2)[0]
    system = candidates.system(c, shape, g, hardware.link("pcie4", True, g))
    spec = preset_spec("long-prompt")
    reqs = [sim_runs.requests(spec, 0.1 * 1.3 ** i, 1000, i) for i in range(10)]
    t = time.process_time()
    for r in reqs:
        simulate(system, r)
    return time.process_time() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--first", help="a default sweep's run directory (else one is run)")
    ap.add_argument("--again", nargs="+",
                    help="its repeat's run directories, one per placement (else measured)")
    ap.add_argument("--out", default="results/plan-accuracy")
    a = ap.parse_args()
    out = Path(a.out)
    first = a.first or sweep(out / "first")
    again = a.again or repeat(first, out / "again")
    rec = run_calibrated(first, None, str(out / "predicted"), as_json=False).to_json()
    predicted = {(r["placement"], round(r["rate"], 6)):
                 {k: r[f"predicted_{k}"] for k in FIGURES} for r in rec["compare"]}
    print("\n==== plan accuracy: the bundled engine on this machine (say which CPU: lscpu) ====")
    print("the plan fitted to the first measurement, against the band of both")
    inside, counted = bands(measured([first]), measured(again), predicted,
                            RunDir(first).read_evidence().slo)
    share = inside / counted if counted else float("nan")
    print(f"  inside the band on both figures: {inside} of {counted} rows below collapse "
          f"({share:.0%}; goal {GOAL:.0%}: {'met' if share >= GOAL else 'not met'})")
    orders = {name: ordering(max_goodputs(dirs)) for name, dirs in
              (("first", [first]), ("again", again), ("predicted", [rec["run_dir"]]))}
    for name, (text, _) in orders.items():
        print(f"  max-goodput ordering (req/s), {name}: {text}")
    same = {orders[m][1] for m in ("first", "again")}
    verdict = ("the measurements disagree: no ordering is the host's" if len(same) > 1 else
               "the same" if orders["predicted"][1] in same else "different")
    print(f"  ordering, predicted against measured: {verdict}")
    s = speed()
    print(f"\nsimulator: 10 rates x 1,000 requests of one placement in {s:.2f} s of CPU "
          f"(goal 2 s: {2 / s:.1f}x faster than needed)")


if __name__ == "__main__":
    main()
