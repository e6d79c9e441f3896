"""The SLO: each objective's metric, its limit in ms and what it is judged on, parsed once
from the flags' `NAME:MS` items (`parse_slo`) and carried typed from there to the plots.
Run files hold it as objects; `Slo.from_run_file` also takes the forms older files wrote (a
list of `NAME:MS` texts; evidence's `ttft_ms`/`itl_ms` keys).

The definitions the field uses (docs/concepts/metrics.md): `ttft`, `tpot` and `e2el` judged
per request (vLLM's --goodput, DistServe); `itl` per request, on the request's own p99 gap;
`p99_itl` pooled, the p99 of every gap of the run (what `vllm bench serve` prints as p99
ITL and the guide's first row reads), met or missed by the run as a whole."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from advisor.errors import UsageError
from advisor.rundata.files import RunDataError

Metric = Literal["ttft", "tpot", "itl", "e2el"]
SLO_METRICS: tuple[Metric, ...] = get_args(Metric)
# per_request: each request's own figure: TTFT and E2E latency; TPOT (E2E - TTFT) /
# (tokens - 1), as vLLM's --goodput and DistServe judge it; ITL its own p99 gap.
# pooled (ITL only): the p99 of every gap of the run, one figure the run meets or misses
Judged = Literal["per_request", "pooled"]
PER_REQUEST: Judged = "per_request"
POOLED: Judged = "pooled"
POOLED_ITL = "p99_itl"  # the flag's name for ITL judged pooled
_DEFINED = {"ttft": "each request's TTFT", "tpot": "each request's TPOT",
            "e2el": "each request's E2E latency", "itl": "each request's own p99 gap",
            POOLED_ITL: "the p99 of all the run's gaps"}


@dataclass(frozen=True)
class Objective:
    """One objective: `metric` within `ms`, judged per request or (ITL) pooled."""

    metric: Metric
    ms: float
    judged: Judged = PER_REQUEST

    def __post_init__(self) -> None:
        if self.judged == POOLED and self.metric != "itl":
            raise ValueError(f"only itl is judged pooled, not {self.metric}")

    @property
    def name(self) -> str:
        """As the flag names it: ttft, tpot, e2el, itl (per request) or p99_itl (pooled)."""
        return POOLED_ITL if self.judged == POOLED else self.metric

    @property
    def text(self) -> str:
        """As the flag writes it: ttft:2000."""
        return f"{self.name}:{self.ms:g}"

    @property
    def defined(self) -> str:
        """What is held to the limit: "each request's TPOT"."""
        return _DEFINED[self.name]


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

    @property
    def per_request(self) -> tuple[Objective, ...]:
        """The objectives each request meets or misses on its own."""
        return tuple(o for o in self.objectives if o.judged == PER_REQUEST)

    @property
    def pooled(self) -> tuple[Objective, ...]:
        """The objectives the run meets or misses as a whole."""
        return tuple(o for o in self.objectives if o.judged == POOLED)

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
    def gap_metric(self) -> Metric:
        """The objective that holds the gaps between tokens: ITL (either judging), else
        TPOT; KeyError where the SLO has neither."""
        for metric in ("itl", "tpot"):
            if metric in self:
                return metric
        raise KeyError("itl")

    @property
    def gap_ms(self) -> float:
        """The limit on the gaps between tokens (`gap_metric`'s): what a prefill that
        stalls decodes is measured against."""
        return self.ms(self.gap_metric)

    def with_limit(self, metric: Metric, ms: float) -> Slo:
        """This SLO with `metric`'s limit set to `ms` (widened by the sizing)."""
        return Slo(tuple(replace(o, ms=ms) if o.metric == metric else o
                         for o in self.objectives))

    def with_gap(self, gap: Objective) -> Slo:
        """This SLO with `gap` in place of its gap objective (`gap_metric`'s): the same
        limits under another definition of ITL."""
        old = self.gap_metric
        return Slo(tuple(gap if o.metric == old else o for o in self.objectives))

    def definitions(self) -> list[Slo]:
        """This SLO under each definition of its gap objective the field uses, its own
        first: each request's own p99 gap, the run's pooled p99 ITL and each request's
        TPOT (vLLM's --goodput, DistServe), at the same limit."""
        ms = self.gap_ms
        own = next(o for o in self.objectives if o.metric == self.gap_metric)
        taken = {o.metric for o in self.objectives if o is not own}
        readings = (Objective("itl", ms), Objective("itl", ms, POOLED), Objective("tpot", ms))
        return [self, *(self.with_gap(o) for o in readings
                        if o != own and o.metric not in taken)]

    @property
    def text(self) -> str:
        """As the flags write it: ttft:2000 itl:50."""
        return " ".join(o.text for o in self.objectives)

    @property
    def stated(self) -> str:
        """The limits and what they hold: ttft:2000 p99_itl:50 ms (each request's TTFT;
        the p99 of all the run's gaps)."""
        return f"{self.text} ms ({'; '.join(o.defined for o in self.objectives)})"

    def for_share(self, attainment: float) -> str:
        """`stated`, for `attainment` of requests (and the pooled ones by the run)."""
        return f"{self.stated}, met by {attainment:.0%} of requests" + (
            f" ({', '.join(o.name for o in self.pooled)} by the run)" if self.pooled else "")

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
                    not in get_args(Judged) or not _positive(o.get("ms")) \
                    or (o.get("judged") == POOLED and o.get("metric") != "itl"):
                raise RunDataError(f"{where}[{i}] must be {{metric: one of "
                                   f"{', '.join(SLO_METRICS)}, ms: > 0, judged: per_request "
                                   f"or pooled (itl only)}}, not {o!r}")
            out.append(Objective(o["metric"], float(o["ms"]), o.get("judged", PER_REQUEST)))
        return _unique(out, where, RunDataError)


def parse_slo(items: Iterable[str], flag: str) -> Slo:
    """["ttft:2000", "itl:50"] (commas also split) as an SLO; UsageError naming `flag` (the
    option or file they came from) where an item is malformed or a metric given twice."""
    out = []
    for item in (p.strip() for raw in items for p in raw.split(",") if p.strip()):
        name, sep, value = item.partition(":")
        metric = "itl" if name == POOLED_ITL else next((m for m in SLO_METRICS if m == name),
                                                       None)
        if not sep or metric is None:
            raise UsageError(f"{flag} item {item!r}: expected NAME:MS with NAME one of "
                             f"{', '.join(_DEFINED)}")
        try:
            ms = float(value)
        except ValueError:
            raise UsageError(f"{flag} item {item!r}: {value!r} is not a number of ms") from None
        if not _positive(ms) or ms == float("inf"):
            raise UsageError(f"{flag} item {item!r}: the limit must be a number of ms > 0")
        out.append(Objective(metric, ms, POOLED if name == POOLED_ITL else PER_REQUEST))
    return _unique(out, flag, UsageError)


def _unique(objectives: list[Objective], where: str, error: type[UsageError]) -> Slo:
    seen = [o.metric for o in objectives]
    twice = next((o for o in objectives if seen.count(o.metric) > 1), None)
    if twice is not None:
        raise error(f"{where}: {twice.metric} given twice"
                    + (" (itl and p99_itl are two definitions of one objective: pick one)"
                       if twice.metric == "itl" else ""))
    return Slo(tuple(objectives))


def _positive(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v > 0


# the guide's: each request's TTFT within 2 s, the p99 ITL (pooled, as `vllm bench serve`
# reports it and the guide's first row reads it) within 50 ms (docs/concepts/metrics.md)
DEFAULT_SLO = Slo((Objective("ttft", 2000.0), Objective("itl", 50.0, POOLED)))
