"""The `advisor` command line: parses options and calls one function per verb."""

from __future__ import annotations

import typer

from engine.launch import Topology

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Measure collocated vs disaggregated LLM serving and recommend a placement.")


@app.callback()
def main() -> None:
    """advisor: measure, decide, report."""


def fail(message: str) -> None:
    """One clear line on stderr and exit code 2 (a usage error)."""
    typer.echo(f"advisor: error: {message}", err=True)
    raise typer.Exit(2)


@app.command()
def serve(
    mode: str = typer.Option("collocated", help="collocated (N replicas) or disagg (xPyD + proxy)"),
    replicas: int = typer.Option(2, min=1, help="collocated: number of replicas"),
    prefill: int = typer.Option(1, min=1, help="disagg: number of prefill instances"),
    decode: int = typer.Option(1, min=1, help="disagg: number of decode instances"),
    connector: str = typer.Option("shm", help="disagg KV connector: shm, tcp or cuda"),
    model: str = typer.Option("small", help="preset name or a local HF model directory"),
    dtype: str = typer.Option("bfloat16", help="float32, bfloat16 or float16"),
    device: str = typer.Option("cpu", help="cpu or cuda"),
    host: str = typer.Option("127.0.0.1", help="address to bind (loopback by default)"),
    port: int = typer.Option(8000, min=0, max=65535, help="the front's port"),
) -> None:
    """Run the bundled engine as a collocated or disaggregated topology until interrupted."""
    from advisor.serve import run_serve

    if mode not in ("collocated", "disagg"):
        fail(f"--mode must be collocated or disagg, not {mode!r}")
    if connector not in ("shm", "tcp", "cuda"):
        fail(f"--connector must be shm, tcp or cuda, not {connector!r}")
    topology = Topology(mode=mode, replicas=replicas, prefill=prefill, decode=decode,
                        model=model, connector=connector, dtype=dtype, device=device,
                        port=port, host=host)
    try:
        topology.validate()
        from engine.config import load_model_config

        load_model_config(model)
    except ValueError as e:
        fail(str(e))
    try:
        run_serve(topology)
    except (RuntimeError, TimeoutError) as e:
        fail(str(e))


if __name__ == "__main__":
    app()
