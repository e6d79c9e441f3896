"""Latency statistics, SLOs and goodput from request records: TTFT, ITL, TPOT and E2E
latency percentiles over successful requests, SLO attainment over every request (failed
and unsent ones count as misses), bootstrap intervals (confidence.py), and what the pace
of a run needs (`RunResult.pace`). Definitions: docs/concepts/metrics.md."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import TypedDict

import numpy as np

from advisor.errors import UsageError
from advisor.measure.confidence import intervals
from advisor.measure.records import RequestRecord
from advisor.rundata.slo import Slo
from advisor.rundata.stats import METRICS, Intervals, Latency, RunStats, TurnStats

MAX_RATES = 64  # rates one --rates grid may hold
MAX_RATE = 1e6  # req/s


def parse_rates(text: str | None) -> tuple[float, ...]:
    """--rates "0.2,0.4" -> (0.2, 0.4); UsageError when it is not a list of at most
    MAX_RATES finite numbers above 0 and at most MAX_RATE, each read before it sizes
    anything."""
    items = [r for r in (text or "").split(",", MAX_RATES) if r.strip()]
    if len(items) > MAX_RATES:
        raise UsageError(f"--rates: at most {MAX_RATES} rates")
    try:
        rates = tuple(float(r) for r in items)
    except ValueError:
        raise UsageError(f"--rates {(text or '')[:80]!r}: expected comma-separated numbers") \
            from None
    if not all(0 < r <= MAX_RATE for r in rates):
        raise UsageError(f"--rates: each must be above 0 and at most {MAX_RATE:g} req/s")
    return rates


def check_judged(slo: Slo, attainment: float | None = None,
                 operating_rate: float | None = None) -> None:
    """What every verb that decides asks of its SLO flags: ttft and a limit on the gaps
    between tokens (itl, p99_itl or tpot) among --slo (the decision table uses both),
    --attainment in (0, 1], --operating-rate > 0 (None: not checked, or not given);
    UsageError naming the flag."""
    if "ttft" not in slo or not ("itl" in slo or "tpot" in slo):
        raise UsageError("--slo needs ttft:MS and one of itl:MS, p99_itl:MS or tpot:MS (the "
                         "decision table uses both)")
    if attainment is not None and not 0 < attainment <= 1:
        raise UsageError(f"--attainment must be in (0, 1], not {attainment}")
    if operating_rate is not None and not operating_rate > 0:
        raise UsageError(f"--operating-rate must be > 0, not {operating_rate}")


def parse_percentiles(text: str) -> list[float]:
    """"50,90,99" -> [50.0, 90.0, 99.0]; each in (0, 100]."""
    try:
        ps = [float(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise UsageError(
            f"--metric-percentiles {text!r}: not a comma-separated list of numbers"
        ) from None
    if not ps or not all(0 < p <= 100 for p in ps):
        raise UsageError(f"--metric-percentiles {text!r}: each must be in (0, 100]")
    return ps


@dataclass
class RequestLatency:
    """One successful request's latencies, in seconds."""

    ttft: float
    e2el: float
    itls: np.ndarray  # [chunks - 1] gaps
    tpot: float | None

    @functools.cached_property
    def p99_itl(self) -> float:
        """np.percentile(itls, 99) (linear), by hand: np.percentile's own overhead per call
        outweighed the work for a request's few hundred gaps."""
        if not self.itls.size:
            return 0.0
        s = np.sort(self.itls)
        h = (len(s) - 1) * 0.99
        lo = int(h)
        return float(s[lo] + (h - lo) * (s[min(lo + 1, len(s) - 1)] - s[lo]))


def latency(r: RequestRecord) -> RequestLatency | None:
    if not r.ok:
        return None
    ttft, e2el = r.chunks[0] - r.sent, r.chunks[-1] - r.sent
    tpot = (e2el - ttft) / (r.output_tokens - 1) if r.output_tokens > 1 else None
    return RequestLatency(ttft, e2el, np.diff(r.chunks), tpot)


