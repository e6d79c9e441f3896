"""The guide's decision table, applied to an evidence file.

Each row is evaluated on its own and reported with the numbers and thresholds
that made it fire or not. The primary action follows the measured comparison
when both topologies were measured (the one that sustains more goodput at the
SLO wins); the rules decide only when that comparison is missing or a tie.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from advisor.decide.comparison import compare
from advisor.measure.transfer import SLOW_MS
from advisor.rundata.evidence import Evidence


@dataclass(frozen=True)
class Thresholds:
    """Named thresholds (README: "Thresholds"); every one can be overridden from the CLI."""

    long_prompt_tokens: int = (
        2048  # the guide's case is ~8k; 2k already stalls decodes for 100s of ms
    )
    high_concurrency: float = 2.0  # requests in flight: prefills then overlap running decodes
    kv_slow_ms: float = SLOW_MS  # guide: "several hundred milliseconds ... fix the transfer first"
    kv_slow_ttft_share: float = 0.25  # or a quarter of the TTFT budget spent moving KV
    frontend_cpu_share: float = 0.10  # front-end CPU over the engine host's total CPU
    ttft_binding_ratio: float = 0.8  # p99 TTFT within 20% of its SLO: TTFT is what binds
    low_concurrency: float = 1.0  # under one request in flight: nothing to interfere with
    bursty_cv: float = 2.0  # coefficient of variation of inter-arrival gaps (Poisson = 1)
    goodput_margin: float = 0.10  # measured goodputs within 10% of each other are a tie
    late_turn_ttft_cut: float = 0.20  # bidirectional P/D must cut a late turn's TTFT this much
    host_slowed: float = 1.5  # the runs' decode steps over the calibrated ones: the host slowed


@dataclass
class Row:
    id: str
    situation: str
    action: str
    fired: bool
    evidence: dict = field(default_factory=dict)
    thresholds: dict = field(default_factory=dict)
    undecided: str | None = None  # why the evidence cannot say yes or no (it did not fire)

    @property
    def verdict(self) -> str:
        return "yes" if self.fired else f"undecided: {self.undecided}" if self.undecided else "no"


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
    wl, kv = ev.workload, ev.kv_transfer
    rows = []
    p99 = col.p99_itl_ms
    rows.append(
        Row(
            "itl_p99_misses_slo",
            "ITL p99 misses its SLO under load",
            "disaggregate",
            p99 is not None and p99 > slo.itl_ms,
            {"collocated_p99_itl_ms": p99},
            {"itl_slo_ms": slo.itl_ms},
        )
    )
    prompt, conc, prefill = wl.mean_prompt_tokens, wl.concurrency, wl.prefill_ms
    long_prompt = prompt >= t.long_prompt_tokens or (prefill is not None and prefill >= slo.itl_ms)
    rows.append(
        Row(
            "long_prompts_high_concurrency",
            "long prompts at high concurrency",
            "disaggregate",
            long_prompt and conc >= t.high_concurrency,
            {"mean_prompt_tokens": prompt, "prefill_ms": prefill, "concurrency": conc},
            {
                "long_prompt_tokens": t.long_prompt_tokens,
                "or_prefill_ms_over_itl_slo": slo.itl_ms,
                "high_concurrency": t.high_concurrency,
            },
        )
    )
    rows.append(_growing_context(ev, t))
    rows.append(_frontend_heavy(ev, t))
    ttft_limit = t.ttft_binding_ratio * slo.ttft_ms
    col_ttft, dis_ttft = col.p99_ttft_ms, dis.median_ttft_ms if dis else None
    binding = (
        col_ttft is not None and col_ttft >= ttft_limit and (p99 is None or p99 <= slo.itl_ms)
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
    mean = kv.mean_ms if kv else None
    kv_limit = min(t.kv_slow_ms, t.kv_slow_ttft_share * slo.ttft_ms)
    rows.append(
        Row(
            "kv_transfer_slow",
            "KV transfer is slow",
            "fix-transfer",
            mean is not None and mean >= kv_limit,
            {"kv_transfer_mean_ms": mean, "emulated": kv.emulated if kv else None},
            {
                "kv_slow_ms": t.kv_slow_ms,
                "kv_slow_ttft_share": t.kv_slow_ttft_share,
                "slow_at_ms": kv_limit,
            },
        )
    )
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


def unreachable(ev: Evidence, t: Thresholds = Thresholds()) -> tuple[str, bool] | None:
    """Why no placement can be recommended at this SLO, naming the binding metric and its
    floor and what to change, and whether that is the floor (then nothing could be measured
    against it); None when a measurement (or the lack of one) says otherwise.

    Either the calibrated floor (one request alone) already misses the SLO, or no placement
    met it at any rate tried; then, where the runs' decode steps ran `t.host_slowed` times
    the calibrated ones or slower, that the host slowed down after its calibration.
    """
    slo = {"ttft": ev.slo.ttft_ms, "itl": ev.slo.itl_ms}
    cal = ev.calibration
    floor = cal.floors(ev.workload.mean_prompt_tokens) if cal else {}
    where = f" here in {cal.dtype}" if cal and cal.dtype else " here"
    unloaded = {"ttft": "unloaded TTFT", "itl": "the unloaded decode step"}
    fixes = {"ttft": "a looser TTFT SLO, shorter prompts (--scale)",
             "itl": "a looser ITL SLO, a smaller model"}
    measured = [p for p in (ev.collocated, ev.disaggregated)
                if p is not None and p.max_goodput_rps is not None]
    if missed := [m for m in ("ttft", "itl") if m in floor and floor[m] > slo[m]]:
        facts = [f"{m}:{slo[m]:g} is binding, {unloaded[m]} is {_ms(floor[m])}{where}"
                 for m in missed]
        head = "the SLO cannot be met even by one request alone"
        floor_missed = True
    elif measured and all(p.max_goodput_rps == 0 for p in measured):
        # each placement's worst metric against its SLO; the closest placement names it
        seen = {"ttft": ("median TTFT", "median_ttft_ms"), "itl": ("p99 ITL", "p99_itl_ms")}
        _, m, value, near = min(
            max((_num(getattr(p, seen[m][1])) / slo[m], m, getattr(p, seen[m][1]), p.placement)
                for m in slo) for p in measured)
        missed = [m]
        on = f" on {near}" if near and len(measured) > 1 else ""
        facts = [f"{m}:{slo[m]:g} is binding, {seen[m][0]} was {_ms(_num(value))} at best{on}"
                 + (f" ({unloaded[m]} is {_ms(floor[m])}{where})" if floor else "")]
        if _num(value) <= slo[m]:  # pooled it meets: the requests that miss are too many
            att = next(p.attainment_at_rate for p in measured if p.placement == near)
            facts = [f"{m}:{slo[m]:g} is binding for each request (the SLO holds per request: "
                     f"{'its own p99 gap' if m == 'itl' else 'its own TTFT'}); pooled, "
                     f"{seen[m][0]} was {_ms(_num(value))} at best{on}, but only "
                     f"{_num(att):.0%} of requests met every SLO there, under the "
                     f"{ev.slo.attainment:.0%} needed"]
        head = ("neither placement meets" if len(measured) > 1 else "no placement meets") + \
            " the SLO at any rate tried"
        floor_missed = False
        fixes = {m: f + ", lower rates (--start-rate)" for m, f in fixes.items()}
        if slowed := _slowed(measured, t):
            facts.append(slowed[0] + ": the SLO and the workload sized for it no longer fit")
            if slowed[1]:
                fixes = {m: "the same sweep again on a steadier host, " + f
                         for m, f in fixes.items()}
    else:
        return None
    change = ", ".join(fixes[m] for m in missed) + ", faster hardware or another dtype (--dtype)"
    return f"{head}: {'; '.join(facts)}. To change: {change}", floor_missed


def _growing_context(ev: Evidence, t: Thresholds) -> Row:
    """Fires on measurement, never on the workload alone: bidirectional P/D sustains more
    goodput than plain P/D, or cuts a late turn's median TTFT by `late_turn_ttft_cut`."""
    wl, dis, bid, turns = ev.workload, ev.disaggregated, ev.bidirectional, ev.turns
    evidence = {"multi_turn": wl.multi_turn}
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
    by = _by(r, c) if r > 0 else "it meets the SLO at no rate tried"
    return (f"{seen}: the render split sustains {r:.3g} req/s at the SLO against {c:.3g} "
            f"collocated ({by}): {verdict}")


