"""The guide's decision table, applied to an evidence file.

Each row is evaluated on its own and reported with the numbers and thresholds
that made it fire or not. The primary action follows the measured comparison
when both topologies were measured (the one that sustains more goodput at the
SLO wins); the rules decide only when that comparison is missing or a tie.
"""

from __future__ import annotations

import math
from dataclasses import asdict, replace
from typing import Any

from advisor.decide.comparison import compare
from advisor.decide.thresholds import RATIO_WIDTH, Thresholds
from advisor.decide.transfer_row import kv_row, p2p_reason, slow_text
from advisor.decide.unreachable import behind_note, slowdown_note, unreachable
from advisor.rundata.evidence import Evidence, PlacementEvidence, WorkloadEvidence
from advisor.rundata.recommendation import Comparison, Recommendation
from advisor.rundata.recommendation import DecisionRow as Row

GROWING = "chat / agent loops over a growing context"
# When the measured comparison cannot decide, the first of these rows that fired does.
RULE_ORDER = (
    "kv_transfer_slow",
    "growing_context_loops",
    "itl_p99_misses_slo",
    "long_prompts_high_concurrency",
    "ttft_binding",
    "low_bursty_or_insensitive",
    "frontend_cpu_heavy",
)
DISAGGREGATE = ("disaggregate", "disaggregate-bidirectional")


def _rows(ev: Evidence, t: Thresholds) -> list[Row]:
    slo, col, dis = ev.slo, ev.collocated, ev.disaggregated
    wl = ev.workload
    rows = []
    p99 = col.p99_itl_ms
    no_itl = None if "itl" in slo else (
        f"the SLO sets no ITL limit ({slo.text} holds "
        f"{', '.join(o.defined for o in slo)})")
    rows.append(
        Row(
            "itl_p99_misses_slo",
            "ITL p99 misses its SLO under load",
            "disaggregate",
            no_itl is None and p99 is not None and p99 > slo.gap_ms,
            {"collocated_p99_itl_ms": p99},
            {"itl_slo_ms": slo.get("itl")},
            undecided=no_itl,
        )
    )
    prompt, conc, prefill = wl.mean_prompt_tokens, wl.concurrency, wl.prefill_ms
    long_prompt = prompt >= t.long_prompt_tokens or (prefill is not None and prefill >= slo.gap_ms)
    rows.append(
        Row(
            "long_prompts_high_concurrency",
            "long prompts at high concurrency",
            "disaggregate",
            long_prompt and conc >= t.high_concurrency,
            {"mean_prompt_tokens": prompt, "prefill_ms": prefill, "concurrency": conc},
            {
                "long_prompt_tokens": t.long_prompt_tokens,
                "or_prefill_ms_over_itl_slo": slo.gap_ms,
                "high_concurrency": t.high_concurrency,
            },
        )
    )
    rows.append(_growing_context(ev, t))
    rows.append(_frontend_heavy(ev, t))
    ttft_limit = t.ttft_binding_ratio * slo.ttft_ms
    col_ttft, dis_ttft = col.p99_ttft_ms, dis.median_ttft_ms if dis else None
    binding = (
        col_ttft is not None and col_ttft >= ttft_limit and (p99 is None or p99 <= slo.gap_ms)
    ) or (dis_ttft is not None and dis_ttft > slo.ttft_ms)
    rows.append(
        Row(
            "ttft_binding",
            "TTFT is the binding constraint",
            "measure-first",
            binding,
            {"collocated_p99_ttft_ms": col_ttft, "disaggregated_median_ttft_ms": dis_ttft},
            {"ttft_slo_ms": slo.ttft_ms, "binding_above_ms": ttft_limit},
        )
    )
    rows.append(kv_row(ev, t))
    cv, sensitive = wl.burstiness_cv, wl.latency_sensitive
    rows.append(
        Row(
            "low_bursty_or_insensitive",
            "low, bursty or latency-insensitive traffic",
            "stay-collocated",
            conc < t.low_concurrency
            or not sensitive
            or (cv >= t.bursty_cv and conc < t.high_concurrency),
            {"concurrency": conc, "burstiness_cv": cv, "latency_sensitive": sensitive},
            {"low_concurrency": t.low_concurrency, "bursty_cv": t.bursty_cv},
        )
    )
    return rows