def is_good(lat: RequestLatency | None, slo: Slo | None) -> bool:
    """Whether a request met every per-request objective of `slo` (None: none to meet;
    the pooled ones are the run's: advisor.goodput.outcomes.outcome_of). A failed request
    (None) never does."""
    if lat is None:
        return False
    got = _judged(lat)
    return slo is None or all(got[o.metric] * 1000 <= o.ms for o in slo.per_request)


def slo_scale(lat: RequestLatency | None, slo: Slo) -> float:
    """The least multiple of every SLO that a request met: its figure over the SLO, the
    largest of them (at most 1 where `is_good`); infinite for a failed request."""
    if lat is None:
        return math.inf
    got = _judged(lat)
    return max((got[o.metric] * 1000 / o.ms for o in slo.per_request), default=0.0)


def _judged(lat: RequestLatency) -> dict[str, float]:
    """A request's figures an SLO may name, in seconds."""
    return {"ttft": lat.ttft, "e2el": lat.e2el, "itl": lat.p99_itl,
            "tpot": lat.tpot if lat.tpot is not None else 0.0}


def _latency(values_s: list[float] | np.ndarray, percentiles: list[float]) -> Latency:
    """Mean, median, std and percentiles (ms) of `values_s`; zeros where there are none,
    as vLLM writes them."""
    a = np.asarray(values_s, dtype=float) * 1000
    if not a.size:
        return Latency(0.0, 0.0, 0.0, {f"p{p:g}": 0.0 for p in percentiles})
    return Latency(float(a.mean()), float(np.median(a)), float(a.std()),
                   {f"p{p:g}": float(np.percentile(a, p)) for p in percentiles})


def summarize(
    records: list[RequestRecord],
    duration: float,
    slo: Slo | None,
    percentiles: list[float],
    metrics: tuple[str, ...] = METRICS,
) -> RunStats:
    """vLLM's result statistics (completed, failed, throughputs, mean/median/std/pNN of each
    metric) plus slo_attainment, per-source token counts, the pace figures and bootstrap
    intervals. Warmup records are ignored."""
    runs = [r for r in records if not r.warmup]
    if slo is not None and slo.pooled and 99 not in percentiles:  # what the run is judged on
        percentiles = [*percentiles, 99.0]
    lats = [latency(r) for r in runs]
    done = [(r, lat) for r, lat in zip(runs, lats) if lat is not None]
    good = sum(is_good(lat, slo) for lat in lats)
    out_tokens = sum(r.output_tokens for r, _ in done)
    in_tokens = sum(r.prompt_tokens for r, _ in done)
    duration = max(duration, 1e-9)
    pools = {
        "ttft": [lat.ttft for _, lat in done],
        "e2el": [lat.e2el for _, lat in done],
        "tpot": [lat.tpot for _, lat in done if lat.tpot is not None],
        "itl": np.concatenate([lat.itls for _, lat in done]) if done else [],
    }
    multi = any(r.turn > 0 for r in runs)
    ci = intervals([is_good(lat, slo) for lat in lats],
                   [lat.ttft * 1000 if lat else None for lat in lats],
                   [list(lat.itls * 1000) if lat else [] for lat in lats],
                   [r.conversation_id for r in runs] if multi else None)
    stats = RunStats(
        completed=len(done), failed=len(runs) - len(done),
        slo_attainment=good / len(runs) if runs else 0.0, num_requests=len(runs),
        duration=duration, total_input_tokens=in_tokens, total_output_tokens=out_tokens,
        output_tokens_from_usage=sum(r.token_source == "usage" for r, _ in done),
        request_throughput=len(done) / duration, output_throughput=out_tokens / duration,
        total_token_throughput=(out_tokens + in_tokens) / duration,
        request_goodput=good / duration, good_requests=good, goodput_slos=slo,
        latency={m: _latency(pools[m], percentiles) for m in metrics},
        per_turn=per_turn(runs) if multi else None, **pace_figures(runs, lats),
        ci95=Intervals(**ci))
    return replace(stats, **conversations(runs)) if multi else stats


class PaceFigures(TypedDict, total=False):
    """RunStats' pace figures (each named there)."""

    early_e2el_ms: float | None
    request_life_ms: float
    peak_requests: int


