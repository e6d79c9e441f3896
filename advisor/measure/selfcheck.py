"""Whether the measuring client kept up with its own run: a client that was the bottleneck
measures itself, so such a run is marked, and no decision rests on it.

The signs, each recorded for every run: the event loop waking late from short sleeps (it
handles every stream's chunks and sends every request), requests leaving later than their
schedule (open loop: the arrivals are what the client sends, not what it meant to), and
the client's CPU share of one core. Chunk times are the kernel's, so a late loop does not
delay them; it delays sends. A loop late while the client itself is busy (BUSY_SHARE of a
core or more) is the client's own doing; one late while it is mostly idle is the host's
cores held by others (the engines it measures, on a small machine), which only matters
where it makes sends late, and that is checked on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

import numpy as np

from advisor.measure.records import ClientRun

LOOP_LAG_P99_MS = 5.0
SEND_LATE_P99_MS = 10.0
BUSY_SHARE = 0.7


class ClientCheck(TypedDict):
    """A run's self-check, as result.json's `client_check` holds it."""

    cpu_share: float | None  # of one core, per client process
    loop_lag_p99_ms: float | None
    send_late_p99_ms: float | None  # None under a concurrency cap
    bound: str | None  # why the client was the bottleneck


def client_check(run: ClientRun, capped: bool = False) -> ClientCheck:
    """The run's self-check: cpu_share (of one core, per client process), loop_lag_p99_ms,
    send_late_p99_ms (None under a concurrency cap, where waiting for a slot is the cap's
    doing) and `bound`: why the client was the bottleneck, or None."""
    late = None if capped else _p99([s * 1000 for s in run.send_lateness()])
    check = ClientCheck(
        cpu_share=run.cpu_s / run.duration / run.workers if run.duration > 0 else None,
        loop_lag_p99_ms=_p99([lag * 1000 for lag in run.loop_lags]), send_late_p99_ms=late,
        bound=None)
    check["bound"] = bound(check)
    return check


def pooled(checks: list[Mapping[str, Any] | None]) -> ClientCheck | None:
    """One check for runs pooled into one result: the worst of each sign (None when any
    run has none recorded)."""
    given = [c for c in checks if c is not None]
    if not checks or len(given) < len(checks):
        return None
    def most(values: list[float | None]) -> float | None:
        return max((v for v in values if v is not None), default=None)

    worst = ClientCheck(cpu_share=most([c.get("cpu_share") for c in given]),
                        loop_lag_p99_ms=most([c.get("loop_lag_p99_ms") for c in given]),
                        send_late_p99_ms=most([c.get("send_late_p99_ms") for c in given]),
                        bound=None)
    worst["bound"] = bound(worst)
    return worst


def bound(check: Mapping[str, Any]) -> str | None:
    """Why a check says the client was the bottleneck, or None."""
    why = []
    lag, late = check.get("loop_lag_p99_ms"), check.get("send_late_p99_ms")
    share = check.get("cpu_share")
    if lag is not None and lag > LOOP_LAG_P99_MS and share is not None and share >= BUSY_SHARE:
        why.append(f"its event loop woke {lag:.1f} ms late at p99 (over {LOOP_LAG_P99_MS:g}) "
                   f"while it kept {share:.0%} of a core busy")
    if late is not None and late > SEND_LATE_P99_MS:
        why.append(f"requests left {late:.1f} ms behind schedule at p99 (over "
                   f"{SEND_LATE_P99_MS:g})")
    return "the measuring client did not keep up: " + "; ".join(why) if why else None


def _p99(values: list[float]) -> float | None:
    return float(np.percentile(values, 99)) if values else None
