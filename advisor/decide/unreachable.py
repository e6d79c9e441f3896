"""Why no placement can be recommended (the SLO's floor, or nothing met it at any rate),
and whether the runs decoded slower than calibrated: the facts that turn the decision table
into `measure-first`, or put a caveat on what it says."""

from __future__ import annotations

from collections.abc import Sequence

from advisor.decide.thresholds import Thresholds
from advisor.rundata.evidence import Evidence, PlacementEvidence
from advisor.rundata.formatting import fmt_ms
from advisor.rundata.slo import Metric


def unreachable(ev: Evidence, t: Thresholds = Thresholds()) -> tuple[str, bool] | None:
    """Why no placement can be recommended at this SLO, naming the binding metric and its
    floor and what to change, and whether that is the floor (then nothing could be measured
    against it); None when a measurement (or the lack of one) says otherwise.

    Either the calibrated floor (one request alone) already misses the SLO, or no placement
    met it at any rate tried; then, where the runs' decode steps ran `t.host_slowed` times
    the calibrated ones or slower, that too (`slowdown_note`).
    """
    slo = ev.slo
    cal = ev.calibration
    floor = cal.floors(ev.workload.mean_prompt_tokens) if cal else {}
    where = f" here in {cal.dtype}" if cal and cal.dtype else " here"
    gap = slo.gap_metric
    binding: tuple[Metric, ...] = ("ttft", gap)  # what the unloaded floor can miss
    unloaded = {"ttft": "unloaded TTFT", gap: "the unloaded decode step"}
    fixes = {"ttft": "a looser TTFT SLO, shorter prompts (--scale)",
             gap: f"a looser {gap.upper()} SLO, a smaller model"}
    measured = [p for p in (ev.collocated, ev.disaggregated)
                if p is not None and p.max_goodput_rps is not None]
    missed: list[Metric] = [m for m in binding if m in floor and floor[m] > slo.ms(m)]
    if missed:
        facts = [f"{m}:{slo.ms(m):g} is binding, {unloaded[m]} is {fmt_ms(floor[m])}{where}"
                 for m in missed]
        head = "the SLO cannot be met even by one request alone"
        floor_missed = True
    elif measured and all(p.max_goodput_rps == 0 and _none_done(p) for p in measured):
        return ("every request failed at the rates judged, so no latency was measured: "
                + failed_text(measured)
                + ". To change: what the failure names (requests the deployment takes: "
                "--scale, --output-scale, --workload; the model it serves: --model; "
                "--api-key), then measure again"), False
    elif measured and all(p.max_goodput_rps == 0 for p in measured):
        # each placement's worst metric against its SLO; the closest placement names it
        # the nearest figure the evidence holds: a TPOT is a request's mean gap
        seen = {"ttft": ("median TTFT", "median_ttft_ms"),
                gap: ("p99 ITL", "p99_itl_ms") if gap == "itl" else ("median ITL", "p50_itl_ms")}
        _, m, value, near = min(
            max((_num(getattr(p, seen[m][1])) / slo.ms(m), m, getattr(p, seen[m][1]), p.placement)
                for m in binding) for p in measured)
        missed = [m]
        on = f" on {near}" if near and len(measured) > 1 else ""
        objective = next(o for o in slo if o.metric == m)
        facts = [f"{objective.text} is binding, {seen[m][0]} was {fmt_ms(_num(value))} at "
                 f"best{on}" + (f" ({unloaded[m]} is {fmt_ms(floor[m])}{where})" if floor else "")]
        if _num(value) <= slo.ms(m) and objective.judged == "per_request":
            # pooled it meets: the requests that miss are too many
            att = next(p.attainment_at_rate for p in measured if p.placement == near)
            facts = [f"{objective.text} is binding for each request (the SLO holds per "
                     f"request: {objective.defined}); pooled, "
                     f"{seen[m][0]} was {fmt_ms(_num(value))} at best{on}, but only "
                     f"{_num(att):.0%} of requests met every SLO there, under the "
                     f"{ev.attainment:.0%} needed"]
        head = ("neither placement meets" if len(measured) > 1 else "no placement meets") + \
            " the SLO at any rate tried"
        floor_missed = False
        fixes = {m: f + ", lower rates (--start-rate)" for m, f in fixes.items()}
        if kept := behind_facts(measured, ev.attainment, ev.workload.multi_turn):
            facts = [kept]
            fixes = dict.fromkeys(missed, "lower rates (--start-rate)")
        if failed := [p for p in measured if p.failed_at_rate]:
            facts.append(failed_text(failed) + ", each counted as a miss")
        if slowed := slowdown_note(measured, t):
            facts.append(slowed[0] + ": the SLO and the workload sized for it no longer fit")
            if slowed[1]:
                fixes = {m: "the same sweep again on a steadier host, " + f
                         for m, f in fixes.items()}
    else:
        return None
    change = ", ".join(fixes[m] for m in missed) + ", faster hardware or another dtype (--dtype)"
    return f"{head}: {'; '.join(facts)}. To change: {change}", floor_missed


