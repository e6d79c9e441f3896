"""The SLO: each objective's metric, its limit in ms and what it is judged on, parsed once
from the flags' `NAME:MS` items (`parse_slo`) and carried typed from there to the plots.
Run files hold it as objects; `Slo.read` also takes the forms older files wrote (a list of
`NAME:MS` texts; evidence's `ttft_ms`/`itl_ms` keys)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from advisor.errors import UsageError
from advisor.rundata.files import RunDataError

Metric = Literal["ttft", "tpot", "itl", "e2el"]
SLO_METRICS: tuple[Metric, ...] = get_args(Metric)
# what a request's figure for the metric is: TTFT and E2E latency its own; TPOT (E2E - TTFT)
# / (tokens - 1), as vLLM's --goodput and DistServe judge it; ITL its own p99 gap
Judged = Literal["per_request"]
PER_REQUEST: Judged = "per_request"


@dataclass(frozen=True)
class Objective:
    """One objective: `metric` within `ms`, judged per request."""

    metric: Metric
    ms: float
    judged: Judged = PER_REQUEST

    @property
    def text(self) -> str:
        """As the flag writes it: ttft:2000."""
        return f"{self.metric}:{self.ms:g}"


@dataclass(frozen=True)
class Slo:
    """The objectives every request must meet, one per metric, in the order given."""

    objectives: tuple[Objective, ...]

    @classmethod
    def of(cls, ttft: float, itl: float, tpot: float | None = None,
           e2el: float | None = None) -> Slo:
        """TTFT and ITL within these ms (and TPOT, E2E latency where given), per request."""
        given: tuple[tuple[Metric, float | None], ...] = (
            ("ttft", ttft), ("itl", itl), ("tpot", tpot), ("e2el", e2el))
        return cls(tuple(Objective(m, float(ms)) for m, ms in given if ms is not None))

    def __contains__(self, metric: object) -> bool:
        return any(o.metric == metric for o in self.objectives)

    def __iter__(self) -> Iterator[Objective]:
        return iter(self.objectives)

    def ms(self, metric: Metric) -> float:
        """The limit on `metric`; KeyError where the SLO has none."""
        for o in self.objectives:
            if o.metric == metric:
                return o.ms
        raise KeyError(metric)

    def get(self, metric: Metric) -> float | None:
        """The limit on `metric`, None where the SLO has none."""
        return self.ms(metric) if metric in self else None

    @property
    def ttft_ms(self) -> float:
        return self.ms("ttft")

    @property
    def itl_ms(self) -> float:
        return self.ms("itl")

    def with_limit(self, metric: Metric, ms: float) -> Slo:
        """This SLO with `metric`'s limit set to `ms` (widened by the sizing)."""
        return Slo(tuple(replace(o, ms=ms) if o.metric == metric else o
                         for o in self.objectives))

    @property
    def text(self) -> str:
        """As the flags write it: ttft:2000 itl:50."""
        return " ".join(o.text for o in self.objectives)

    @property
    def stated(self) -> str:
        """The limits and what they are judged on: ttft:2000 itl:50 ms (per request; itl:
        each request's p99 gap)."""
        how = "; itl: each request's p99 gap" if "itl" in self else ""
        return f"{self.text} ms (per request{how})"

    def for_share(self, attainment: float) -> str:
        """`stated`, for `attainment` of requests."""
        return f"{self.stated}, met by {attainment:.0%} of requests"

    @classmethod
    def from_run_file(cls, value: Any, where: str) -> Slo:
        """An SLO from a run file's JSON at `where` (file: path): {"objectives": [...]} as
        dataclasses.asdict writes it, the NAME:MS texts older manifests wrote
        and older files' {metric: ms}; RunDataError naming `where` for anything else."""
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            try:
                return parse_slo(value, where)
            except UsageError as e:
                raise RunDataError(str(e)) from None
        if isinstance(value, dict) and value and set(value) <= set(SLO_METRICS):
            value = {"objectives": [{"metric": k, "ms": v} for k, v in value.items()]}
        objectives = value.get("objectives") if isinstance(value, dict) and len(value) == 1 \
            else None
        if not isinstance(objectives, list) or not objectives:
            raise RunDataError(f"{where} must be {{objectives: [...]}}, not {value!r}")
        out = []
        for i, o in enumerate(objectives):
            if not isinstance(o, dict) or set(o) - {"metric", "ms", "judged"} \
                    or o.get("metric") not in SLO_METRICS or o.get("judged", PER_REQUEST) \
                    not in get_args(Judged) or not _positive(o.get("ms")):
                raise RunDataError(f"{where}[{i}] must be {{metric: one of "
                                   f"{', '.join(SLO_METRICS)}, ms: > 0}}, not {o!r}")
            out.append(Objective(o["metric"], float(o["ms"]), o.get("judged", PER_REQUEST)))
        return _unique(out, where, RunDataError)


def parse_slo(items: Iterable[str], flag: str) -> Slo:
    """["ttft:2000", "itl:50"] (commas also split) as an SLO; UsageError naming `flag` (the
    option or file they came from) where an item is malformed or a metric given twice."""
    out = []
    for item in (p.strip() for raw in items for p in raw.split(",") if p.strip()):
        name, sep, value = item.partition(":")
        metric = next((m for m in SLO_METRICS if m == name), None)
        if not sep or metric is None:
            raise UsageError(f"{flag} item {item!r}: expected NAME:MS with NAME one of "
                             f"{', '.join(SLO_METRICS)}")
        try:
            ms = float(value)
        except ValueError:
            raise UsageError(f"{flag} item {item!r}: {value!r} is not a number of ms") from None
        if not _positive(ms) or ms == float("inf"):
            raise UsageError(f"{flag} item {item!r}: the limit must be a number of ms > 0")
        out.append(Objective(metric, ms))
    return _unique(out, flag, UsageError)


def _unique(objectives: list[Objective], where: str, error: type[UsageError]) -> Slo:
    seen = [o.metric for o in objectives]
    twice = next((m for m in seen if seen.count(m) > 1), None)
    if twice is not None:
        raise error(f"{where}: {twice} given twice")
    return Slo(tuple(objectives))


def _positive(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v > 0


# the guide's: TTFT within 2 s, every gap within 50 ms
DEFAULT_SLO = Slo.of(ttft=2000, itl=50)
