"""`advisor plan`: placements on GPUs not here, simulated."""

from __future__ import annotations

import typer

from advisor.cli.app import user_errors
from advisor.cli.params import options_command
from advisor.plan.options import PlanOptions


@options_command(PlanOptions)
def plan(
    opts: PlanOptions,
    calibrate: str = typer.Option(None, help="a measured sweep's run directory: fit the step and "
                                             "link models to it and re-predict its runs"),
    replay: str = typer.Option(None, help="with --calibrate: predict this other measured run "
                                          "directory's runs instead (a workload not fitted)"),
    topology: list[str] = typer.Option(None, help="with --calibrate: the shape of a deployment "
                                                  "measured by URL, NAME=collocated:N or "
                                                  "NAME=disagg:XpYd (e.g. disagg-url=disagg:1p1d)"),
) -> None:
    """Predict collocated and every xPyD split on GPUs not here, by simulation (labelled)."""
    from advisor.plan.command import plan_command

    with user_errors():
        plan_command(opts, calibrate, replay, tuple(topology or ()))
