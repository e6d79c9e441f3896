"""`advisor sweep`: both placements measured at a rate search, and the advice."""

from __future__ import annotations

import typer

from advisor.cli.app import user_errors
from advisor.cli.params import options_command
from advisor.sweep.options import SweepOptions


@options_command(SweepOptions)
def sweep(
    opts: SweepOptions,
    resume: str = typer.Option(None, help="resume an interrupted sweep's run directory"),
    report: bool = typer.Option(True, "--report/--no-report",
                                help="draw report.html and report.md at the end (`advisor "
                                     "report RUN_DIR` draws them later)"),
) -> None:
    """Measure collocated against disaggregated on this machine and recommend a placement."""
    from advisor.sweep.command import sweep_command

    with user_errors("a bundled-engine deployment"):
        try:
            sweep_command(opts, resume, report)
        except KeyboardInterrupt:
            typer.echo("advisor: interrupted; every finished run is saved (see --resume)", err=True)
            raise typer.Exit(130) from None
