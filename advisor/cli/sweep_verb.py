"""`advisor sweep`: both placements measured at a rate search, and the advice."""

from __future__ import annotations

import typer

from advisor.cli.app import app, slo_items, user_errors
from engine.api import CONNECTORS
from workloads.presets import PRESETS as WORKLOADS


@app.command(context_settings={"allow_extra_args": True})
def sweep(
    ctx: typer.Context,
    workload: str = typer.Option("long-prompt", help=f"workload preset: {', '.join(WORKLOADS)}"),
    model: str = typer.Option(None, help="preset name or a local HF model directory "
                                         "(default: small)"),
    slo: list[str] = typer.Option(None, help="SLOs in ms (default ttft:2000 itl:50, widened to "
                                             "what this machine can meet unless --model is given)"),
    attainment: float = typer.Option(0.9, help="share of requests that must meet every SLO"),
    rates: str = typer.Option(None, help="a fixed grid, e.g. 0.2,0.4,0.8 (default: the search)"),
    num_prompts: int = typer.Option(None, help="requests per rate (default: 30, or ~16 s of "
                                               "them if more, up to 100)"),
    topologies: str = typer.Option(
        None, help="collocated:N,disagg:XpYd[,disagg-bidi:XpYd] (default: collocated:2,"
                   "disagg:1p1d; multi-turn presets add disagg-bidi:1p1d)"),
    connector: str = typer.Option("shm", help=f"disagg KV connector: {', '.join(CONNECTORS)}"),
    link_emulation: str = typer.Option(
        None,
        help="make each KV transfer as slow as a link: 1.3s, 800ms or 1GBps (marked as emulated)",
    ),
    collocated_url: str = typer.Option(None, help="measure an existing collocated deployment"),
    disagg_url: str = typer.Option(None, help="measure an existing disaggregated deployment"),
    collocated_metrics: list[str] = typer.Option(
        None, help="each collocated instance's /metrics (default: --collocated-url's own)"),
    disagg_metrics: list[str] = typer.Option(
        None, help="each prefiller's and decoder's /metrics (default: --disagg-url's own)"),
    collocated_cmd: str = typer.Option(
        None, help="shell command that starts the collocated deployment at --collocated-url; "
                   "the sweep stops it before the next one starts"),
    disagg_cmd: str = typer.Option(
        None, help="shell command that starts the disaggregated deployment at --disagg-url"),
    ready_timeout: float = typer.Option(600.0, help="seconds a deployment may take to answer"),
    config: str = typer.Option(None, help="a TOML or YAML file of these options (flags win)"),
    out: str = typer.Option("results", help="parent of the run directory"),
    resume: str = typer.Option(None, help="resume an interrupted sweep's run directory"),
    scale: float = typer.Option(None, help="prompt length scale (default: sized from the "
                                           "calibration; 1 for deployment URLs)"),
    output_scale: float = typer.Option(None, help="output length scale (default: sized from "
                                                  "the calibration)"),
    dtype: str = typer.Option("auto", help="engine dtype: auto (bfloat16 where fast here, "
                                           "else float32), float32, bfloat16, float16"),
    device: str = typer.Option("cpu", help="cpu or cuda"),
    start_rate: float = typer.Option(None, help="search: first rate (req/s; default: where "
                                                "the calibration says collocated starts to miss)"),
    max_steps: int = typer.Option(4, help="search: doublings, and the bracket's extra steps"),
    bisect_steps: int = typer.Option(1, help="search: bisections per placement"),
    seed: int = typer.Option(0, help="workload seed"),
    operating_rate: float = typer.Option(None, help="your production rate (req/s): the "
                                                    "decision rows are judged there"),
    repeats: int = typer.Option(1, help="runs per rate, each with its own seed, pooled"),
    time_budget: float = typer.Option(
        None, help="seconds the sweep may measure before it stops refining (default: 280 for "
                   "the bundled engine with the default requests per rate, else none; 0: none)"),
    api_key: str = typer.Option(
        None,
        envvar="OPENAI_API_KEY",
        help="bearer token for --collocated-url / --disagg-url (default: $OPENAI_API_KEY)",
    ),
    report: bool = typer.Option(True, "--report/--no-report",
                                help="draw report.html and report.md at the end (`advisor "
                                     "report RUN_DIR` draws them later)"),
) -> None:
    """Measure collocated against disaggregated on this machine and recommend a placement."""
    from advisor.sweep.config_file import merged
    from advisor.sweep.options import SweepOptions, parse_rates, resumed

    with user_errors("a bundled-engine deployment"):
        opts = SweepOptions(
            workload=workload,
            scale=scale,
            output_scale=output_scale,
            model=model,
            dtype=dtype,
            slo=tuple(slo_items(slo, ctx)),
            attainment=attainment,
            rates=parse_rates(rates),
            start_rate=start_rate,
            max_steps=max_steps,
            bisect_steps=bisect_steps,
            num_prompts=num_prompts,
            topologies=topologies,
            connector=connector,
            link_emulation=link_emulation,
            collocated_url=collocated_url,
            disagg_url=disagg_url,
            collocated_metrics=tuple(collocated_metrics or ()),
            disagg_metrics=tuple(disagg_metrics or ()),
            collocated_cmd=collocated_cmd,
            disagg_cmd=disagg_cmd,
            ready_timeout=ready_timeout,
            out=out,
            seed=seed,
            device=device,
            operating_rate=operating_rate,
            repeats=repeats,
            time_budget=time_budget,
            api_key=api_key,
        )
        if config:
            opts = merged(opts, config)
        run_dir = None
        if resume:  # a resumed sweep takes its run directory's options
            run_dir, opts = resumed(resume, opts.api_key)
        else:
            opts.check()
        from advisor.sweep.sweep import run_sweep  # NOTE: loads torch: bad flags answer first

        try:
            run_sweep(opts, resume=run_dir, report=report)
        except KeyboardInterrupt:
            typer.echo("advisor: interrupted; every finished run is saved (see --resume)", err=True)
            raise typer.Exit(130) from None
