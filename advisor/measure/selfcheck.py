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

import numpy as np

from advisor.measure.records import ClientRun

LOOP_LAG_P99_MS = 5.0
SEND_LATE_P99_MS = 10.0
BUSY_SHARE = 0.7


def client_check(run: ClientRun, capped: bool = False) -> dict:
    """The run's self-check: cpu_share (of one core, per client process), loop_lag_p99_ms,
    send_late_p99_ms (None under a concurrency cap, where waiting for a slot is the cap's
    doing) and `bound`: why the client was the bottleneck, or None."""
    late = None if capped else _p99([s * 1000 for s in run.send_lateness()])
    check = {"cpu_share": run.cpu_s / run.duration / run.workers if run.duration > 0 else None,
             "loop_lag_p99_ms": _p99([lag * 1000 for lag in run.loop_lags]),
             "send_late_p99_ms": late}
    return {**check, "bound": bound(check)}


def pooled(checks: list[dict | None]) -> dict | None:
    """One check for runs pooled into one result: the worst of each sign (None when any
    run has none recorded)."""
    if not checks or any(c is None for c in checks):
        return None
    worst = {k: max((c[k] for c in checks if c.get(k) is not None), default=None)
             for k in ("cpu_share", "loop_lag_p99_ms", "send_late_p99_ms")}
    return {**worst, "bound": bound(worst)}


def bound(check: dict) -> str | None:
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