def _history_warning(wl) -> str | None:
    """The guide's silent-mismatch case, found before it costs anything."""
    if not wl.multi_turn or wl.history_kept_share is None or wl.history_kept_share >= 1:
        return None
    return (f"the chat template drops {wl.history_dropped or 'part of the history'}: the next "
            f"turn starts with only {wl.history_kept_share:.0%} of the previous turn's prompt "
            "and reply, so bidirectional transfer can reuse only that much (compared by "
            "token; the rest is recomputed, where an unchecked reuse would answer wrongly)")


def _num(v: float | None) -> float:
    return float("inf") if v is None else v


def _ms(v: float) -> str:
    return f"{v / 1000:.2g} s" if v >= 1000 else f"{v:.3g} ms"


def recommend(ev: Evidence, t: Thresholds = Thresholds()) -> dict:
    """The recommendation for validated evidence: action, rows, secondary actions, reasoning.

    # NOTE: when no placement can meet the SLO, the rules never pick one: measure-first.
    """
    rows = _rows(ev, t)
    fired = {r.id: r for r in rows if r.fired}
    growing = "growing_context_loops" in fired
    split = "disaggregate-bidirectional" if growing else "disaggregate"
    if growing and ev.bidirectional is not None:  # compare collocated with the split advised
        ev = replace(ev, disaggregated=ev.bidirectional)
    action, why = None, []
    seen = "simulated" if ev.simulated else "measured"
    c = ev.collocated.max_goodput_rps
    d = ev.disaggregated.max_goodput_rps if ev.disaggregated else None
    comparison = None
    blocked = unreachable(ev, t)
    if blocked:  # never a placement: measure-first; no row is judged against a floor
        action = "measure-first"
        why.append(blocked[0])
        if blocked[1]:
            rows, fired = [], {}
        elif "kv_transfer_slow" in fired:  # the guide: fix a slow transfer before anything
            action = "fix-transfer"
            slow = fired["kv_transfer_slow"].evidence["kv_transfer_mean_ms"]
            why.append(f"the KV transfer is slow ({_ms(slow)} per transfer): fix it before "
                       "anything else, then measure again")
    elif c is not None and d is not None:
        comparison = compare(ev, c, d)
        if d > c * (1 + t.goodput_margin) and d > 0:
            action = split
            why.append(f"{seen}: disaggregated sustains {d:.3g} req/s at the SLO against "
                       f"{c:.3g} collocated ({_by(d, c)})")
        elif c > d * (1 + t.goodput_margin) and c > 0:
            action = "fix-transfer" if "kv_transfer_slow" in fired else "stay-collocated"
            why.append(f"{seen}: collocated sustains {c:.3g} req/s at the SLO against "
                       f"{d:.3g} disaggregated ({_by(c, d)})")
        else:
            why.append(f"{seen} goodputs are within {t.goodput_margin:.0%} "
                       f"({c:.3g} vs {d:.3g} req/s): the rules decide")
        why.append(comparison["confidence"])
    if action is None:
        row = next((fired[i] for i in RULE_ORDER if i in fired), None)
        if row is None:
            action = "stay-collocated"
            why.append("no row fired: nothing to gain from splitting")
        else:
            action = split if row.action in DISAGGREGATE else row.action
            why.append(f"rule: {row.id} fired")
    if (warning := _history_warning(ev.workload)) is not None:
        why.append(warning)
    if not blocked and (slowed := _slowed([ev.collocated, ev.disaggregated], t)):
        text, host = slowed
        if comparison is None or not comparison["confidence"].startswith("within noise"):
            why.append(text + (": every figure here is from a slower host than the sizing "
                               "assumed" if host else ": its figures come from slower steps "
                               "than the sizing assumed"))
        else:  # NOTE: slower than calibrated and a difference within noise: that noise decided
            fix = "the same sweep again on a steadier host" if host else \
                "more requests per rate (--repeats)"
            why.insert(0, text + ", and the goodputs measured are within noise of each "
                       f"other: the comparison cannot be trusted. To change: {fix} (it would "
                       f"have said {action})")
            action = "measure-first"
    front = next(r for r in rows if r.id == "frontend_cpu_heavy") if rows else None
    if front is not None and (gain := _render_split_reason(front, seen)) is not None:
        why.append(gain)
    secondary = []
    if "frontend_cpu_heavy" in fired and action != "split-render-tier":
        secondary.append("split-render-tier")
    if "kv_transfer_slow" in fired and action in (*DISAGGREGATE, "measure-first"):
        secondary.append("fix-transfer")  # the guide: fix a slow transfer before anything else
    if blocked and action == "fix-transfer":
        secondary.append("measure-first")  # nothing met the SLO: measure once it is fixed
    return {
        "action": action,
        "reasons": why,
        "secondary_actions": secondary,
        "comparison": comparison,
        "rows": [{**asdict(r), "verdict": r.verdict} for r in rows],
        "thresholds": asdict(t),
        "judged_at": ev.judged_at,
        "calibration": ev.calibration.summary() if ev.calibration else None,
        "simulated": ev.simulated,
    }


