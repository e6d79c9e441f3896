"""`advisor sweep` from its options: resolved and checked before anything loads torch
(advisor.sweep.setup), then the sweep."""

from __future__ import annotations

from advisor.rundata.rundir import RunDir
from advisor.sweep.options import SweepOptions
from advisor.sweep.setup import resolved


def sweep_command(opts: SweepOptions, resume: str | None = None, report: bool = True) -> RunDir:
    """Run the sweep the flags describe (UsageError naming a bad one); its run directory."""
    run_dir, opts = resolved(opts, resume)
    from advisor.sweep.sweep import run_sweep  # loads torch: bad flags answer first

    return run_sweep(opts, resume=run_dir, report=report)
