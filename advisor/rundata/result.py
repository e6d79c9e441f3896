"""One measured run: `result.json` (vLLM's statistics keys, plus ours) and `requests.jsonl`
(one record per request). Written by `advisor bench --result-dir` and by the sweep for
every placement x rate; read by the sweep's evidence and by the reports."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, cast

from advisor.rundata.files import (
    RunDataError,
    json_line,
    read_json_object,
    write_json,
    write_jsonl,
)
from advisor.rundata.stats import RunStats
from advisor.rundata.typed_json import from_json

RESULT, RECORDS = "result.json", "requests.jsonl"
PROCESS_CPU = "process_cpu_seconds_total"  # the instances' CPU, among a run's metrics
# What `advisor bench` adds about how it was run (vLLM's names), kept as they are.
BENCH_KEYS = ("burstiness", "max_concurrency", "endpoint_type", "model_id", "base_url",
              "percentiles", "max_send_lateness_ms", "manifest")
# NOTE: a run whose placement completed requests at under this share of the rate they
# arrived at (`RunResult.pace`) did not sustain that rate, whatever its attainment: its
# queue grew, and a longer run would have missed the SLO.
KEEP_PACE = 0.85
# workload_params key: the run is a benchmark of a set number of prompts (as a publication
# ran it), judged on what it served: its pace without the share of the rate's load
AS_RUN = "judged_as_run"


@dataclass(frozen=True)
class _Described:
    """result.json's fields that say what ran (validated on read)."""

    num_prompts: int
    request_rate: float | str | None = None  # req/s; "inf" (all at once); None: the workload's own
    workload: str | None = None
    workload_params: dict[str, Any] = field(default_factory=dict)
    topology: str | None = None  # a sweep's placement (its directory name)
    kind: str | None = None  # collocated | disagg
    emulated: str | None = None  # an emulated KV link's spec
    multi_turn: bool = False
    arrival_offsets: list[float] = field(default_factory=list)  # each conversation's start, s
    # front-end CPU seconds during the run (render, derender)
    frontend_cpu: dict[str, float] | None = None
    client_cpu_s: float | None = None  # the measuring client's CPU seconds during the run
    # whether the client kept up with its own run (advisor.measure.selfcheck); None: not
    # recorded (a simulated run, or one from before)
    client_check: dict[str, Any] | None = None
    # what the instances' counters did in the run (prom.Sample)
    metrics: dict[str, Any] | None = None
    simulated: str | None = None  # not measured: what predicted it (advisor plan)
    imported: str | None = None  # measured by another tool: which, and from which file


