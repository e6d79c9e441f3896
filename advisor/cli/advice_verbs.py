"""`advisor report`, `recommend` and `deploy`: a run directory drawn, decided, deployed."""

from __future__ import annotations

import typer

from advisor.cli.app import app, fail, user_errors


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


@app.command()
def deploy(
    run_dir: str = typer.Argument(..., help="a finished sweep's run directory"),
    gpus: str = typer.Option(None, help="GPU indices to use, e.g. 0,1 (default: 0..N-1)"),
    format: str = typer.Option("sh", "--format", help="sh or json"),
    model: str = typer.Option(None, help="the model vLLM serves (default: the sweep's)"),
    ucx_devices: str = typer.Option(None, help="RDMA devices, one per P/D instance in turn, "
                                               "e.g. mlx5_0:1,mlx5_1:1 (UCX_NET_DEVICES)"),
) -> None:
    """Print the vLLM commands that run the measured placements (the advice marked)."""
    from advisor.decide.recommend import run_deploy

    with user_errors():
        run_deploy(run_dir, gpus, format, model, ucx_devices)