class ConversationFigures(TypedDict):
    """RunStats' multi-turn figures (each named there)."""

    conversation_life_ms: float
    early_conversation_ms: float
    completed_conversations: int
    peak_conversations: int


def pace_figures(records: list[RequestRecord],
                 lats: list[RequestLatency | None]) -> PaceFigures:
    """What `RunResult.pace` reads of a run besides its counts: the median end-to-end
    latency of its first fifth by schedule (ms) and, single-turn, its requests' median
    lifetime (ms) and the most under way at once (multi-turn: `conversations`)."""
    first = sorted(zip(records, lats), key=lambda rl: rl[0].scheduled)[:max(1, len(records) // 5)]
    early = [lat.e2el for _, lat in first if lat is not None]
    out = PaceFigures(early_e2el_ms=float(np.median(early)) * 1000 if early else None)
    if records and not any(r.turn > 0 for r in records):
        life, peak = _under_way([(r.scheduled, _last(r) - r.scheduled) for r in records])
        out["request_life_ms"], out["peak_requests"] = life * 1000, peak
    return out


def conversations(records: list[RequestRecord]) -> ConversationFigures:
    """How long conversations lasted, all and the first fifth by start (ms), how many had
    every turn complete and the most under way at once (see the module's docstring)."""
    convs: dict[str, list[RequestRecord]] = {}
    for r in records:
        convs.setdefault(r.conversation_id, []).append(r)
    spans = []  # (start, lifetime, every turn completed), by start
    for rs in convs.values():
        start = min(r.scheduled for r in rs)
        spans.append((start, max(_last(r) for r in rs) - start, all(r.ok for r in rs)))
    spans.sort()
    lives = [life for _, life, _ in spans]
    life, peak = _under_way([(t, life) for t, life, _ in spans])
    return ConversationFigures(
        conversation_life_ms=life * 1000,
        early_conversation_ms=float(np.median(lives[:max(1, len(lives) // 5)])) * 1000,
        completed_conversations=sum(done for _, _, done in spans), peak_conversations=peak)


def _last(r: RequestRecord) -> float:
    """When a request was last heard of: its end, else its send, else its schedule."""
    return max(r.end, r.sent, r.scheduled)


def _under_way(spans: list[tuple[float, float]]) -> tuple[float, int]:
    """The median lifetime (s) of (start, lifetime) spans, and the most under way at once."""
    # NOTE: an end sorts before a start at the same moment: back to back is not at once
    events = sorted([(t, 1) for t, _ in spans] + [(t + life, -1) for t, life in spans])
    return (float(np.median([life for _, life in spans])),
            int(np.max(np.cumsum([step for _, step in events]))))


def per_turn(records: list[RequestRecord]) -> list[TurnStats]:
    """Multi-turn runs by turn index (1..N): requests, failures, median and p90 TTFT (ms),
    mean prompt tokens and how many of them the server reused (cached_tokens: from its
    prefix cache or a KV pull) or computed, and the mean KV transfer (ms). Where turn k's
    TTFT grows with k, the context is being recomputed."""
    out = []
    for turn in sorted({r.turn for r in records}):
        rs = [r for r in records if r.turn == turn]
        ok = [r for r in rs if r.ok]
        ttft = [(r.chunks[0] - r.sent) * 1000 for r in ok]
        cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
        kv = [r.kv_transfer_ms for r in ok if r.kv_transfer_ms is not None]
        prompt = float(np.mean([r.prompt_tokens for r in ok])) if ok else None
        reused = float(np.mean(cached)) if cached else None
        out.append(TurnStats(
            turn=turn + 1, requests=len(rs), failed=len(rs) - len(ok),
            median_ttft_ms=float(np.median(ttft)) if ttft else None,
            p90_ttft_ms=float(np.percentile(ttft, 90)) if ttft else None,
            mean_prompt_tokens=prompt, mean_reused_tokens=reused,
            mean_computed_tokens=prompt - reused if prompt is not None and reused is not None
            else None,
            mean_kv_transfer_ms=float(np.mean(kv)) if kv else None,
        ))
    return out
