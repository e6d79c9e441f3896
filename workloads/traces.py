"""Request traces: Mooncake JSONL, Azure LLM inference CSV and BurstGPT CSV, in and out.

Every format becomes a list of TraceRow (seconds from the first request, input
and output lengths, and Mooncake's `hash_ids`: ids of shared 512-token prefix
blocks). A bad row raises ValueError naming the file and row.

Every number is bounded where it is read, before it sizes anything (docs/design/security.md
names each limit): rows per trace, tokens and hash ids per row, hash ids per trace, the
span a replay may last, and the prompt tokens a workload built from it may hold.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workloads.spec import DEFAULT_VOCAB, MAX_WORKLOAD_TOKENS, Conversation, Turn, Workload

MOONCAKE_BLOCK = 512
FORMATS = ("mooncake", "azure", "burstgpt")
MAX_ROWS = 500_000  # rows read from one trace (BurstGPT's whole 1.4M: cut it first)
MAX_ROW_TOKENS = 1 << 20  # input or output tokens of one row: a 1M-token context
MAX_ROW_HASH_IDS = MAX_ROW_TOKENS // MOONCAKE_BLOCK  # the blocks such a prompt covers
MAX_HASH_IDS = 2_000_000  # over a whole trace (Mooncake's conversation trace: ~240k)
MAX_LINE_BYTES = 1 << 20  # one JSON Lines row: room for MAX_ROW_HASH_IDS long ids
MAX_HASH_ID = (1 << 63) - 1
MAX_TIMESTAMP_S = 1e11  # ~3,000 years: any epoch's seconds, and finite differences
MAX_REPLAY_S = 86_400.0  # the replayed window's span after --trace-time-scale: a day



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
    """Read a trace; timestamps are multiplied by `time_scale`, then the trace is truncated
    (the window replayed may last at most MAX_REPLAY_S)."""
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise ValueError(f"the time scale must be a finite number > 0, not {time_scale}")
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
    rows = rows[:max_requests]
    if rows[-1].timestamp > MAX_REPLAY_S:
        raise ValueError(f"{path}: replaying {len(rows)} rows would last "
                         f"{rows[-1].timestamp:.3g} s, over {MAX_REPLAY_S:g} s: replay fewer "
                         "(--num-prompts) or faster (--trace-time-scale)")
    return rows


def _checked(path: Path, row_no: int, ts: Any, inp: Any, out: Any,
             hashes: Any = ()) -> TraceRow:
    """One row, every number in range, else ValueError naming the file and row."""
    where = f"{path}: row {row_no}"
    if row_no > MAX_ROWS + 1:  # (a CSV's header is its row 1)
        raise ValueError(f"{where}: over the {MAX_ROWS} rows read from one trace; cut it first")
    if not isinstance(hashes, list | tuple) or len(hashes) > MAX_ROW_HASH_IDS:
        raise ValueError(f"{where}: hash_ids must be a list of at most {MAX_ROW_HASH_IDS}")
    try:
        row = TraceRow(float(ts), _count(inp), _count(out), tuple(_count(h) for h in hashes))
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"{where}: {e}") from None
    if not math.isfinite(row.timestamp) or abs(row.timestamp) > MAX_TIMESTAMP_S:
        raise ValueError(f"{where}: the time must be finite and within {MAX_TIMESTAMP_S:g} s")
    if not (1 <= row.input_length <= MAX_ROW_TOKENS and 1 <= row.output_length <= MAX_ROW_TOKENS):
        raise ValueError(f"{where}: lengths must be 1 to {MAX_ROW_TOKENS} tokens")
    if any(not 0 <= h <= MAX_HASH_ID for h in row.hash_ids):
        raise ValueError(f"{where}: hash ids must be integers from 0 to {MAX_HASH_ID}")
    return row


def _count(v: Any) -> int:
    """An integer as a trace writes one (an int, a whole float, or its text)."""
    if isinstance(v, bool) or (isinstance(v, float) and not (math.isfinite(v)
                                                              and v.is_integer())):
        raise ValueError(f"{v!r} is not an integer")
    if isinstance(v, str) and len(v) > 20:
        raise ValueError(f"{v[:20]!r}... is not an integer of at most 20 digits")
    n = int(v)
    if abs(n) > MAX_HASH_ID:
        raise ValueError(f"{n} is out of range")
    return n


def _load_mooncake(path: Path) -> list[TraceRow]:
    rows = []
    hashes = 0
    with open(path, "rb") as f:
        no = 0
        while line := f.readline(MAX_LINE_BYTES + 1):
            no += 1
            if len(line) > MAX_LINE_BYTES:
                raise ValueError(f"{path}: row {no}: longer than {MAX_LINE_BYTES} bytes")
            if not line.strip():
                continue
            row = _mooncake_row(path, no, line)
            hashes += len(row.hash_ids)
            if hashes > MAX_HASH_IDS:
                raise ValueError(f"{path}: row {no}: over the {MAX_HASH_IDS} hash ids read "
                                 "from one trace")
            rows.append(row)
    return rows


def _mooncake_row(path: Path, no: int, line: bytes) -> TraceRow:
    try:
        d = json.loads(line)
        ts = d["timestamp"]
        if isinstance(ts, bool) or not isinstance(ts, int | float):
            raise TypeError(f"timestamp {str(ts)[:20]!r} is not a number")
        return _checked(path, no, ts / 1000.0, d["input_length"], d["output_length"],
                        d.get("hash_ids", []))
    except (KeyError, TypeError) as e:
        raise ValueError(f"{path}: row {no}: {type(e).__name__}: {e}") from None
    except RecursionError:
        raise ValueError(f"{path}: row {no}: nested deeper than JSON is read") from None
    except ValueError as e:  # not JSON, or an integer of thousands of digits
        if str(e).startswith(f"{path}: row {no}"):
            raise
        raise ValueError(f"{path}: row {no}: {str(e)[:200]}") from None


def _read_csv(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    # rows past MAX_ROWS are not read: the one after them is refused by its number
    df = pd.read_csv(path, dtype=str, keep_default_na=False, nrows=MAX_ROWS + 1)
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
                                    "hash_ids": list(r.hash_ids)}, allow_nan=False) + "\n")
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
    that 512-token block (a prefix-cache hit, as in Mooncake); the rest is unique.
    ValueError, before anything is built, where the rows hold more than
    MAX_WORKLOAD_TOKENS prompt tokens."""
    total = sum(r.input_length for r in rows)
    if total > MAX_WORKLOAD_TOKENS:
        raise ValueError(f"{name}: {len(rows)} requests with {total} prompt tokens in all, "
                         f"over the {MAX_WORKLOAD_TOKENS} one run builds: replay fewer "
                         "(--num-prompts)")
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
