"""`advisor probe` and `advisor kv-size`: the hardware, the links and the KV they carry."""

from __future__ import annotations

import typer

from advisor.cli.app import app, user_errors


@app.command()
def probe(
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
    p2p_from: str = typer.Option(None, help="parse a saved `nvidia-smi topo -p2p r` output"),
    link_mb: int = typer.Option(64, help="payload size for the link measurements (MB)"),
    transfer_check: str = typer.Option(None, help="URL of a disaggregated deployment to check"),
    metrics_url: list[str] = typer.Option(
        None, help="its decoders' /metrics (default URL/metrics)"
    ),
    check_prompts: int = typer.Option(3, help="transfer check: prompts, sent one at a time"),
    check_prompt_tokens: int = typer.Option(2048, help="transfer check: tokens per prompt"),
    model: str = typer.Option(None, help="transfer check: the served model (default: the first "
                                         "/v1/models lists; give it for a front without one)"),
    ready_timeout: float = typer.Option(600.0, help="seconds to wait for the deployment"),
    link_class: str = typer.Option("fast", help="transfer check: fast (InfiniBand/NVLink-class, "
                                                "> 1 GB/s) or tcp (> 100 MB/s)"),
    wakeup_idle_s: float = typer.Option(1.0, help="seconds idle before each pass of the wake-up "
                                                  "check (0: skip it)"),
) -> None:
    """Hardware and transfer checks: GPUs, P2P matrix, measured links, a live transfer check."""
    from advisor.probe.probe import ProbeOptions, run_probe

    with user_errors():
        run_probe(
            ProbeOptions(
                p2p_from=p2p_from,
                as_json=json_out,
                link_mb=link_mb,
                transfer_check=transfer_check,
                metrics_urls=tuple(metrics_url or ()),
                check_prompts=check_prompts,
                check_prompt_tokens=check_prompt_tokens,
                model=model,
                ready_timeout=ready_timeout,
                link=link_class,
                wakeup_idle_s=wakeup_idle_s,
            )
        )


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
