"""aiperf's per-request export (`profile_export.jsonl`, one JSON record per request, times
in ns and latencies in ms), with the rate it was asked for from the summary beside it
(`profile_export_aiperf.json`'s input_config)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from advisor.errors import UsageError
from advisor.imports.tool_runs import Found, record
from advisor.measure.records import RequestRecord

RECORDS, SUMMARY = "profile_export.jsonl", "profile_export_aiperf.json"
NS = 1e-9


def is_aiperf(path: Path) -> bool:
    return path.name.endswith(".jsonl") and path.name.startswith("profile_export")


def read(path: Path) -> Found:
    """The profiling phase's requests of one aiperf export (warm-up requests left out)."""
    rows = []
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                meta = row["metadata"]
            except (ValueError, KeyError, TypeError):
                meta = None
            if not isinstance(meta, dict) or not all(
                    isinstance(meta.get(k), int) for k in ("request_start_ns", "request_end_ns")):
                raise UsageError(f"{path}:{n}: not an aiperf record (no metadata with "
                                 "request_start_ns and request_end_ns)")
            if meta.get("benchmark_phase", "profiling") == "profiling":
                rows.append(row)
    # NOTE: ns since the epoch lose ~0.2 us as float seconds; from the first start they do not
    epoch = min((r["metadata"]["request_start_ns"] for r in rows), default=0)
    records = [_record(i, r["metadata"], r.get("metrics") or {}, r.get("error"), epoch)
               for i, r in enumerate(rows)]
    rate, concurrency, version, model = _asked(path.parent / SUMMARY)
    return Found(records, rate, f"aiperf {version}" if version else "aiperf", str(path),
                 max_concurrency=concurrency, model=model)


def _value(metrics: dict[str, Any], name: str) -> Any:
    m = metrics.get(name)
    return m.get("value") if isinstance(m, dict) else None


def _record(index: int, meta: dict[str, Any], metrics: dict[str, Any], error: dict[str,
            Any] | None, epoch: int) -> RequestRecord:
    sent = (meta["request_start_ns"] - epoch) * NS
    ttft, gaps = _value(metrics, "time_to_first_token"), _value(metrics, "inter_chunk_latency")
    why = None
    if error:
        why = str(error.get("message") or error.get("type") or error)
    elif meta.get("was_cancelled"):
        why = "aiperf cancelled it"
    tokens = (_value(metrics, "usage_prompt_tokens") or _value(metrics, "input_sequence_length")
              or _value(metrics, "error_isl") or 0)
    out = _value(metrics, "usage_completion_tokens") or _value(metrics, "output_sequence_length")
    return record(index, sent, sent + ttft / 1000 if ttft is not None else None,
                  [g / 1000 for g in gaps or []], (meta["request_end_ns"] - epoch) * NS,
                  int(tokens), int(out or 0), why,
                  scheduled=(credit - epoch) * NS if (credit := meta.get("credit_issued_ns"))
                  else None,
                  conversation=meta.get("conversation_id"), turn=meta.get("turn_index") or 0)


def _asked(summary: Path) -> tuple[float | None, int | None, str | None, str | None]:
    """(rate, concurrency, aiperf's version, model) from the summary beside the records,
    where there is one."""
    try:
        data = json.loads(summary.read_text())
        config = data.get("input_config") or {}
        phases = config.get("phases") or []
        phase: dict[str, Any] = next((p for p in phases if p.get("kind") == "profiling"), {})
        models = (config.get("models") or {}).get("items") or [{}]
    except (OSError, ValueError, AttributeError):
        return None, None, None, None
    return (phase.get("rate"), phase.get("concurrency"), data.get("aiperf_version"),
            models[0].get("name"))
