"""`advisor bench`: one workload against one OpenAI-compatible endpoint, measured.

`run_bench(BenchOptions)` builds the workload, checks the server is reachable,
sends it open-loop with a progress bar, and writes `result.json` (vLLM's keys
plus ours and a manifest) and `requests.jsonl` (one record per request).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from rich.console import Console

from advisor.errors import UsageError
from advisor.measure import vllm_result
from advisor.measure.bench_options import BACKENDS, DATASETS, BenchOptions
from advisor.measure.failures import commonest
from advisor.measure.ready import (
    check_fits,
    served_context,
    served_model,
    wait_ready,
)
from advisor.measure.records import ClientRun, Endpoint
from advisor.measure.selfcheck import client_check
from advisor.measure.stats import parse_percentiles, summarize
from advisor.measure.urls import check_url
from advisor.measure.workers import default_workers
from advisor.measure.workload_run import max_send_lateness_ms, measure, record_row
from advisor.output import console
from advisor.rundata.files import write_json
from advisor.rundata.manifest import EngineRan, Manifest
from advisor.rundata.result import RunResult
from advisor.rundata.stats import METRICS
from workloads import traces
from workloads.arrivals import Arrivals
from workloads.lengths import LengthDist
from workloads.presets import PRESETS, preset
from workloads.spec import SyntheticSpec, Workload, synthesize

MAX_PROMPTS = 1_000_000  # requests one bench sends


def _resolved(opts: BenchOptions) -> BenchOptions:
    """The options with vLLM's --host/--port turned into --base-url."""
    if opts.host is None and opts.port is None:
        return opts
    if opts.base_url != BenchOptions.base_url:
        raise UsageError("give --base-url or --host/--port, not both")
    host = opts.host or "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return dataclasses.replace(opts, base_url=f"http://{host}:{opts.port or 8000}")


def _checked(opts: BenchOptions) -> tuple[list[float], tuple[str, ...]]:
    """Validate options, naming the bad flag; returns (percentiles, metrics)."""
    check_url("--base-url", opts.base_url)
    if opts.backend not in BACKENDS:
        raise UsageError(f"--backend {opts.backend!r} is not one here; one of "
                         f"{', '.join(BACKENDS)}")
    if opts.backend == "openai-chat" and not opts.endpoint.endswith("chat/completions"):
        raise UsageError("--backend openai-chat wants --endpoint /v1/chat/completions")
    bad_meta = [m for m in opts.metadata if "=" not in m]
    if bad_meta:
        raise UsageError(f"--metadata {bad_meta[0]!r}: KEY=VALUE")
    if opts.dataset not in DATASETS:
        raise UsageError(f"--dataset {opts.dataset!r} is unknown; one of {', '.join(DATASETS)}")
    if not opts.temperature >= 0:
        raise UsageError(f"--temperature must be >= 0, not {opts.temperature}")
    if opts.request_rate is not None and not opts.request_rate > 0:
        raise UsageError(f"--request-rate must be > 0 (or inf), not {opts.request_rate}")
    if opts.num_prompts is not None and not 1 <= opts.num_prompts <= MAX_PROMPTS:
        raise UsageError(f"--num-prompts must be 1 to {MAX_PROMPTS}, not {opts.num_prompts}")
    if opts.num_warmups < 0:
        raise UsageError("--num-warmups must be >= 0")
    if opts.goodput is not None and opts.goodput.pooled:
        raise UsageError("--goodput counts the requests that meet it, as vLLM's does: "
                         "p99_itl is the run's, not a request's (give itl or tpot; the run's "
                         "p99 ITL is printed beside it)")
    if opts.workload and opts.workload not in PRESETS:
        raise UsageError(f"--workload {opts.workload!r} is unknown; one of {', '.join(PRESETS)}")
    if opts.trace and opts.workload:
        raise UsageError("--trace and --workload are alternatives; give one")
    if opts.trace and opts.request_rate is not None:
        raise UsageError("--request-rate does not apply to --trace; use --trace-time-scale")
    if not (math.isfinite(opts.trace_time_scale) and opts.trace_time_scale > 0):
        raise UsageError(f"--trace-time-scale must be a finite number > 0, not "
                         f"{opts.trace_time_scale}")
    metrics = tuple(m.strip() for m in opts.percentile_metrics.split(",") if m.strip())
    bad = [m for m in metrics if m not in METRICS]
    if bad or not metrics:
        raise UsageError(f"--percentile-metrics: {', '.join(bad) or 'empty'}; choose from "
                         f"{', '.join(METRICS)}")
    return parse_percentiles(opts.metric_percentiles), metrics


def build_workload(opts: BenchOptions) -> Workload:
    """The request stream the options describe (raises UsageError naming the bad value)."""
    try:
        return _build_workload(opts)
    except ValueError as e:  # the workload's own checks: what the user asked for
        raise UsageError(str(e)) from None