def _slowed(sides: list, t: Thresholds) -> tuple[str, bool] | None:
    """Where a placement's runs decoded `t.host_slowed` times slower than calibrated or
    more: what to say, naming the slowest, and whether the host as a whole slowed down
    (every placement measured did); None otherwise.

    # NOTE: one placement alone slowed is not the host: on 2 cores a P/D decoder ran
    # 1.4-2.0x its calibrated step beside its busy prefiller in six sweeps here (held to
    # AVX2) while collocated's replicas ran at 1.0-1.3x, and "the host slowed down" sent
    # the user to a steadier host that would have measured the same."""
    known = sorted((p.slowdown, p.placement) for p in sides if p is not None and p.slowdown)
    if not known or known[-1][0] < t.host_slowed:
        return None
    (worst, name), (least, other) = known[-1], known[0]
    if least >= t.host_slowed:
        return (f"the host slowed down after its calibration: at its lowest rate, {name}'s "
                f"decode steps took {worst:.1f}x the calibrated ones"), True
    return (f"{name}'s engines ran slower than the calibrated one: at their lowest rates its "
            f"decode steps took {worst:.1f}x the calibrated ones, {other}'s {least:.1f}x "
            "(its decoder shares this host's cores and memory with busier neighbours, or "
            "the host slowed while it ran)"), False


def _by(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "the other meets the SLO at no rate tried"


def fmt(v) -> str:
    """One value as reports and the console show it: "-" when missing, 3 significant
    digits for floats."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def fmt_items(d: dict | None) -> str:
    """ "key=value, ..." of a dict's present values (a decision row's evidence or thresholds)."""
    return ", ".join(f"{k}={fmt(v)}" for k, v in (d or {}).items() if v is not None)