@dataclass
class RunResult:
    """A run's statistics (`stats`), what ran (`described`), `advisor bench`'s own extras,
    and (when read with them) the per-request records."""

    stats: RunStats
    described: _Described
    bench: dict[str, Any] = field(default_factory=dict)
    records: list[dict[str, Any]] | None = None

    @classmethod
    def of(cls, stats: RunStats, records: list[dict[str, Any]] | None = None,
           bench: dict[str, Any] | None = None,
           **described: Any) -> RunResult:
        """A new result from summarize()'s statistics and what ran (num_prompts, ...)."""
        return cls(stats, _Described(**described), bench or {}, records)

    @property
    def placement(self) -> str | None:
        return self.described.topology

    @property
    def kind(self) -> str | None:
        return self.described.kind

    @property
    def rate(self) -> float | None:
        r = self.described.request_rate
        return float(r) if r is not None else None

    @property
    def emulated(self) -> str | None:
        return self.described.emulated

    def cores_busy(self) -> tuple[float | None, float | None]:
        """CPU cores kept busy over the run: (by the instances, from the process CPU counters
        in their metrics; by the measuring client), None where not recorded."""
        seconds = self.get("duration") or 0.0
        engines = ((self.described.metrics or {}).get("values") or {}).get(PROCESS_CPU)
        client = self.described.client_cpu_s
        engines_busy, client_busy = (None if s is None or seconds <= 0 else s / seconds
                                     for s in (engines, client))
        return engines_busy, client_busy

    def client_bound(self) -> str | None:
        """Why the measuring client was this run's bottleneck (its figures are then the
        client's, and no decision rests on it), or None."""
        check = self.described.client_check
        bound = check.get("bound") if isinstance(check, dict) else None
        return bound if isinstance(bound, str) else None

    def pace(self) -> float | None:
        """How fast the run's requests completed against how fast they arrived (their own
        draw, not the nominal rate), allowing the one request lifetime after the last
        arrival that a placement keeping up still takes (`early_e2el_ms`): near 1 when it
        kept up, lower the more its queue grew:
        completed x (span + lifetime) / ((arrivals - 1) x (end - first arrival));
        and at most the share of the rate's load the run ever carried: the most requests
        it had under way at once against the number the rate keeps under way (the rate x
        their median lifetime, Little's law; the nominal rate, so that a chance burst in a
        short draw is not taken for the rate), since a run of too few requests for its rate
        and their length never builds that load, however fast they are served; all at once
        ("inf"): its draw's rate. None under two arrivals; without the load's share for a
        run recorded before it was, or one of no stated rate.

        Multi-turn: the same over conversations (a later turn waits on the one before, so
        turns arrive at no rate of their own; conversations per second: the rate over the
        turns each). None for one recorded before those statistics were.

        A run marked `AS_RUN` (a benchmark of so many prompts, as published) is judged on
        what it served: its completions' pace alone."""
        offsets = self.described.arrival_offsets
        window = (self.get("duration") or 0.0) - (offsets[0] if offsets else 0.0)
        if len(offsets) < 2 or offsets[-1] <= offsets[0] or window <= 0:
            return None
        span, multi = offsets[-1] - offsets[0], self.described.multi_turn
        if multi:
            done, early = self.get("completed_conversations"), self.get("early_conversation_ms")
            life, peak = self.get("conversation_life_ms"), self.get("peak_conversations")
            if life is None or early is None or peak is None:
                return None
            per_s = (self.rate or 0.0) * len(offsets) / self.described.num_prompts
        else:
            done, early = self.get("completed"), self.get("early_e2el_ms") or 0.0
            life, peak = self.get("request_life_ms"), self.get("peak_requests")
            rate = self.rate or 0.0
            per_s = rate if math.isfinite(rate) else (len(offsets) - 1) / span
        kept = done * (span + early / 1000) / ((len(offsets) - 1) * window)
        steady = per_s * (life or 0.0) / 1000  # under way at once at the rate
        if self.described.workload_params.get(AS_RUN):
            return cast("float | None", kept)
        return cast("float | None", min(kept,
                    peak / steady) if peak is not None and steady > 0 else kept)

    def host_cores_busy(self) -> float | None:
        """The instances' cores busy plus the client's where recorded (at least what the
        run kept busy); None when the instances' CPU was not recorded."""
        engines, client = self.cores_busy()
        return None if engines is None else engines + (client or 0.0)

    def get(self, key: str, default: Any = None) -> Any:
        """A statistic or a described field by its result.json name."""
        value = self.stats.get(key)
        if value is not None:
            return value
        return getattr(self.described, key, default) if key in _DESCRIBED else default

    def shown(self, key: str) -> Any:
        """`get(key)` as the advice, the summary and the reports show it: a latency (..._ms)
        is None where no request completed (vLLM's statistics, kept as they are in
        result.json, read 0 ms there)."""
        return None if key.endswith("_ms") and self.get("completed") == 0 else self.get(key)

    def to_json(self) -> dict[str, Any]:
        """result.json's object: one flat namespace, as vLLM writes it."""
        described = {f: getattr(self.described, f) for f in _DESCRIBED}
        return {**self.stats.to_json(), **described, **self.bench}

    def write(self, directory: Path) -> None:
        """requests.jsonl, then result.json, each atomically: result.json's presence marks
        the run complete (a resumed sweep re-runs what lacks it)."""
        write_jsonl(directory / RECORDS, self.records or [])
        write_json(directory / RESULT, self.to_json())

    @classmethod
    def read(cls, directory: Path, records: bool = False,
             problems: list[str] | None = None) -> RunResult:
        """The run in `directory`. RunDataError names the file and field when result.json is
        missing or malformed; corrupt record lines are skipped and, given `problems`, listed
        there (else an error too)."""
        path = directory / RESULT
        data = read_json_object(path)
        described = from_json(_Described, {k: data[k] for k in _DESCRIBED if k in data}, str(path))
        bench = {k: data[k] for k in BENCH_KEYS if k in data}
        stats = RunStats.from_json({k: v for k, v in data.items()
                                    if k not in _DESCRIBED and k not in BENCH_KEYS}, str(path))
        rows = _records(directory / RECORDS, problems) if records else None
        return cls(stats, described, bench, rows)


_DESCRIBED = tuple(f.name for f in fields(_Described))


def _records(path: Path, problems: list[str] | None) -> list[dict[str, Any]]:
    where = "/".join(path.parts[-3:])
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        if problems is None:
            raise RunDataError(f"cannot read {path}: {e}") from None
        problems.append(f"{where} unreadable: {e}")
        return []
    rows = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        row = json_line(line)
        if not isinstance(row, dict):
            if problems is None:
                raise RunDataError(f"{path}: line {no} is not a JSON object")
            problems.append(f"{where} line {no} is corrupt and was skipped")
            continue
        rows.append(row)
    return rows
