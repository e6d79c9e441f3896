"""The two placements' max goodputs side by side: "confident" only when their intervals
do not overlap; otherwise "within noise", with how many requests per rate would separate
them."""

from __future__ import annotations

from functools import partial

from advisor.measure.confidence import requests_to_separate
from advisor.rundata.evidence import Evidence, PlacementEvidence
from advisor.rundata.recommendation import Comparison


def compare(ev: Evidence, dis: PlacementEvidence, c: float, d: float) -> Comparison:
    """Collocated's and `dis`'s max goodputs (`c`, `d`), their intervals, and whether
    those separate them: "confident" only when the intervals do not overlap; otherwise how
    many requests per rate would separate the attainments at the judged rate."""
    col = ev.collocated
    ci_c, ci_d = col.max_goodput_interval_rps, dis.max_goodput_interval_rps
    said = partial(Comparison, c, d, d / c if c > 0 else None, ci_c, ci_d)
    if not (ci_c and ci_d):
        return said(False, "no goodput intervals in this evidence: confidence unknown")
    confident = (ci_d[0] or 0.0) >= _top(ci_c) or (ci_c[0] or 0.0) >= _top(ci_d)
    shown = f"intervals {_interval(ci_c)} collocated and {_interval(ci_d)} disaggregated"
    if confident and c != d:
        return said(True, f"confident: the goodput {shown} do not overlap")
    more = ""
    if col.attainment_ci and dis.attainment_ci and col.requests_at_rate:
        more = _what_would_separate(col, dis, ev.attainment)
    stopped = f"; {ev.search_stopped}" if ev.search_stopped else ""
    return said(confident, f"within noise: the goodput {shown} overlap{more}{stopped}")


def _top(ci: list[float | None]) -> float:
    return float("inf") if ci[1] is None else ci[1]


def _what_would_separate(col: PlacementEvidence, dis: PlacementEvidence, target: float
                         ) -> str:
    """How many requests per rate would separate the placements at the judged rate: their
    attainments, or, where those are apart already, a placement's attainment from the
    target (its interval holds the target, so its max goodput may lie on either side)."""
    known = [_attainment(p) for p in (col, dis)]
    if col.requests_at_rate is None or known[0] is None or known[1] is None:
        return ""
    (att_c, ci_c), (att_d, ci_d) = known[0], known[1]
    n = requests_to_separate(col.requests_at_rate, att_c, ci_c, att_d, ci_d)
    if not n:
        return f"; their attainments at {col.rate_rps:g} req/s are equal"
    if n > col.requests_at_rate:
        return (f"; about {n} requests per rate (now {col.requests_at_rate}) would separate "
                f"their attainments at {col.rate_rps:g} req/s")
    unsure = [(requests_to_separate(p.requests_at_rate or col.requests_at_rate, att, ci,
                                    target, [target, target]), name, p, att, ci)
              for name, p, (att, ci) in (("collocated", col, known[0]),
                                         ("disaggregated", dis, known[1]))
              if ci[0] < target <= ci[1]]
    if not unsure:
        return ""
    n, name, p, att, ci = max(unsure, key=lambda u: u[0])
    said = (f"; their attainments at {col.rate_rps:g} req/s are apart, but {name}'s "
            f"({att:.2f}, interval [{ci[0]:.2f}, {ci[1]:.2f}]) holds the {target:g} target")
    if not n:  # on the target itself: more requests narrow it around the target
        return (said + ": it lies on the target itself, so no number of requests at that "
                "rate would tell; a rate either side would")
    return said + (f": about {n} requests per rate (now {p.requests_at_rate}) would tell "
                   "whether it meets it")


def _attainment(p: PlacementEvidence) -> tuple[float, list[float]] | None:
    """`p`'s attainment at the judged rate and its interval, where both are known."""
    if p.attainment_at_rate is None or p.attainment_ci is None:
        return None
    return p.attainment_at_rate, p.attainment_ci


def _interval(ci: list[float | None]) -> str:
    return f"[{ci[0]:g}, {ci[1]:g}] req/s" if ci[1] is not None else f"[{ci[0]:g} req/s, unbounded)"
