"""`advisor sweep` from its options: a --config file merged in, an interrupted sweep's
options taken back (--resume) or the flags checked, before anything loads torch; then the
sweep."""

from __future__ import annotations

from advisor.rundata.rundir import RunDir
from advisor.sweep.config_file import merged
from advisor.sweep.options import SweepOptions, resumed


def sweep_command(opts: SweepOptions, resume: str | None = None, report: bool = True) -> RunDir:
    """Run the sweep the flags describe (UsageError naming a bad one); its run directory."""
    if opts.config:
        opts = merged(opts, opts.config)
    run_dir = None
    if resume:  # a resumed sweep takes its run directory's options
        run_dir, opts = resumed(resume, opts)
    else:
        opts.check()
    from advisor.sweep.sweep import run_sweep  # NOTE: loads torch: bad flags answer first

    return run_sweep(opts, resume=run_dir, report=report)
