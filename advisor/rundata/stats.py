"""A run's statistics, typed (advisor.measure.stats.summarize makes them). result.json keeps
vLLM's flat keys (completed, request_goodput, mean_/median_/std_/pNN_ + metric + _ms, ...),
which `RunStats.to_json` writes and `RunStats.from_json` reads back, older files included:
a statistic a file lacks reads as None."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from advisor.rundata.files import RunDataError
from advisor.rundata.slo import Slo
from advisor.rundata.typed_json import from_json, to_json_value

METRICS = ("ttft", "tpot", "itl", "e2el")
_LATENCY = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")
PER_TURN = "per_turn"


@dataclass(frozen=True)
class Latency:
    """One metric's statistics over a run, in ms."""

    mean: float
    median: float
    std: float
    percentiles: dict[str, float] = field(default_factory=dict)  # "p99" -> ms, as vLLM names

    def get(self, stat: str) -> float | None:
        """mean, median, std or pNN by name."""
        if stat in ("mean", "median", "std"):
            return float(getattr(self, stat))
        return self.percentiles.get(stat)


@dataclass(frozen=True)
class TurnStats:
    """One turn index of a multi-turn run (advisor.measure.stats.per_turn)."""

    turn: int
    requests: int
    failed: int
    median_ttft_ms: float | None = None
    p90_ttft_ms: float | None = None
    mean_prompt_tokens: float | None = None
    mean_reused_tokens: float | None = None
    mean_computed_tokens: float | None = None
    mean_kv_transfer_ms: float | None = None


@dataclass(frozen=True)
class Intervals:
    """95% bootstrap intervals [low, high] (None where nothing completed)."""

    slo_attainment: list[float] | None = None
    median_ttft_ms: list[float] | None = None
    p99_itl_ms: list[float] | None = None


@dataclass(frozen=True)
class RunStats:
    """What summarize says of a run's requests. Latencies are in `latency` by metric; a
    statistic an older result.json lacks is None."""

    completed: int
    failed: int
    slo_attainment: float
    num_requests: int | None = None
    duration: float | None = None
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    output_tokens_from_usage: int | None = None
    request_throughput: float | None = None
    output_throughput: float | None = None
    total_token_throughput: float | None = None
    request_goodput: float | None = None
    good_requests: int | None = None
    goodput_slos: Slo | None = None  # what a good request met (None: not judged)
    latency: dict[str, Latency] = field(default_factory=dict)  # metric -> its statistics
    per_turn: list[TurnStats] | None = None  # multi-turn runs
    # multi-turn: conversations' median lifetime, its first fifth's, how many completed
    # every turn and the most under way at once
    conversation_life_ms: float | None = None
    early_conversation_ms: float | None = None
    completed_conversations: int | None = None
    peak_conversations: int | None = None
    # the pace figures (RunResult.pace): the first fifth's median E2E latency; single-turn,
    # the requests' median lifetime and the most under way at once
    early_e2el_ms: float | None = None
    request_life_ms: float | None = None
    peak_requests: int | None = None
    ci95: Intervals | None = None

    def get(self, key: str) -> Any:
        """A statistic by its result.json name (median_ttft_ms, completed, ...); None where
        this run has none."""
        m = _LATENCY.match(key)
        if m:
            lat = self.latency.get(m.group(2))
            return lat.get(m.group(1)) if lat is not None else None
        if key in _FIELDS and key != "latency":
            return getattr(self, key)
        return None

    def __getitem__(self, key: str) -> Any:
        """`get`, by vLLM's result key; KeyError where this run has no such statistic."""
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def latency_ms(self, metric: str, stat: str) -> float | None:
        """`stat` (mean, median, std, pNN) of `metric` (ttft, tpot, itl, e2el), in ms."""
        lat = self.latency.get(metric)
        return lat.get(stat) if lat is not None else None

    def to_json(self) -> dict[str, Any]:
        """result.json's statistics: vLLM's flat keys, then ours; None left out but for
        the pace's first-fifth latency, which says none completed early."""
        out: dict[str, Any] = {}
        for name in _FIELDS:
            value = getattr(self, name)
            if name == "latency":
                for metric, lat in value.items():
                    out.update({f"mean_{metric}_ms": lat.mean, f"median_{metric}_ms": lat.median,
                                f"std_{metric}_ms": lat.std})
                    out.update({f"{p}_{metric}_ms": v for p, v in lat.percentiles.items()})
            elif value is not None or name == "early_e2el_ms":
                out[name] = to_json_value(value)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], file: str) -> RunStats:
        """The statistics among result.json's keys `data` (what ran and bench's extras
        taken out); RunDataError naming the file and field where one is malformed."""
        flat: dict[str, Any] = {}
        latency: dict[str, dict[str, Any]] = {}
        for k, v in data.items():
            m = _LATENCY.match(k)
            if m:
                if not isinstance(v, (int, float)) or isinstance(v, bool):
                    raise RunDataError(f"{file}: {k} must be a number, not {v!r}")
                stat, metric = m.groups()
                latency.setdefault(metric, {"percentiles": {}})
                if stat in ("mean", "median", "std"):
                    latency[metric][stat] = v
                else:
                    latency[metric]["percentiles"][stat] = v
            elif k in _FIELDS and k != "latency":
                flat[k] = v
            elif not (isinstance(v, (int, float, dict)) or v is None) or isinstance(v, bool):
                raise RunDataError(f"{file}: {k} must be a number, not {v!r}")
        if flat.get("goodput_slos") == {}:  # older files' form of no SLO
            flat["goodput_slos"] = None
        for k in ("completed", "failed", "slo_attainment"):
            if flat.get(k) is None:
                raise RunDataError(f"{file}: missing field {k!r}")
        if PER_TURN in flat and not _turns_ok(flat[PER_TURN]):
            raise RunDataError(f"{file}: {PER_TURN} must be a list of per-turn statistics")
        flat["latency"] = {m: {"mean": 0.0, "median": 0.0, "std": 0.0, **v}
                           for m, v in latency.items()}
        return from_json(cls, _numbers(flat), file)


_FIELDS = tuple(f.name for f in dataclasses.fields(RunStats))


def _numbers(flat: dict[str, Any]) -> dict[str, Any]:
    """Counts that older files wrote as floats (2.0) read as the integers they are."""
    ints = ("completed", "failed", "num_requests", "total_input_tokens", "total_output_tokens",
            "output_tokens_from_usage", "good_requests", "completed_conversations",
            "peak_conversations", "peak_requests")
    return {k: int(v) if k in ints and isinstance(v, float) and v.is_integer() else v
            for k, v in flat.items()}


def _turns_ok(v: Any) -> bool:
    """per_turn: a list of objects of numbers (or null), each with its turn index."""
    return isinstance(v, list) and all(
        isinstance(t, dict) and isinstance(t.get("turn"), int) and all(
            x is None or (isinstance(x, (int, float)) and not isinstance(x, bool))
            for x in t.values()) for t in v)
