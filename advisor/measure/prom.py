"""Reading a deployment's Prometheus text: ours (`engine:` names) or vLLM's (`vllm:`, with
its NIXL connector's transfer metrics). A `Sample` holds the counters summed over every
instance; two samples' difference is what one run did, which is stored with that run."""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from advisor.rundata.result import PROCESS_CPU

# (transfer-time histogram, bytes metric, failures counter) per server kind, ours first
TRANSFER_METRICS = (
    ("engine:kv_transfer_time_seconds", "engine:kv_transfer_bytes", "engine:kv_transfer_failures"),
    ("vllm:nixl_xfer_time_seconds", "vllm:nixl_bytes_transferred",
     "vllm:nixl_num_failed_transfers"),
)
EXPIRED = ("engine:kv_leases_expired", "vllm:nixl_num_kv_expired_reqs")  # on the prefillers
# the time around the wire: vLLM's post (submit) time, our last byte -> decoding delay
OVERHEAD = ("vllm:nixl_post_time_seconds", "engine:kv_transfer_ready_delay_seconds")
FRONTEND_CPU = "engine:frontend_cpu_seconds_total"
GAUGES = ("vllm:kv_cache_usage_perc", "vllm:num_requests_waiting", "vllm:num_requests_running")
# a page that has none of these is not a serving engine's metrics
EXPECTED = ("engine:", "vllm:", PROCESS_CPU)


@dataclass
class Sample:
    """Counter values (histograms as their _sum, _count and buckets) summed over instances,
    plus gauges as last read. `minus` and `plus` act on counters; gauges keep the later."""

    values: dict[str, float] = field(default_factory=dict)
    buckets: dict[str, dict[float, float]] = field(default_factory=dict)  # le -> cumulative
    gauges: dict[str, float] = field(default_factory=dict)

    def minus(self, before: Sample) -> Sample:
        return Sample({k: v - before.values.get(k, 0.0) for k, v in self.values.items()},
                      {n: {le: c - before.buckets.get(n, {}).get(le, 0.0) for le, c in b.items()}
                       for n, b in self.buckets.items()}, dict(self.gauges))

    def plus(self, other: Sample) -> Sample:
        values = dict(self.values)
        for k, v in other.values.items():
            values[k] = values.get(k, 0.0) + v
        buckets = {n: dict(b) for n, b in self.buckets.items()}
        for n, b in other.buckets.items():
            mine = buckets.setdefault(n, {})
            for le, c in b.items():
                mine[le] = mine.get(le, 0.0) + c
        return Sample(values, buckets, {**self.gauges, **other.gauges})

    def to_json(self) -> dict[str, Any]:
        return {"values": self.values, "gauges": self.gauges,
                "buckets": {n: [[le, c] for le, c in sorted(b.items())]
                            for n, b in self.buckets.items()}}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Sample:
        return cls(dict(d.get("values") or {}),
                   {n: {float(le): c for le, c in b} for n, b in (d.get("buckets") or {}).items()},
                   dict(d.get("gauges") or {}))


def read(text: str) -> Sample:
    """The counters, histograms and gauges in `text` that this module reads."""
    out = Sample()
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith(("engine:", "vllm:", "process_cpu")):
            continue
        for s in fam.samples:
            if fam.type == "gauge":
                if s.name in GAUGES:
                    out.gauges[s.name] = out.gauges.get(s.name, 0.0) + s.value
            elif s.name.endswith("_bucket"):
                b = out.buckets.setdefault(s.name[:-7], {})
                le = float(s.labels["le"])
                b[le] = b.get(le, 0.0) + s.value
            elif not s.name.endswith("_created"):
                key = s.name + ("|" + s.labels["stage"] if s.name == FRONTEND_CPU else "")
                out.values[key] = out.values.get(key, 0.0) + s.value
    return out


def recognised(text: str) -> bool:
    """Whether `text` holds any metric this module reads (ours, vLLM's, process CPU)."""
    return any(f.name.startswith(EXPECTED) for f in text_string_to_metric_families(text))


def _counter(s: Sample, name: str) -> float:
    return s.values.get(name + "_total", s.values.get(name, 0.0))


@dataclass
class TransferTotals:
    """KV transfers in a sample: count, wire seconds, bytes, failures, expired leases, and
    the seconds around the wire (vLLM's post time or our ready delay; None if unreported)."""

    count: float = 0.0
    seconds: float = 0.0
    nbytes: float = 0.0
    buckets: dict[float, float] | None = None  # le -> cumulative count
    source: str | None = None
    failures: float = 0.0
    expired: float = 0.0
    overhead_s: float | None = None

    def quantile(self, q: float) -> float | None:
        """Upper bound of the histogram bucket holding quantile q (seconds)."""
        if not self.buckets or self.count <= 0:
            return None
        for le in sorted(self.buckets):
            if self.buckets[le] >= q * self.count:
                return le
        return None


def transfer_of(s: Sample) -> TransferTotals:
    """The KV transfers `s` reports (ours if present, else vLLM's NIXL metrics)."""
    expired = sum(_counter(s, n) for n in EXPIRED)
    for time_name, bytes_name, failed_name in TRANSFER_METRICS:
        if time_name + "_count" in s.values:
            nbytes = s.values.get(bytes_name + "_sum", _counter(s, bytes_name))
            overhead = [s.values[n + "_sum"] for n in OVERHEAD if n + "_sum" in s.values]
            return TransferTotals(s.values[time_name + "_count"], s.values[time_name + "_sum"],
                                  nbytes, s.buckets.get(time_name), time_name.split(":")[0],
                                  _counter(s, failed_name), expired,
                                  sum(overhead) if overhead else None)
    return TransferTotals(expired=expired)


@dataclass
class FrontendTotals:
    """Cumulative CPU seconds: the front end's (render + derender) and the processes' own."""

    render_s: float = 0.0
    derender_s: float = 0.0
    process_s: float = 0.0

    def minus(self, before: FrontendTotals) -> FrontendTotals:
        return FrontendTotals(self.render_s - before.render_s,
                              self.derender_s - before.derender_s,
                              self.process_s - before.process_s)


def frontend_of(s: Sample) -> FrontendTotals | None:
    """Front-end and process CPU over every instance; None when the servers do not report
    front-end CPU (vLLM does not)."""
    stages = {k.partition("|")[2]: v for k, v in s.values.items() if k.startswith(FRONTEND_CPU)}
    if not stages:
        return None
    render = stages.pop("render", 0.0)
    return FrontendTotals(render, sum(stages.values()), s.values.get(PROCESS_CPU, 0.0))


def parse_frontend(text: str) -> FrontendTotals | None:
    return frontend_of(read(text))


def scrape_text(urls: list[str], timeout_s: float = 5.0) -> str:
    """The /metrics text of every URL (each a /metrics endpoint), concatenated."""
    texts = []
    for url in urls:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            texts.append(r.read().decode())
    return "\n".join(texts)


def kv_blocks_in_use(text: str) -> float:
    """KV blocks in use (engine:kv_blocks_total - engine:kv_blocks_free), summed over every
    instance in `text`: 0 once an idle deployment has freed everything."""
    total = free = 0.0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            total += s.value if s.name == "engine:kv_blocks_total" else 0.0
            free += s.value if s.name == "engine:kv_blocks_free" else 0.0
    return total - free
