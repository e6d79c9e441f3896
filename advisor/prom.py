"""Reading KV-transfer figures out of Prometheus text (ours or vLLM's NIXL metrics)."""

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
        buckets = {le: n - (before.buckets or {}).get(le, 0.0) for le, n in (self.buckets or {}).items()}
        return TransferTotals(self.count - before.count, self.seconds - before.seconds,
                              self.nbytes - before.nbytes, buckets, self.source)

    def quantile(self, q: float) -> float | None:
        """Upper bound of the histogram bucket holding quantile q (seconds)."""
        if not self.buckets or self.count <= 0:
            return None
        for le in sorted(self.buckets):
            if self.buckets[le] >= q * self.count:
                return le
        return None


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
            nbytes = samples.get(bytes_name + "_total", samples.get(bytes_name + "_sum",
                                                                    samples.get(bytes_name, 0.0)))
            return TransferTotals(samples[time_name + "_count"], samples[time_name + "_sum"],
                                  nbytes, buckets.get(time_name), time_name.split(":")[0])
    return TransferTotals()


def scrape_transfer(urls: list[str], timeout_s: float = 5.0) -> TransferTotals:
    """Scrape each `url` (a /metrics endpoint) and sum what they report."""
    texts = []
    for url in urls:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            texts.append(r.read().decode())
    return parse_transfer("\n".join(texts))
