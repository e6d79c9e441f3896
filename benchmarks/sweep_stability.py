"""Is the default sweep's advice stable? Runs `advisor sweep` (defaults, or the flags given
after --) several times on this machine and prints, per run: the wall time, the action,
whether it was confident, each placement's max goodput with its interval, and collocated's
p99 ITL against disaggregated's at the rate the decision table was judged at (the highest
common rate where the better placement still met the SLO).

Goal (issue: advice you can trust): `disaggregate`, confident, collocated's p99 ITL at
least 1.5x disaggregated's, in every run, each within 5 minutes on 2 cores.

Usage: python benchmarks/sweep_stability.py [--runs 3] [--out DIR] [-- SWEEP FLAGS...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from advisor.rundata.rundir import RunDir


def one_sweep(out: Path, flags: list[str]) -> tuple[float, RunDir]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "advisor.cli", "sweep", "--out", str(out), *flags],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"sweep failed: {done.stderr.strip()[-500:]}")
    (path,) = [p for p in out.iterdir() if p.is_dir()]
    return time.monotonic() - start, RunDir.existing(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=None, help="keep the run directories here")
    ap.add_argument("flags", nargs="*", help="advisor sweep flags (after --)")
    a = ap.parse_args()
    parent = Path(a.out or tempfile.mkdtemp(prefix="sweep-stability-"))
    good = 0
    for i in range(a.runs):
        seconds, run = one_sweep(parent / f"run-{i}", a.flags)
        rec, ev = run.read_recommendation(), run.read_evidence()
        confident = rec.comparison is not None and rec.comparison.confident
        ratio, at = p99_itl_ratio(ev)
        good += (rec.action == "disaggregate" and confident and seconds <= 300
                 and ratio >= 1.5)
        sides = "; ".join(f"{side.placement} {side.max_goodput_rps:g} req/s "
                          f"{side.max_goodput_interval_rps}" for side in
                          (ev.collocated, ev.disaggregated) if side and side.placement)
        stopped = " (the time budget ended its search)" if ev.search_stopped else ""
        print(f"run {i + 1}: {seconds:.0f} s, {rec.action}"
              f"{', confident' if confident else ', within noise'}{stopped}; {sides}; "
              f"collocated p99 ITL {ratio:.1f}x P/D's at {at}", flush=True)
    print(f"disaggregate + confident + p99 ITL >= 1.5x within 5 min: {good} of {a.runs} "
          "(goal: all)")


def p99_itl_ratio(ev) -> tuple[float, str]:
    """Collocated's p99 ITL over disaggregated's at the rate the rows were judged at, and
    that rate (0 and "no common rate" where either is missing)."""
    col, dis = ev.collocated, ev.disaggregated
    if not (col and dis and col.p99_itl_ms and dis.p99_itl_ms):
        return 0.0, "no common rate"
    return col.p99_itl_ms / dis.p99_itl_ms, f"{col.rate_rps:g} req/s"


if __name__ == "__main__":
    main()
