"""`advisor report`, `recommend` and `deploy`: a run directory drawn, decided, deployed."""

from __future__ import annotations

import typer

from advisor.cli.app import app, fail, user_errors
from advisor.cli.params import options_command
from advisor.deploy.run import DeployOptions


@app.command()
def report(
    run_dir: str = typer.Argument(..., help="a sweep's run directory"),
    format: str = typer.Option("html,md", "--format", help="html, md or both (comma-separated)"),
    compare: str = typer.Option(None, help="another run directory to overlay"),
) -> None:
    """Write report.html and report.md (with PNG plots) into a run directory."""
    from advisor.output.report import run_report

    with user_errors():
        paths = run_report(
            run_dir, tuple(f.strip() for f in format.split(",") if f.strip()), compare
        )
    for path in paths:
        typer.echo(str(path))


@app.command()
def recommend(
    run_dir: str = typer.Argument(None, help="a sweep's run directory (uses its evidence.json)"),
    evidence: str = typer.Option(None, help="an evidence file instead of a run directory"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
    threshold: list[str] = typer.Option(None, help="override a threshold: NAME=VALUE (repeatable)"),
) -> None:
    """Apply the decision table to measured evidence."""
    from advisor.decide.recommend import run_recommend

    if (run_dir is None) == (evidence is None):
        fail("give a RUN_DIR or --evidence FILE (one of them)")
    with user_errors():
        run_recommend(run_dir or evidence, json_out, threshold or [])


@options_command(DeployOptions)
def deploy(opts: DeployOptions,
           run_dir: str = typer.Argument(..., help="a finished sweep's or plan's run directory")
           ) -> None:
    """Print the vLLM commands (or Kubernetes manifests) that run the advice."""
    from advisor.deploy.run import run_deploy

    with user_errors():
        run_deploy(run_dir, opts)
