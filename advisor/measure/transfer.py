"""The guide's KV-transfer verdict, from the transfers a deployment's metrics counted: mean
and p90 per transfer, throughput against what the link class should give, failures and
expired leases, and how much of each transfer is wire time."""

from __future__ import annotations

import math
from typing import Any

from advisor.measure.prom import TransferTotals

HEALTHY_MS = 50.0  # vLLM's NIXL docs: mean under 10 ms (small models) to 50 ms (large)
SLOW_MS = 200.0  # several hundred ms: fix the transfer before anything else
# the guide: over 1 GB/s on InfiniBand (and NVLink-class links), over 100 MB/s on TCP
LINK_FLOORS_GBPS = {"fast": 1.0, "tcp": 0.1}
LINK_NAMES = {"fast": "InfiniBand/NVLink-class", "tcp": "TCP"}
# NOTE: a small transfer's time is latency, not bandwidth: throughput is judged from this size
THROUGHPUT_MIN_MB = 8.0


def link_class(connector: str | None) -> str:
    """Which floor a connector's transfers are held to: TCP's, else the fast links'."""
    return "tcp" if connector == "tcp" else "fast"


def verdict(t: TransferTotals, link: str = "fast") -> dict[str, Any]:
    """The verdict on `t` (transfers in one window); `link`: a LINK_FLOORS_GBPS key."""
    if t.count <= 0:
        return {"transfers": 0, "failures": t.failures, "expired": t.expired,
                "verdict": "no transfers seen"}
    mean_ms = t.seconds / t.count * 1000
    p90 = t.quantile(0.9)
    gbps = t.nbytes / t.seconds / 1e9 if t.seconds > 0 else None
    floor = LINK_FLOORS_GBPS[link]
    out: dict[str, Any] = {
        "transfers": t.count,
        "mean_ms": mean_ms,
        "p90_ms": p90 * 1000 if p90 is not None and math.isfinite(p90) else None,
        "mean_mb": t.nbytes / t.count / 1e6,
        "gbps": gbps,
        "link": LINK_NAMES[link],
        "link_floor_gbps": floor,
        "throughput_ok": None if gbps is None or t.nbytes / t.count / 1e6 < THROUGHPUT_MIN_MB
        else gbps >= floor,
        "failures": t.failures,
        "expired": t.expired,
        # per transfer, beside the wire: vLLM's post time or our ready delay
        "overhead_ms": None if t.overhead_s is None else t.overhead_s / t.count * 1000,
        "metrics": t.source,
    }
    out["verdict"] = _words(out)
    return out


def _words(v: dict[str, Any]) -> str:
    mean = v["mean_ms"]
    head = ("healthy" if mean < HEALTHY_MS else
            "slow: fix the transfer before anything else" if mean >= SLOW_MS else "marginal")
    notes = []
    if v["throughput_ok"] is False:
        notes.append(f"{v['gbps']:.2f} GB/s is under the {v['link_floor_gbps']:g} GB/s a "
                     f"{v['link']} link should give")
    if v["failures"]:
        notes.append(f"{v['failures']:g} failed")
    if v["expired"]:
        notes.append(f"{v['expired']:g} leases expired before the decoder pulled "
                     "(raise kv_lease_duration)")
    return head + (f" ({'; '.join(notes)})" if notes else "")
