"""Prometheus metrics of one engine server, with vLLM's names where vLLM has them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric

if TYPE_CHECKING:  # the engine loop's and the front end's types, not their imports
    from engine.render.frontend import Frontend
    from engine.serve.async_engine import StepStats

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)


class FrontendCounts(Protocol):
    """What a front end counts: CPU seconds and requests per stage."""

    @property
    def cpu_seconds(self) -> dict[str, float]: ...

    @property
    def requests(self) -> dict[str, int]: ...


class FrontendCollector:
    """A front end's CPU seconds and requests per stage (render, derender), read at scrape
    time, beside the process's own CPU (process_cpu_seconds_total): their ratio is the share
    of this host's CPU that the front end takes."""

    def __init__(self, frontend: FrontendCounts, model: str) -> None:
        self.frontend, self.model = frontend, model

    def collect(self) -> Iterator[Metric]:
        cpu = CounterMetricFamily(
            "engine:frontend_cpu_seconds",
            "CPU time of chat templating + tokenization (render) and "
            "detokenization + parsing (derender)",
            labels=["model_name", "stage"],
        )
        reqs = CounterMetricFamily(
            "engine:frontend_requests",
            "Requests through each front-end stage",
            labels=["model_name", "stage"],
        )
        for stage, seconds in self.frontend.cpu_seconds.items():
            cpu.add_metric([self.model, stage], seconds)
            reqs.add_metric([self.model, stage], self.frontend.requests[stage])
        yield cpu
        yield reqs


def frontend_registry(
    frontend: FrontendCounts, model: str, registry: CollectorRegistry | None = None,
    process_cpu: Callable[[], float] | None = None,
) -> CollectorRegistry:
    """`registry` (or a new one) with the front end's and the process's CPU counters;
    `process_cpu()`, when given, is the CPU seconds to report instead of this process's own
    (several worker processes together)."""
    registry = registry or CollectorRegistry()
    registry.register(FrontendCollector(frontend, model))
    if process_cpu is None:
        ProcessCollector(registry=registry)
    else:
        registry.register(_ReadCounter("process_cpu_seconds", "Total user and system CPU time "
                                       "spent in seconds, over all worker processes", None,
                                       process_cpu))
    return registry


class _ReadCounter:
    """A counter whose value a function gives at scrape time (labelled with the model when
    it has one)."""

    def __init__(self, name: str, doc: str, model: str | None,
                 value: Callable[[], float]) -> None:
        self.name, self.doc, self.model, self.value = name, doc, model, value

    def collect(self) -> Iterator[Metric]:
        names, values = ([], []) if self.model is None else (["model_name"], [self.model])
        fam = CounterMetricFamily(self.name, self.doc, labels=names)
        fam.add_metric(values, self.value())
        yield fam


class EngineMetrics:
    """One registry per server (never the process-global one), so tests can run several."""

    def __init__(self, model: str, frontend: Frontend | None = None) -> None:
        self.registry = r = CollectorRegistry()
        if frontend is not None:
            frontend_registry(frontend, model, r)
        lbl = ["model_name"]
        self.model = model

        def hist(name: str, doc: str) -> Histogram:
            return Histogram(name, doc, lbl, registry=r, buckets=_LATENCY_BUCKETS).labels(model)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, lbl, registry=r).labels(model)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, lbl, registry=r).labels(model)

        self.ttft = hist("vllm:time_to_first_token_seconds", "Time to first token")
        self.itl = hist("vllm:inter_token_latency_seconds", "Gap between output tokens")
        self.e2e = hist("vllm:e2e_request_latency_seconds", "End-to-end request latency")
        self.step_time = hist("engine_step_duration_seconds", "Duration of one engine step")
        self.running = gauge("vllm:num_requests_running", "Requests running")
        self.waiting = gauge("vllm:num_requests_waiting", "Requests waiting")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV cache usage (0-1)")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prompt tokens")
        self.generation_tokens = counter("vllm:generation_tokens", "Generated tokens")
        self.kv_transfer_time = hist("engine:kv_transfer_time_seconds",
                                     "KV pull time, first byte asked to last byte in")
        self.kv_ready_delay = hist("engine:kv_transfer_ready_delay_seconds",
                                   "Last KV byte in -> the decoder computing on it")
        self.kv_transfer_bytes = counter("engine:kv_transfer_bytes", "KV bytes pulled")
        self.kv_transfers = counter("engine:kv_transfers", "KV transfers completed")
        self.kv_failures = counter("engine:kv_transfer_failures", "KV pulls or imports that failed")
        self.prefill_computed = counter("engine:prefill_tokens_computed",
                                        "Prompt tokens run through the model")
        self.prefill_reused = counter("engine:prefill_tokens_reused",
                                      "Prompt tokens taken from the prefix cache or a KV pull")
        self.kv_reuse_mismatch = counter(
            "engine:kv_reuse_mismatch_tokens",
            "Tokens of an earlier turn's kept KV that did not match the new prompt "
            "(recomputed; e.g. a chat template dropped earlier reasoning)")

    def watch_pool(self, free_blocks: Callable[[], float], total_blocks: int,
                   leases_expired: Callable[[], float] = lambda: 0) -> None:
        """Read at scrape time: the KV pool's free blocks (`free_blocks()`, whether idle or
        not) and its size, a pool back to full after a load being one without leaks; and
        the count of KV leases that expired before a decoder pulled them."""
        r, lbl = self.registry, ["model_name"]
        r.register(_ReadCounter("engine:kv_leases_expired", "KV held for a decoder that "
                                "expired unpulled (vLLM: nixl_num_kv_expired_reqs)",
                                self.model, leases_expired))
        Gauge("engine:kv_blocks_free", "Free KV blocks, read at scrape time", lbl,
              registry=r).labels(self.model).set_function(free_blocks)
        Gauge("engine:kv_blocks_total", "KV blocks in the pool", lbl,
              registry=r).labels(self.model).set(total_blocks)

    def on_step(self, stats: StepStats) -> None:
        """Engine-thread callback with an async_engine.StepStats."""
        self.step_time.observe(stats.duration_s)
        self.running.set(stats.num_running)
        self.waiting.set(stats.num_waiting)
        self.kv_usage.set(stats.kv_usage)

    def render(self) -> bytes:
        return generate_latest(self.registry)
