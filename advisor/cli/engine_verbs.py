"""`advisor serve` and `advisor bench`: the bundled engine standalone, and any endpoint measured."""

from __future__ import annotations

import typer

from advisor.cli.app import app, slo_items, user_errors
from engine.api import CONNECTORS, Topology
from workloads.presets import PRESETS as WORKLOADS


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
    """Run the bundled engine (collocated, disaggregated) or a render server, until ^C."""
    from advisor.serve import run_serve
    from engine.api import FrontendConfig

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
    with user_errors():
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
    temperature: float = typer.Option(0.0, help="sent with every request (0: greedy, as vllm "
                                                "bench serve sends when not told)"),
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
        temperature=temperature,
        request_rate=request_rate,
        burstiness=burstiness,
        num_prompts=num_prompts,
        max_concurrency=max_concurrency,
        goodput=tuple(slo_items(goodput, ctx)),
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
    with user_errors():
        run_bench(opts)
