"""Whether a verdict survives the field's other SLO definitions: the same runs' per-request
records judged again under each definition of the gap objective (each request's own p99
gap, the run's pooled p99 ITL, each request's TPOT as vLLM's --goodput and DistServe judge
it; `Slo.definitions`), each placement's max goodput and interval found again, and the two
compared as the verdict compares them. Nothing is run again: a definition under which the
rates tried do not bound a goodput says so."""

from __future__ import annotations

import dataclasses
import math

from advisor.goodput.outcomes import (
    WITHIN_NOISE,
    Outcome,
    ahead,
    apart,
    goodput_interval,
    max_goodput_rate,
    outcome_of,
    top,
)
from advisor.measure.stats import parse_percentiles, summarize
from advisor.measure.workload_run import records_of
from advisor.rundata.recommendation import Rejudged
from advisor.rundata.result import RunResult
from advisor.rundata.rundir import RunDir
from advisor.rundata.slo import Slo

PERCENTILES = parse_percentiles("50,90,99")


def rejudge(run_dir: RunDir, slo: Slo, attainment: float, col: str, dis: str,
            rates: dict[str, list[float]], margin: float) -> list[Rejudged]:
    """`col` against `dis` (placement names) from their runs at `rates`, under `slo` and
    each other definition of its gap objective, `slo`'s first; goodputs within `margin`
    of each other, or whose intervals overlap, are a tie."""
    runs = {name: [(rate, run_dir.read_run(name, rate, records=True))
                   for rate in sorted(rates[name])] for name in (col, dis)}
    out = []
    for each in slo.definitions():
        # the runs were summarized under `slo` itself: read as they are
        done = {name: [outcome_of(r, rate, attainment, slo) if each == slo else
                       _outcome(r, rate, each, attainment) for rate, r in rs]
                for name, rs in runs.items()}
        out.append(_verdict(each, done[col], done[dis], margin))
    first = out[0].verdict
    return [dataclasses.replace(r, holds=r.verdict == first) for r in out]


def _outcome(result: RunResult, rate: float, slo: Slo, attainment: float) -> Outcome:
    """The run's outcome with its statistics summarized again under `slo`."""
    if result.records is None:
        return outcome_of(result, rate, attainment, slo)
    stats = summarize(records_of(result.records), result.stats.duration or 0.0, slo,
                      PERCENTILES)
    return outcome_of(dataclasses.replace(result, stats=stats), rate, attainment, slo)


def _verdict(slo: Slo, col: list[Outcome], dis: list[Outcome], margin: float) -> Rejudged:
    c, d = max_goodput_rate(col), max_goodput_rate(dis)
    ci_c, ci_d = goodput_interval(col), goodput_interval(dis)
    verdict = ahead(c, d, margin) if apart(ci_c, ci_d) else WITHIN_NOISE
    lead, other = (ci_d, ci_c) if verdict == "disaggregate" else (ci_c, ci_d)
    ratio = None if verdict == WITHIN_NOISE else \
        (lead[0] / top(other), _over(top(lead), other[0]))
    return Rejudged(slo=slo.text, defined=slo.stated, verdict=verdict,
                    collocated_rps=c, disaggregated_rps=d,
                    collocated_interval_rps=[ci_c[0], ci_c[1]],
                    disaggregated_interval_rps=[ci_d[0], ci_d[1]],
                    ratio_interval=None if ratio is None else
                    [ratio[0], None if math.isinf(ratio[1]) else ratio[1]],
                    unbounded=_unbounded(col, "collocated") + _unbounded(dis, "disaggregated"))


def _over(a: float, b: float) -> float:
    return math.inf if b <= 0 or math.isinf(a) else a / b


def _unbounded(done: list[Outcome], side: str) -> list[str]:
    """What the rates tried leave open of a placement's goodput under this definition."""
    lo, hi = goodput_interval(done)
    said = []
    if lo <= 0:
        said.append(f"{side} surely met it at no rate tried")
    if hi is None:
        highest = max((o.rate for o in done), default=0.0)
        said.append(f"{side} surely missed it at no rate tried (up to {highest:g} req/s)")
    return said