def _build_workload(opts: BenchOptions) -> Workload:
    if opts.trace:
        rows = traces.load(opts.trace, time_scale=opts.trace_time_scale,
                           max_requests=opts.num_prompts)
        w = traces.to_workload(rows, opts.seed, name=Path(opts.trace).name)
        w.params = {"trace": opts.trace, "time_scale": opts.trace_time_scale}
        return w
    if opts.workload:
        return preset(opts.workload, opts.seed, scale=opts.scale, rate=opts.request_rate,
                      num_prompts=opts.num_prompts or 100)
    for flag, v in (("--random-input-len", opts.random_input_len),
                    ("--random-output-len", opts.random_output_len)):
        if v < 1:
            raise UsageError(f"{flag} must be >= 1, not {v}")
    if not 0 <= opts.random_range_ratio < 1:
        raise UsageError(f"--random-range-ratio must be in [0, 1), not {opts.random_range_ratio}")
    kind = "uniform" if opts.random_range_ratio else "fixed"
    rate = math.inf if opts.request_rate is None else opts.request_rate
    spec = SyntheticSpec(
        input=LengthDist(kind, opts.random_input_len, opts.random_range_ratio),
        output=LengthDist(kind, opts.random_output_len, opts.random_range_ratio),
        arrivals=Arrivals("poisson" if opts.burstiness == 1.0 else "gamma", rate, opts.burstiness),
        num_prompts=opts.num_prompts or 100, shared_prefix_len=opts.random_prefix_len)
    w = synthesize(spec, opts.seed, "random")
    w.params = {"dataset": "random", **{k: v for k, v in dataclasses.asdict(opts).items()
                                         if k.startswith("random_")}}
    return w


def run_bench(opts: BenchOptions, argv: list[str] | None = None,
              engine: EngineRan | None = None) -> RunResult:
    """Run the benchmark the options describe; print it, save it when asked, return it.
    `engine`: the engine this process started to measure, for the manifest."""
    opts = _resolved(opts)
    percentiles, metrics = _checked(opts)
    workload = build_workload(opts)
    if opts.export_trace:
        traces.save(traces.from_workload(workload), opts.export_trace, "mooncake")
    wait_ready(opts.base_url, opts.model, opts.api_key, opts.ready_timeout)
    model = served_model(opts.base_url, opts.model, opts.api_key)
    check_fits(workload, served_context(opts.base_url, model, opts.api_key), opts.base_url,
               "Send shorter ones (--random-input-len, --random-output-len; --scale for a "
               "--workload) or serve a longer context")
    endpoint = Endpoint(opts.base_url, model, opts.endpoint, opts.ignore_eos, opts.request_timeout,
                        opts.api_key, opts.temperature)
    run = measure(endpoint, workload, opts.num_warmups, opts.max_concurrency,
                  workers=opts.workers or default_workers(engines_here=False))
    rate = opts.request_rate if opts.request_rate is not None else (
        math.inf if not (opts.workload or opts.trace) else None)
    bench = {"burstiness": opts.burstiness, "max_concurrency": opts.max_concurrency,
             "endpoint_type": opts.endpoint, "model_id": model, "base_url": opts.base_url,
             "percentiles": percentiles, "max_send_lateness_ms": max_send_lateness_ms(run),
             "manifest": Manifest.new(opts.seed, dataclasses.asdict(opts) | {"api_key": None},
                                     argv, engine=engine).to_json()}
    result = RunResult.of(
        summarize(run.records, run.duration, opts.goodput, percentiles, metrics),
        [record_row(r, run.start) for r in run.records], bench,
        request_rate=rate if rate is None or math.isfinite(rate) else "inf",
        num_prompts=workload.num_requests, workload=workload.name, workload_params=workload.params,
        client_cpu_s=run.cpu_s,
        client_check=client_check(run, capped=opts.max_concurrency is not None),
        arrival_offsets=[c.start for c in workload.conversations],
        multi_turn=workload.multi_turn)
    if opts.result_dir:
        result.write(Path(opts.result_dir))
    shown = result.to_json()
    console.print_summary(shown, metrics, percentiles, result.pace(),
                          failure=commonest(result.records or [])[1], slo=opts.goodput)
    if opts.save_result:
        _save_vllm(opts, run, shown, model, rate)
    return result


def _save_vllm(opts: BenchOptions, run: ClientRun, stats: dict[str, Any], model: str,
               rate: float | None) -> None:
    """`--save-result`: vLLM's result JSON, named and placed as vLLM places it."""
    date = vllm_result.now()
    label = opts.label or opts.backend
    shown_rate = "inf" if rate is None or math.isinf(rate) else rate
    setup = {"date": date, "endpoint_type": opts.backend, "backend": opts.backend,
             "label": opts.label, "model_id": model, "tokenizer_id": model,
             "num_prompts": stats.get("num_requests"),
             **dict(m.split("=", 1) for m in opts.metadata),
             "request_rate": shown_rate, "burstiness": opts.burstiness,
             "max_concurrency": opts.max_concurrency}
    name = opts.result_filename or vllm_result.file_name(label, shown_rate,
                                                         opts.max_concurrency, model, date)
    path = Path(opts.result_dir or ".") / name
    write_json(path, vllm_result.vllm_result(stats, run.records, run.start, setup,
                                             opts.save_detailed))
    console.say(Console(), f"vLLM's result JSON: {path}")
