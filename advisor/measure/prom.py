"""Reading KV-transfer and front-end CPU figures out of Prometheus text (ours, or vLLM's
NIXL metrics for transfers)."""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

# (transfer-time histogram, bytes metric) per server kind, ours first
TRANSFER_METRICS = (("engine:kv_transfer_time_seconds", "engine:kv_transfer_bytes"),
                    ("vllm:nixl_xfer_time_seconds", "vllm:nixl_bytes_transferred"))


@dataclass
class TransferTotals:
    """Cumulative counters: subtract two scrapes to get what happened in between."""

    count: float = 0.0
    seconds: float = 0.0
    nbytes: float = 0.0
    buckets: dict[float, float] | None = None  # le -> cumulative count
    source: str | None = None

    def minus(self, before: TransferTotals) -> TransferTotals:
        buckets = {
            le: n - (before.buckets or {}).get(le, 0.0) for le, n in (self.buckets or {}).items()
        }
        return TransferTotals(
            self.count - before.count,
            self.seconds - before.seconds,
            self.nbytes - before.nbytes,
            buckets,
            self.source,
        )

    def quantile(self, q: float) -> float | None:
        """Upper bound of the histogram bucket holding quantile q (seconds)."""
        if not self.buckets or self.count <= 0:
            return None
        for le in sorted(self.buckets):
            if self.buckets[le] >= q * self.count:
                return le
        return None


@dataclass
class FrontendTotals:
    """Cumulative CPU seconds: the front end's (render + derender) and the processes' own."""

    render_s: float = 0.0
    derender_s: float = 0.0
    process_s: float = 0.0

    def minus(self, before: FrontendTotals) -> FrontendTotals:
        return FrontendTotals(
            self.render_s - before.render_s,
            self.derender_s - before.derender_s,
            self.process_s - before.process_s,
        )


def parse_frontend(text: str) -> FrontendTotals | None:
    """Sum front-end and process CPU over every instance in `text`; None when the servers
    do not report front-end CPU (vLLM does not)."""
    out, found = FrontendTotals(), False
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "engine:frontend_cpu_seconds_total":
                found = True
                if s.labels.get("stage") == "render":
                    out.render_s += s.value
                else:
                    out.derender_s += s.value
            elif s.name == "process_cpu_seconds_total":
                out.process_s += s.value
    return out if found else None


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


def parse_transfer(text: str) -> TransferTotals:
    """Sum transfer samples over every instance and label set in `text`."""
    samples: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_bucket"):
                b = buckets.setdefault(s.name[:-7], {})
                b[float(s.labels["le"])] = b.get(float(s.labels["le"]), 0.0) + s.value
            else:
                samples[s.name] = samples.get(s.name, 0.0) + s.value
    for time_name, bytes_name in TRANSFER_METRICS:
        if time_name + "_count" in samples:
            nbytes = samples.get(
                bytes_name + "_total",
                samples.get(bytes_name + "_sum", samples.get(bytes_name, 0.0)),
            )
            return TransferTotals(
                samples[time_name + "_count"],
                samples[time_name + "_sum"],
                nbytes,
                buckets.get(time_name),
                time_name.split(":")[0],
            )
    return TransferTotals()


def scrape_transfer(urls: list[str], timeout_s: float = 5.0) -> TransferTotals:
    """Scrape each `url` (a /metrics endpoint) and sum what they report."""
    return parse_transfer(scrape_text(urls, timeout_s))
