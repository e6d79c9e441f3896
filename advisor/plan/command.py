"""`advisor plan` from its options: the roofline plan, or with --calibrate a plan fitted to
a measured sweep (advisor.plan.calibrated)."""

from __future__ import annotations

from advisor.errors import UsageError
from advisor.plan.options import PlanOptions
from advisor.plan.sim_runs import Planned


def plan_command(opts: PlanOptions, calibrate: str | None = None, replay: str | None = None,
                 topologies: tuple[str, ...] = ()) -> Planned:
    """Plan as the flags say; UsageError naming a flag that does not go with the others."""
    if calibrate or replay:
        if not calibrate:
            raise UsageError("--replay needs --calibrate RUN_DIR (what to fit the models to)")
        from advisor.plan.calibrated import run_calibrated

        return run_calibrated(calibrate, replay, opts.out, opts.as_json, opts.report,
                              topologies, opts.model)
    if topologies:
        raise UsageError("--topology names a measured deployment's shape: it needs "
                         "--calibrate RUN_DIR")
    from advisor.plan.plan import run_plan

    return run_plan(opts)