def slowdown_note(sides: Sequence[PlacementEvidence | None],
                  t: Thresholds) -> tuple[str, bool] | None:
    """Where a placement's runs decoded `t.host_slowed` times slower than calibrated or
    more: what to say, naming the slowest, and whether the host as a whole slowed down
    (every placement measured did); None otherwise. One placement alone slowed is not the
    host: the placements run minutes apart, each on cores it shares with the proxy and the
    client, and "the host slowed down" would send the user to a steadier host that may
    measure the same."""
    known = sorted((p.slowdown, p.placement) for p in sides if p is not None and p.slowdown)
    if not known or known[-1][0] < t.host_slowed:
        return None
    (worst, name), (least, other) = known[-1], known[0]
    if least >= t.host_slowed:
        return (f"the host slowed down after its calibration: at its lowest rate, {name}'s "
                f"decode steps took {worst:.1f}x the calibrated ones"), True
    return (f"{name}'s engines ran slower than the calibrated one: at their lowest rates its "
            f"decode steps took {worst:.1f}x the calibrated ones, {other}'s {least:.1f}x "
            "(its engines share this host's cores with the other engines, the proxy and "
            "the client, or the host slowed while it ran)"), False


def behind_facts(sides: Sequence[PlacementEvidence | None], target: float,
                 multi_turn: bool = False) -> str | None:
    """Each placement that met the attainment `target` at a rate it could not keep up with
    (advisor.rundata.result.KEEP_PACE; for `multi_turn` runs, over conversations), with the
    rate and its pace; None if none did."""
    how = "its conversations carried {:.2f} of the rate's load" if multi_turn else \
        "it carried {:.2f} of the rate's load"
    said = [f"{p.placement} at {rate:g} req/s ({att:.0%} met the SLO, but {how.format(pace)})"
            for p in sides if p is not None and p.fell_behind
            for rate, pace, att in [p.fell_behind] if att is not None and att >= target]
    why = (": fewer were under way at once than that rate keeps, or it fell behind them, so "
           "the server never saw that rate (more requests per rate: --num-prompts)"
           if multi_turn else ": its queue was still growing when the run ended (a longer "
           "run would have missed the SLO), or fewer were under way at once than that rate "
           "keeps (more requests per rate would show that load: --num-prompts)")
    return "; ".join(said) + why if said else None


def behind_note(sides: Sequence[PlacementEvidence | None], target: float,
                multi_turn: bool = False) -> str | None:
    """Where a placement met the attainment `target` at a rate it could not keep up with:
    what to say (that rate counted as a miss); None otherwise."""
    facts = behind_facts(sides, target, multi_turn)
    return f"counted as missing the SLO, though enough of their requests met it: {facts}" \
        if facts else None


def failed_text(sides: Sequence[PlacementEvidence]) -> str:
    """How many requests failed on each of `sides` at its judged rate, and why."""
    return "; ".join(f"{p.placement}: {p.failed_at_rate} of {p.requests_at_rate} requests "
                     f"failed at {p.rate_rps:g} req/s ({p.error})" for p in sides)


def _none_done(p: PlacementEvidence) -> bool:
    """Whether every request of placement evidence `p` failed at its judged rate."""
    failed = p.failed_at_rate or 0
    return failed > 0 and failed >= (p.requests_at_rate or 0)


def _num(v: float | None) -> float:
    return float("inf") if v is None else v
