"""`advisor probe` and `advisor kv-size`: the hardware, the links and the KV they carry."""

from __future__ import annotations

import typer

from advisor.cli.app import app, user_errors
from advisor.cli.params import options_command
from advisor.probe.options import ProbeOptions


@options_command(ProbeOptions)
def probe(opts: ProbeOptions) -> None:
    """Hardware and transfer checks: GPUs, P2P matrix, measured links, a live transfer check."""
    from advisor.verbs.probe import probe as run_probe

    with user_errors():
        run_probe(opts)


@app.command("kv-size")
def kv_size(
    model: str = typer.Option("qwen2.5-7b", help="preset name or a local config.json / directory"),
    tokens: int = typer.Option(8192, help="prompt tokens"),
    dtype: str = typer.Option("bfloat16", help="KV dtype: bfloat16, float16 or float32"),
    link: list[str] = typer.Option(
        None, help="also time it on a link: 400Gbps, 25GBps, pcie4, ..."
    ),
    measured: bool = typer.Option(False, help="also time it on this host's measured shm and TCP"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """KV bytes per token, a prompt's KV, and its transfer time on named or measured links."""
    from advisor.probe.kvsize import run_kv_size

    with user_errors():
        run_kv_size(model, tokens, dtype, link or [], measured, json_out)
