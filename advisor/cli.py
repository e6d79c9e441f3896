"""The `advisor` command line: parses options and calls one function per verb.

A user's mistake (UsageError) or a deployment that would not start (LaunchError) is one
line on stderr and exit code 2; anything else is a bug and shows its traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import typer

from advisor.errors import UsageError
from engine.kv.connectors import NAMES as CONNECTORS
from engine.serve.launch import Topology
from engine.serve.processes import LaunchError
from workloads.presets import PRESETS as WORKLOADS

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Measure collocated vs disaggregated LLM serving and recommend a placement.")


@app.callback()
def main() -> None:
    """advisor: measure, decide, report."""


def fail(message: str) -> None:
    """One clear line on stderr and exit code 2 (a usage error)."""
    typer.echo(f"advisor: error: {message}", err=True)
    raise typer.Exit(2)


@contextlib.contextmanager
def _user_errors(what: str = "") -> Iterator[None]:
    """Turn what the user can fix into one line and exit code 2."""
    try:
        yield
    except UsageError as e:
        fail(str(e))
    except LaunchError as e:
        fail(f"{what or 'a deployment'} failed to start: {e}")


def _slo_items(values: list[str] | None, ctx: typer.Context) -> list[str]:
    """An SLO option's values plus the NAME:MS words after it: vLLM's `--goodput ttft:2000
    itl:50` takes several values per flag, which click leaves as extra arguments."""
    items = list(values or [])
    for extra in ctx.args:
        if ":" not in extra or extra.startswith("-"):
            fail(f"unexpected argument {extra!r}")
        items.append(extra)
    return items


@app.command()
def serve(
    mode: str = typer.Option(
        "collocated",
        help="collocated (N replicas), disagg (xPyD + proxy) "
        "or render (a render-tier server: chat <-> token IDs, no model)",
    ),
    replicas: int = typer.Option(2, min=1, help="collocated: number of replicas"),
    prefill: int = typer.Option(1, min=1, help="disagg: number of prefill instances"),
    decode: int = typer.Option(1, min=1, help="disagg: number of decode instances"),
    render_workers: int = typer.Option(
        1, min=1, help="render: worker processes behind its port (each about one core)"),
    connector: str = typer.Option("shm", help=f"disagg KV connector: {', '.join(CONNECTORS)}"),
    bidirectional: bool = typer.Option(
        False, "--bidirectional", help="disagg: a conversation's next turn reuses the KV its "
        "decoder kept (prompt and reply); clients send X-Conversation-Id"),
    model: str = typer.Option("small", help="preset name or a local HF model directory"),
    dtype: str = typer.Option("auto", help="auto (bfloat16 where fast here, else float32), "
                                           "float32, bfloat16 or float16"),
    device: str = typer.Option("cpu", help="cpu or cuda"),
    host: str = typer.Option("127.0.0.1", help="address to bind (loopback by default)"),
    port: int = typer.Option(8000, min=0, max=65535, help="the front's port"),
    chat_template: str = typer.Option(
        None, help="a jinja2 chat template file (engines and render)"
    ),
    reasoning_parser: str = typer.Option("qwen3", help="qwen3 (<think> markup) or none"),
    tool_call_parser: str = typer.Option("hermes", help="hermes (<tool_call> markup) or none"),
    api_key: str = typer.Option(
        None, envvar="ADVISOR_API_KEY",
        help="the front requires 'Authorization: Bearer KEY' on /v1/ and /inference/ "
             "(default: $ADVISOR_API_KEY)"),
) -> None:
    """Run the bundled engine (collocated or disaggregated), or a render-tier server, until
    interrupted."""
    from advisor.serve import run_serve
    from engine.render.frontend import FrontendConfig

    topology = Topology(
        mode=mode,
        replicas=replicas,
        prefill=prefill,
        decode=decode,
        render_workers=render_workers,
        model=model,
        connector=connector,
        bidirectional=bidirectional,
        dtype=dtype,
        device=device,
        port=port,
        host=host,
        api_key=api_key or None,
    )
    with _user_errors():
        run_serve(topology, FrontendConfig(None, chat_template, reasoning_parser, tool_call_parser))


@app.command(context_settings={"allow_extra_args": True})
def bench(
    ctx: typer.Context,
    base_url: str = typer.Option("http://127.0.0.1:8000", help="server base URL"),
    endpoint: str = typer.Option("/v1/completions", help="/v1/completions or /v1/chat/completions"),
    model: str = typer.Option(None, help="model name (default: the first the server lists)"),
    dataset: str = typer.Option("random", help="dataset: random"),
    random_input_len: int = typer.Option(1024, help="random: prompt tokens"),
    random_output_len: int = typer.Option(128, help="random: output tokens"),
    random_range_ratio: float = typer.Option(0.0, help="random: lengths uniform in len*(1 +- r)"),
    random_prefix_len: int = typer.Option(
        0, help="random: shared prefix tokens before each prompt"
    ),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", help="generate exactly max_tokens"),
    request_rate: float = typer.Option(None, help="requests/s (inf: all at once)"),
    burstiness: float = typer.Option(1.0, help="gamma shape; 1 = Poisson"),
    num_prompts: int = typer.Option(None, help="requests to send (default 100; a trace: all)"),
    max_concurrency: int = typer.Option(None, help="cap on requests in flight"),
    goodput: list[str] = typer.Option(None, help="SLOs in ms: ttft:2000 itl:50 tpot:30 e2el:..."),
    percentile_metrics: str = typer.Option("ttft,tpot,itl", help="of ttft,tpot,itl,e2el"),
    metric_percentiles: str = typer.Option("99", help="e.g. 50,90,99"),
    seed: int = typer.Option(0, help="workload seed"),
    result_dir: str = typer.Option(None, help="write result.json and requests.jsonl here"),
    workload: str = typer.Option(None, help=f"a preset: {', '.join(WORKLOADS)}"),
    scale: float = typer.Option(1.0, help="preset: multiply every length"),
    trace: str = typer.Option(None, help="Mooncake .jsonl, Azure or BurstGPT .csv trace"),
    trace_time_scale: float = typer.Option(1.0, help="trace: multiply timestamps"),
    num_warmups: int = typer.Option(0, help="warmup requests, excluded from statistics"),
    request_timeout: float = typer.Option(600.0, help="seconds before a request counts as failed"),
    ready_timeout: float = typer.Option(600.0, help="seconds to wait for the server to be ready"),
    export_trace: str = typer.Option(None, help="also save the workload as a Mooncake trace"),
    api_key: str = typer.Option(
        None, envvar="OPENAI_API_KEY", help="bearer token for the server (default: $OPENAI_API_KEY)"
    ),
) -> None:
    """Measure an OpenAI-compatible endpoint under a workload (flags as in `vllm bench serve`)."""
    from advisor.measure.bench import BenchOptions, run_bench

    opts = BenchOptions(
        base_url=base_url,
        endpoint=endpoint,
        model=model,
        dataset=dataset,
        random_input_len=random_input_len,
        random_output_len=random_output_len,
        random_range_ratio=random_range_ratio,
        random_prefix_len=random_prefix_len,
        ignore_eos=ignore_eos,
        request_rate=request_rate,
        burstiness=burstiness,
        num_prompts=num_prompts,
        max_concurrency=max_concurrency,
        goodput=tuple(_slo_items(goodput, ctx)),
        percentile_metrics=percentile_metrics,
        metric_percentiles=metric_percentiles,
        seed=seed,
        result_dir=result_dir,
        workload=workload,
        scale=scale,
        trace=trace,
        trace_time_scale=trace_time_scale,
        num_warmups=num_warmups,
        request_timeout=request_timeout,
        ready_timeout=ready_timeout,
        export_trace=export_trace,
        api_key=api_key,
    )
    with _user_errors():
        run_bench(opts)


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

    with _user_errors():
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

    with _user_errors():
        run_kv_size(model, tokens, dtype, link or [], measured, json_out)


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

    with _user_errors("a bundled-engine deployment"):
        opts = SweepOptions(
            workload=workload,
            scale=scale,
            output_scale=output_scale,
            model=model,
            dtype=dtype,
            slo=tuple(_slo_items(slo, ctx)),
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


@app.command(context_settings={"allow_extra_args": True})
def plan(
    ctx: typer.Context,
    model: str = typer.Option("qwen2.5-7b", help="preset name (also deepseek-v3, "
                                                 "qwen3-next-80b-a3b) or a local config.json dir"),
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
    with _user_errors():
        if calibrate or replay:
            if not calibrate:
                fail("--replay needs --calibrate RUN_DIR (what to fit the models to)")
            from advisor.plan.calibrated import run_calibrated

            run_calibrated(calibrate, replay, out, json_out, report)
            return
        run_plan(PlanOptions(
            model=model, gpu=gpu, gpus=gpus, link=link, p2p=p2p == "yes", workload=workload,
            slo=tuple(_slo_items(slo, ctx)) or PlanOptions.slo, attainment=attainment,
            rates=parse_rates(rates), num_prompts=num_prompts,
            max_num_batched_tokens=max_num_batched_tokens, operating_rate=operating_rate,
            seed=seed, out=out, as_json=json_out, report=report))


@app.command()
def report(
    run_dir: str = typer.Argument(..., help="a sweep's run directory"),
    format: str = typer.Option("html,md", "--format", help="html, md or both (comma-separated)"),
    compare: str = typer.Option(None, help="another run directory to overlay"),
) -> None:
    """Write report.html and report.md (with PNG plots) into a run directory."""
    from advisor.report import run_report

    with _user_errors():
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
    with _user_errors():
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

    with _user_errors():
        run_deploy(run_dir, gpus, format, model, ucx_devices)


if __name__ == "__main__":
    app()
