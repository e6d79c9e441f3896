"""Request traces: Mooncake JSONL, Azure LLM inference CSV and BurstGPT CSV, in and out.

Every format becomes a list of TraceRow (seconds from the first request, input
and output lengths, and Mooncake's `hash_ids`: ids of shared 512-token prefix
blocks). A bad row raises ValueError naming the file and row.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workloads.spec import DEFAULT_VOCAB, Conversation, Turn, Workload

MOONCAKE_BLOCK = 512
FORMATS = ("mooncake", "azure", "burstgpt")


@dataclass(frozen=True)
class TraceRow:
    timestamp: float  # seconds since the trace's first request
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] = ()


def detect_format(path: Path) -> str:
    """mooncake for .jsonl/.json, else the CSV dialect its header names."""
    if path.suffix in (".jsonl", ".json"):
        return "mooncake"
    with open(path, newline="") as f:
        header = f.readline()
    if "ContextTokens" in header:
        return "azure"
    if "Request tokens" in header:
        return "burstgpt"
    raise ValueError(f"{path}: not a Mooncake, Azure or BurstGPT trace (header {header.strip()!r})")


def load(path: str | Path, fmt: str | None = None, time_scale: float = 1.0,
         max_requests: int | None = None, max_duration_s: float | None = None) -> list[TraceRow]:
    """Read a trace; timestamps are multiplied by `time_scale`, then the trace is truncated."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"trace file {path} does not exist")
    fmt = fmt or detect_format(path)
    if fmt not in FORMATS:
        raise ValueError(f"unknown trace format {fmt!r}; one of {', '.join(FORMATS)}")
    rows = {"mooncake": _load_mooncake, "azure": _load_azure, "burstgpt": _load_burstgpt}[fmt](path)
    if not rows:
        raise ValueError(f"{path}: the trace has no requests")
    t0 = min(r.timestamp for r in rows)
    rows = sorted((TraceRow((r.timestamp - t0) * time_scale, r.input_length, r.output_length,
                            r.hash_ids) for r in rows), key=lambda r: r.timestamp)
    if max_duration_s is not None:
        rows = [r for r in rows if r.timestamp <= max_duration_s]
    return rows[:max_requests]


def _checked(path: Path, row_no: int, ts: Any, inp: Any, out: Any,
             hashes: Iterable[Any] = ()) -> TraceRow:
    try:
        row = TraceRow(float(ts), int(inp), int(out), tuple(int(h) for h in hashes))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: row {row_no}: {e}") from None
    if row.input_length < 1 or row.output_length < 1 or not np.isfinite(row.timestamp):
        raise ValueError(f"{path}: row {row_no}: lengths must be >= 1 and the time finite")
    return row


def _load_mooncake(path: Path) -> list[TraceRow]:
    rows = []
    with open(path) as f:
        for no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                rows.append(_checked(path, no, d["timestamp"] / 1000.0, d["input_length"],
                                     d["output_length"], d.get("hash_ids", [])))
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(f"{path}: row {no}: {type(e).__name__}: {e}") from None
    return rows


def _read_csv(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
    return df


def _load_azure(path: Path) -> list[TraceRow]:
    df = _read_csv(path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens"))
    stamps = pd.to_datetime(df["TIMESTAMP"], errors="coerce", format="mixed")
    t0 = stamps.min()
    rows = []
    for i, (ts, a, b) in enumerate(zip(stamps, df["ContextTokens"], df["GeneratedTokens"])):
        if pd.isna(ts):
            raise ValueError(f"{path}: row {i + 2}: bad TIMESTAMP {df['TIMESTAMP'][i]!r}")
        rows.append(_checked(path, i + 2, (ts - t0).total_seconds(), a, b))
    return rows


def _load_burstgpt(path: Path) -> list[TraceRow]:
    df = _read_csv(path, ("Timestamp", "Request tokens", "Response tokens"))
    return [_checked(path, i + 2, ts, a, b) for i, (ts, a, b) in
            enumerate(zip(df["Timestamp"], df["Request tokens"], df["Response tokens"]))]


def save(rows: list[TraceRow], path: str | Path, fmt: str) -> None:
    """Write rows in `fmt` (Azure timestamps are written from an arbitrary epoch)."""
    path = Path(path)
    if fmt == "mooncake":
        with open(path, "w") as f:
            for r in rows:
                f.write(json.dumps({"timestamp": round(r.timestamp * 1000, 3),
                                    "input_length": r.input_length,
                                    "output_length": r.output_length,
                                    "hash_ids": list(r.hash_ids)}) + "\n")
        return
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        if fmt == "azure":
            w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
            epoch = pd.Timestamp(year=2024, month=1, day=1)
            for r in rows:
                ts = epoch + pd.Timedelta(microseconds=round(r.timestamp * 1e6))
                w.writerow([ts.strftime("%Y-%m-%d %H:%M:%S.%f"), r.input_length, r.output_length])
        elif fmt == "burstgpt":
            w.writerow(["Timestamp", "Model", "Request tokens", "Response tokens",
                        "Total tokens", "Log Type"])
            for r in rows:
                w.writerow([repr(r.timestamp), "unknown", r.input_length, r.output_length,
                            r.input_length + r.output_length, "Conversation log"])
        else:
            raise ValueError(f"unknown trace format {fmt!r}; one of {', '.join(FORMATS)}")


def to_workload(rows: list[TraceRow], seed: int, name: str = "trace",
                vocab: tuple[int, int] = DEFAULT_VOCAB) -> Workload:
    """One single-turn request per row at its timestamp. Rows sharing a hash id share
    that 512-token block (a prefix-cache hit, as in Mooncake); the rest is unique."""
    rng = np.random.default_rng(seed)
    convs = []
    for i, r in enumerate(rows):
        tokens: list[int] = []
        # only the blocks the prompt covers: a row may name far more hash ids than that
        for h in r.hash_ids[: -(-r.input_length // MOONCAKE_BLOCK)]:
            block = np.random.default_rng([seed, h]).integers(*vocab, MOONCAKE_BLOCK)
            tokens += block.tolist()
        tokens = tokens[:r.input_length]
        tokens += rng.integers(*vocab, r.input_length - len(tokens)).tolist()
        convs.append(Conversation(f"trace-{seed}-{i}", r.timestamp,
                                  [Turn(tokens, r.output_length)]))
    return Workload(name, convs)


def from_workload(w: Workload) -> list[TraceRow]:
    """Each request of a workload as a trace row (later turns at their conversation's start)."""
    rows = []
    for c in w.conversations:
        history = 0
        for t in c.turns:
            history += len(t.new_tokens)
            rows.append(TraceRow(c.start, history, t.max_tokens))
            history += t.max_tokens
    return sorted(rows, key=lambda r: r.timestamp)