def _growing_context(ev: Evidence, t: Thresholds) -> Row:
    """Fires on measurement, never on the workload alone: bidirectional P/D sustains more
    goodput than plain P/D, or cuts a late turn's median TTFT by `late_turn_ttft_cut`."""
    wl, dis, bid, turns = ev.workload, ev.disaggregated, ev.bidirectional, ev.turns
    evidence: dict[str, Any] = {"multi_turn": wl.multi_turn}
    thresholds = {"late_turn_ttft_cut": t.late_turn_ttft_cut, "goodput_margin": t.goodput_margin}
    if bid is None or dis is None:
        why = ("a multi-turn workload, but no bidirectional P/D was measured (sweep it with "
               "disagg-bidi:XpYd)" if wl.multi_turn else None)
        return Row("growing_context_loops", GROWING, "disaggregate-bidirectional", False,
                   evidence, thresholds, undecided=why)
    more = (bid.max_goodput_rps or 0) > (dis.max_goodput_rps or 0) * (1 + t.goodput_margin)
    late = None
    if turns and turns.bidirectional_ms is not None and turns.disaggregated_ms:
        late = 1 - turns.bidirectional_ms / turns.disaggregated_ms
        evidence.update({"turn": turns.turn, "at_rps": turns.rate_rps,
                         "pd_median_ttft_ms": turns.disaggregated_ms,
                         "bidirectional_median_ttft_ms": turns.bidirectional_ms,
                         "collocated_median_ttft_ms": turns.collocated_ms,
                         "late_turn_ttft_cut": late})
    evidence.update(pd_max_goodput_rps=dis.max_goodput_rps,
                    bidirectional_max_goodput_rps=bid.max_goodput_rps)
    if wl.history_kept_share is not None:
        evidence["history_kept_share"] = wl.history_kept_share
    fired = wl.multi_turn and (more or (late is not None and late >= t.late_turn_ttft_cut))
    return Row("growing_context_loops", GROWING, "disaggregate-bidirectional", bool(fired),
               evidence, thresholds)


def _frontend_heavy(ev: Evidence, t: Thresholds) -> Row:
    """Fires when the front end's share of the engines' CPU is heavy; when a render split
    was measured, on that instead: it fires only if the split sustains more goodput than
    collocated by `goodput_margin`, and cites the gain either way."""
    fe, split = ev.frontend, ev.render_split
    share = fe.cpu_share if fe else None
    evidence = {"frontend_cpu_share": share,
                "frontend_cpu_ms_per_request": fe.cpu_ms_per_request if fe else None,
                "source": fe.source if fe else None}
    fired = share is not None and share >= t.frontend_cpu_share
    undecided = fe.undecided if fe and share is None else None
    if split is not None:
        c, r = ev.collocated.max_goodput_rps or 0.0, split.max_goodput_rps or 0.0
        evidence.update(render_split_max_goodput_rps=r, collocated_max_goodput_rps=c,
                        render_split_gain=r / c - 1 if c > 0 else None)
        fired, undecided = r > c * (1 + t.goodput_margin), None
    return Row("frontend_cpu_heavy", "GPU hosts' CPU busy with tokenization / parsing",
               "split-render-tier", fired, evidence,
               {"frontend_cpu_share": t.frontend_cpu_share, "goodput_margin": t.goodput_margin},
               undecided=undecided)


def _render_split_reason(row: Row, seen: str) -> str | None:
    """What the measured render split gained, when one was measured."""
    e = row.evidence
    if "render_split_max_goodput_rps" not in e:
        return None
    r, c = e["render_split_max_goodput_rps"], e["collocated_max_goodput_rps"]
    verdict = "split the render tier" if row.fired else "no gain worth a render tier here"
    return f"{seen}: {_versus('the render split', r, 'collocated', c)}: {verdict}"


def _history_warning(wl: WorkloadEvidence) -> str | None:
    """The guide's silent-mismatch case, found before it costs anything."""
    if not wl.multi_turn or wl.history_kept_share is None or wl.history_kept_share >= 1:
        return None
    return (f"the chat template drops {wl.history_dropped or 'part of the history'}: the next "
            f"turn starts with only {wl.history_kept_share:.0%} of the previous turn's prompt "
            "and reply, so bidirectional transfer can reuse only that much (compared by "
            "token; the rest is recomputed, where an unchecked reuse would answer wrongly)")


