"""`advisor plan`: placements on GPUs not here, simulated."""

from __future__ import annotations

import typer

from advisor.cli.app import app, fail, slo_items, user_errors
from workloads.presets import PRESETS as WORKLOADS


@app.command(context_settings={"allow_extra_args": True})
def plan(
    ctx: typer.Context,
    model: str = typer.Option(None, help="preset name (also deepseek-v3, qwen3-next-80b-a3b) "
                                         "or a local config.json dir (default qwen2.5-7b; with "
                                         "--calibrate, the sweep's)"),
    gpu: str = typer.Option("l40s", help="l40s, a10g, a100-40gb, a100-80gb, h100-pcie, "
                                         "h100-sxm, h200, b200, mi300x"),
    gpus: int = typer.Option(2, help="how many of them"),
    link: str = typer.Option(None, help="KV link: pcie4, pcie5, nvlink, rdma-100g, rdma-400g, "
                                        "tcp-25g or a rate such as 25GBps (default: the GPUs')"),
    p2p: str = typer.Option("yes", help="GPU peer-to-peer copies work (nvidia-smi topo -p2p r): "
                                        "yes or no"),
    workload: str = typer.Option("long-prompt", help=f"workload preset: {', '.join(WORKLOADS)}"),
    slo: list[str] = typer.Option(None, help="SLOs in ms (default ttft:2000 itl:50)"),
    attainment: float = typer.Option(0.9, help="share of requests that must meet every SLO"),
    rates: str = typer.Option(None, help="rates to simulate, e.g. 0.2,0.4,1 (default: a grid "
                                         "up to what the GPUs could prefill)"),
    num_prompts: int = typer.Option(1000, help="simulated requests per rate"),
    max_num_batched_tokens: int = typer.Option(None, help="engine token budget per step "
                                                          "(default: vLLM's for the GPU)"),
    operating_rate: float = typer.Option(None, help="your production rate (req/s)"),
    seed: int = typer.Option(0, help="workload seed"),
    out: str = typer.Option("results", help="parent of the run directory"),
    calibrate: str = typer.Option(None, help="a measured sweep's run directory: fit the step and "
                                             "link models to it and re-predict its runs"),
    replay: str = typer.Option(None, help="with --calibrate: predict this other measured run "
                                          "directory's runs instead (a workload not fitted)"),
    topology: list[str] = typer.Option(None, help="with --calibrate: the shape of a deployment "
                                                  "measured by URL, NAME=collocated:N or "
                                                  "NAME=disagg:XpYd (e.g. disagg-url=disagg:1p1d)"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
    report: bool = typer.Option(True, "--report/--no-report",
                                help="draw report.html and report.md (`advisor report RUN_DIR` "
                                     "draws them later)"),
) -> None:
    """Predict collocated and every xPyD split on GPUs not here, by simulation (labelled)."""
    from advisor.plan.plan import PlanOptions, run_plan
    from advisor.sweep.options import parse_rates

    if p2p not in ("yes", "no"):
        fail(f"--p2p must be yes or no, not {p2p!r}")
    with user_errors():
        if calibrate or replay:
            if not calibrate:
                fail("--replay needs --calibrate RUN_DIR (what to fit the models to)")
            from advisor.plan.calibrated import run_calibrated

            run_calibrated(calibrate, replay, out, json_out, report, tuple(topology or ()),
                           model)
            return
        if topology:
            fail("--topology names a measured deployment's shape: it needs --calibrate RUN_DIR")
        run_plan(PlanOptions(
            model=model or PlanOptions.model, gpu=gpu, gpus=gpus, link=link, p2p=p2p == "yes",
            workload=workload,
            slo=tuple(slo_items(slo, ctx)) or PlanOptions.slo, attainment=attainment,
            rates=parse_rates(rates), num_prompts=num_prompts,
            max_num_batched_tokens=max_num_batched_tokens, operating_rate=operating_rate,
            seed=seed, out=out, as_json=json_out, report=report))
