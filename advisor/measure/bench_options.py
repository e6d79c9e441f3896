"""`advisor bench`'s options, each with its flag, named as `vllm bench serve` names them;
kept apart from the benchmark so that the command line loads no client to list them."""

from __future__ import annotations

from dataclasses import dataclass

from advisor.flag_groups import EngineKind, engine_option, model_option, slo_option
from advisor.flags import option
from advisor.measure.records import COMPLETIONS
from advisor.measure.urls import DEFAULT_READY_TIMEOUT_S
from advisor.rundata.bounds import MAX_CONCURRENCY
from advisor.rundata.slo import Slo
from workloads.presets import PRESETS

DATASETS = ("random",)
BACKENDS = ("openai", "vllm", "openai-chat")  # vllm bench serve's, for the endpoints here


@dataclass(frozen=True)
class BenchOptions:
    """`advisor bench`'s options, named as `vllm bench serve` names them."""

    base_url: str = option("http://127.0.0.1:8000", "server base URL")
    # None: measure --base-url
    engine: EngineKind | None = engine_option(
        None, "start the server here and measure it instead: bundled or vllm (one instance of "
              "--model, as the sweep starts it; vLLM from PATH or .tools/vllm)")
    host: str | None = option(None, "server host, with --port instead of --base-url")
    port: int | None = option(None, "server port, with --host instead of --base-url")
    backend: str = option("openai", f"vLLM's request kind: {', '.join(BACKENDS)} (openai-chat "
                                    "wants --endpoint /v1/chat/completions)")
    endpoint: str = option(COMPLETIONS, "/v1/completions or /v1/chat/completions")
    # None: the first model the server lists (--engine: the engine's default model)
    model: str | None = model_option("model name (default: the first the server lists; "
                                     "--engine: the model to start, default small, or mini "
                                     "on vllm)")
    dataset: str = option("random", "dataset: random", "--dataset", "--dataset-name")
    random_input_len: int = option(1024, "random: prompt tokens", "--random-input-len",
                                   "--input-len")
    random_output_len: int = option(128, "random: output tokens", "--random-output-len",
                                    "--output-len")
    random_range_ratio: float = option(0.0, "random: lengths uniform in len*(1 +- r)")
    random_prefix_len: int = option(0, "random: shared prefix tokens before each prompt")
    ignore_eos: bool = option(False, "generate exactly max_tokens", "--ignore-eos")
    # vLLM's default when --temperature is not given: greedy
    temperature: float = option(0.0, "sent with every request (0: greedy, as vllm bench serve "
                                     "sends when not told)")
    # None: inf for random, the preset's own rate for a preset
    request_rate: float | None = option(None, "requests/s (inf: all at once)")
    burstiness: float = option(1.0, "gamma shape; 1 = Poisson")
    # None: 100, or every row of a trace
    num_prompts: int | None = option(None, "requests to send (default 100; a trace: all)")
    max_concurrency: int | None = option(None, "cap on requests in flight", min=1,
                                         max=MAX_CONCURRENCY)
    # None: advisor.measure.workers.default_workers
    workers: int | None = option(None, "client processes, requests dealt among them (default: "
                                       "1 on a host of 2 cores or fewer, else half its cores, "
                                       "up to 8)", min=1)
    # None: every completed request is good
    goodput: Slo | None = slo_option(None, "SLOs in ms: ttft:2000 itl:50 tpot:30 e2el:...",
                                     "--goodput")
    percentile_metrics: str = option("ttft,tpot,itl", "of ttft,tpot,itl,e2el")
    metric_percentiles: str = option("99", "e.g. 50,90,99")
    seed: int = option(0, "workload seed")
    result_dir: str | None = option(None, "write result.json and requests.jsonl here (and "
                                          "--save-result's file)")
    save_result: bool = option(False, "also write vLLM's result JSON (vllm bench serve's "
                                      "keys)", "--save-result")
    save_detailed: bool = option(False, "with it, per-request lists (ttfts, itls, ...)",
                                 "--save-detailed")
    result_filename: str | None = option(None, "its file name (default: vLLM's, "
                                                "LABEL-RATEqps-MODEL-DATE.json)")
    label: str | None = option(None, "its label (default: --backend)")
    metadata: tuple[str, ...] = option((), "KEY=VALUE recorded in it (repeat the flag)")
    workload: str | None = option(None, f"a preset: {', '.join(PRESETS)}")
    scale: float = option(1.0, "preset: multiply every length")
    trace: str | None = option(None, "Mooncake .jsonl, Azure or BurstGPT .csv trace")
    trace_time_scale: float = option(1.0, "trace: multiply timestamps")
    num_warmups: int = option(0, "warmup requests, excluded from statistics")
    request_timeout: float = option(600.0, "seconds before a request counts as failed")
    ready_timeout: float = option(DEFAULT_READY_TIMEOUT_S,
                                  "seconds to wait for the server to be ready")
    export_trace: str | None = option(None, "also save the workload as a Mooncake trace")
    # NOTE: never written to the manifest
    api_key: str | None = option(None, "bearer token for the server (default: $OPENAI_API_KEY)",
                                 envvar="OPENAI_API_KEY", secret=True)