def recommend(ev: Evidence, t: Thresholds = Thresholds()) -> Recommendation:
    """The recommendation for validated evidence: action, rows, secondary actions, reasoning.
    The measured comparison decides where it can; the rules where it cannot or ties. When no
    placement can meet the SLO, the rules never pick one: measure-first."""
    rows = _rows(ev, t)
    fired = {r.id: r for r in rows if r.fired}
    growing = "growing_context_loops" in fired
    split = "disaggregate-bidirectional" if growing else "disaggregate"
    if growing and ev.bidirectional is not None:  # compare collocated with the split advised
        ev = replace(ev, disaggregated=ev.bidirectional)
    seen = "simulated" if ev.simulated else "measured"
    comparison = None
    blocked = unreachable(ev, t)
    if blocked:  # never a placement: measure-first; no row is judged against a floor
        if blocked[1]:
            rows, fired = [], {}
        action, why = _blocked(blocked[0], fired)
    else:
        decided, why, comparison = _measured(ev, t, fired, split, seen)
        if decided is None:
            decided, rule = _by_rule(fired, split)
            why.append(rule)
        action = decided
    kv = next((r for r in rows if r.id == "kv_transfer_slow"), None)
    for note in (_history_warning(ev.workload), p2p_reason(ev, kv) if kv else None):
        if note is not None:
            why.append(note)
    if not blocked:
        action = _slowed(ev, t, comparison, action, why)
    front = next((r for r in rows if r.id == "frontend_cpu_heavy"), None)
    gain = _render_split_reason(front, seen) if front is not None else None
    if gain is not None:
        why.append(gain)
    return Recommendation(
        action=action, reasons=why, secondary_actions=_secondary(fired, action, bool(blocked)),
        comparison=comparison, rows=rows, thresholds=asdict(t), judged_at=ev.judged_at,
        calibration=ev.calibration.summary() if ev.calibration else None,
        simulated=ev.simulated)


def _blocked(reason: str, fired: dict[str, Row]) -> tuple[str, list[str]]:
    """Where no placement can meet the SLO: measure first, unless the transfer is slow
    (the guide: fix that before anything else)."""
    if "kv_transfer_slow" not in fired:
        return "measure-first", [reason]
    return "fix-transfer", [reason, f"{slow_text(fired['kv_transfer_slow'])}: fix it before "
                                    "anything else, then measure again"]


def _measured(ev: Evidence, t: Thresholds, fired: dict[str, Row], split: str,
              seen: str) -> tuple[str | None, list[str], Comparison | None]:
    """The action the measured goodputs decide (None: they were not both measured, or
    tie within `goodput_margin`), why, and the comparison."""
    dis = ev.disaggregated
    c, d = ev.collocated.max_goodput_rps, dis.max_goodput_rps if dis else None
    if c is None or d is None or dis is None:
        return None, [], None
    comparison = compare(ev, dis, c, d)
    action = None
    seen = f"{seen} by {ev.slo.for_share(ev.attainment)}"  # the SLO's definition named
    if d > c * (1 + t.goodput_margin) and d > 0:
        action = split
        why = [f"{seen}: {_versus('disaggregated', d, 'collocated', c)}"
               f"{_per_unit(dis, ev.collocated)}"
               f"{_ratio_span(dis, ev.collocated, ev.search_stopped)}"]
    elif c > d * (1 + t.goodput_margin) and c > 0:
        action = "fix-transfer" if "kv_transfer_slow" in fired else "stay-collocated"
        why = [f"{seen}: {_versus('collocated', c, 'disaggregated', d)}"
               f"{_per_unit(ev.collocated, dis)}"
               f"{_ratio_span(ev.collocated, dis, ev.search_stopped)}"]
    else:
        why = [f"{seen}: the goodputs are within {t.goodput_margin:.0%} ({c:.3g} vs {d:.3g} "
               "req/s): the rules decide"]
    why.append(comparison.confidence)
    behind = behind_note([ev.collocated, dis], ev.attainment, ev.workload.multi_turn)
    if behind:
        why.append(behind)
    return action, why, comparison


def _by_rule(fired: dict[str, Row], split: str) -> tuple[str, str]:
    """The first row that fired, in RULE_ORDER, decides; none: stay collocated."""
    row = next((fired[i] for i in RULE_ORDER if i in fired), None)
    if row is None:
        return "stay-collocated", "no row fired: nothing to gain from splitting"
    return (split if row.action in DISAGGREGATE else row.action), f"rule: {row.id} fired"


