"""The plan's Pareto view: for every placement and rate simulated, output tokens/s per GPU
(what the GPUs earn) against tokens/s per user (1000 / mean TPOT: how fast each stream
reads), the frontier no other point beats on both, and the frontier point that meets the
SLO with the most goodput per GPU."""

from __future__ import annotations

from advisor.rundata.recommendation import ParetoPoint
from advisor.rundata.stats import RunStats


def points(rows: list[tuple[str, float, RunStats, int, bool]]) -> list[ParetoPoint]:
    """From (placement, rate, a run's statistics, its GPUs, whether it met the SLO) per
    run: the points, the frontier marked, and the choice marked (none where no frontier
    point meets the SLO). Runs that completed nothing or streamed one token are left out."""
    out = []
    for name, rate, stats, gpus, meets in rows:
        tpot = stats.latency_ms("tpot", "mean") or 0.0
        if tpot <= 0 or not stats.completed:
            continue
        out.append(ParetoPoint(name, rate, 1000.0 / tpot, (stats.output_throughput or 0.0) / gpus,
                               (stats.request_goodput or 0.0) / gpus, meets))
    marked = [_mark(p, out) for p in out]
    best = max((p for p in marked if p.frontier and p.meets_slo),
               key=lambda p: p.goodput_per_gpu, default=None)
    return [ParetoPoint(**{**p.__dict__, "chosen": p is best}) for p in marked]


def _mark(p: ParetoPoint, every: list[ParetoPoint]) -> ParetoPoint:
    beaten = any(q.tokens_per_s_per_user >= p.tokens_per_s_per_user
                 and q.tokens_per_s_per_gpu >= p.tokens_per_s_per_gpu
                 and (q.tokens_per_s_per_user > p.tokens_per_s_per_user
                      or q.tokens_per_s_per_gpu > p.tokens_per_s_per_gpu) for q in every)
    return ParetoPoint(**{**p.__dict__, "frontier": not beaten})


def reason(pareto: list[ParetoPoint]) -> str | None:
    """The choice in words, or why there is none."""
    chosen = next((p for p in pareto if p.chosen), None)
    if chosen is None:
        return ("simulated Pareto: no point on the frontier of tokens/s per GPU against "
                "tokens/s per user meets the SLO") if pareto else None
    return (f"simulated Pareto: of the frontier's points meeting the SLO, {chosen.placement} "
            f"at {chosen.rate_rps:g} req/s has the most goodput per GPU "
            f"({chosen.goodput_per_gpu:.3g} req/s; {chosen.tokens_per_s_per_gpu:.0f} tokens/s "
            f"per GPU at {chosen.tokens_per_s_per_user:.0f} tokens/s per user)")