def _slowed(ev: Evidence, t: Thresholds, comparison: Comparison | None, action: str,
            why: list[str]) -> str:
    """Where the runs decoded slower than calibrated, say so in `why`; and where the
    goodputs are within noise besides, that noise decided: measure-first. The action."""
    slowed = slowdown_note([ev.collocated, ev.disaggregated], t)
    if not slowed:
        return action
    text, host = slowed
    if comparison is None or not comparison.confidence.startswith("within noise"):
        why.append(text + (": every figure here is from a slower host than the sizing "
                           "assumed" if host else ": its figures come from slower steps "
                           "than the sizing assumed"))
        return action
    fix = "the same sweep again on a steadier host" if host else \
        "more requests per rate (--repeats)"
    why.insert(0, text + ", and the goodputs measured are within noise of each other: the "
               f"comparison cannot be trusted. To change: {fix} (it would have said {action})")
    return "measure-first"


def _secondary(fired: dict[str, Row], action: str, blocked: bool) -> list[str]:
    """What to do besides the action: split the render tier where its row fired, fix a slow
    transfer first (the guide), measure once it is fixed where nothing met the SLO."""
    secondary = []
    if "frontend_cpu_heavy" in fired and action != "split-render-tier":
        secondary.append("split-render-tier")
    if "kv_transfer_slow" in fired and action in (*DISAGGREGATE, "measure-first"):
        secondary.append("fix-transfer")
    if blocked and action == "fix-transfer":
        secondary.append("measure-first")
    return secondary


def _ratio_span(a: PlacementEvidence, b: PlacementEvidence, stopped: str | None) -> str:
    """Where the ratio a/b of two max goodputs surely lies (from their goodput intervals),
    and, where that is no narrower than the rate grid's factor of 2, why; nothing where no
    ratio is stated (one met the SLO at no rate)."""
    if not (a.max_goodput_rps or 0) > 0 or not (b.max_goodput_rps or 0) > 0:
        return ""
    ia, ib = a.max_goodput_interval_rps, b.max_goodput_interval_rps
    if not ia or not ib or not ia[0] or not ib[0] or ib[1] is None:
        open_ = [f"{e.placement} surely met the SLO at no rate measured" for e, i in
                 ((a, ia), (b, ib)) if not i or not i[0]]
        if ib and ib[1] is None:
            open_.append(f"{b.placement} surely missed it at no rate measured above")
        return "; the ratio is not bounded: " + "; ".join(open_) + \
            (f" ({stopped})" if stopped else "")
    lo, hi = ia[0] / ib[1], (math.inf if ia[1] is None else ia[1] / ib[0])
    span = f"; the ratio lies between {lo:.2f}x and " + \
        ("any higher" if math.isinf(hi) else f"{hi:.2f}x")
    if hi / lo < RATIO_WIDTH:
        return span
    return f"{span}, no narrower than the rate grid's factor of 2: " + \
        (stopped or "no rate between the bounds measured apart from them (within noise)")


def _per_unit(a: PlacementEvidence, b: PlacementEvidence) -> str:
    """Each one's goodput and output tokens/s at it, per GPU where they hold GPUs (a plan),
    else as measured on the same cores; nothing where either met the SLO at no rate."""
    if a.output_tps_at_best is None or b.output_tps_at_best is None:
        return ""
    if a.gpus and b.gpus:
        return (f"; per GPU {(a.max_goodput_rps or 0) / a.gpus:.3g} against "
                f"{(b.max_goodput_rps or 0) / b.gpus:.3g} req/s and "
                f"{a.output_tps_at_best / a.gpus:.4g} against "
                f"{b.output_tps_at_best / b.gpus:.4g} output tok/s ({a.gpus} and "
                f"{b.gpus} GPUs)")
    return (f"; {a.output_tps_at_best:.4g} against {b.output_tps_at_best:.4g} output tok/s "
            "at those rates, on the same cores")


def _versus(a_name: str, a: float, b_name: str, b: float) -> str:
    """Two max goodputs side by side; one that met the SLO at no rate tried is said so,
    not shown as a measured 0 req/s."""
    if a > 0 and b > 0:
        return f"{a_name} sustains {a:.3g} req/s at the SLO against {b:.3g} {b_name} " \
               f"({a / b:.2f}x)"
    if a <= 0 and b <= 0:
        return f"neither {a_name} nor {b_name} met the SLO at any rate tried"
    (name, v), other = ((a_name, a), b_name) if a > 0 else ((b_name, b), a_name)
    return f"{name} sustains {v:.3g} req/s at the SLO; {other} met it at no rate tried"
