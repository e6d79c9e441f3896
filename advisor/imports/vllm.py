"""`vllm bench serve --save-result --save-detailed`'s JSON: per-request lists side by side
(`start_times`, `ttfts`, `itls`, `latencies`, `input_lens`, `output_lens`, `errors`; s),
with the rate it was asked for (`request_rate`). Key names as in vllm/benchmarks/serve.py
at the commit advisor.measure.vllm_result cites, which writes the same file."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from advisor.errors import UsageError
from advisor.imports.tool_runs import Found, record

NEEDED = ("start_times", "ttfts", "itls", "input_lens", "output_lens", "errors")
NO_SCHEDULE = ("when each request was due (vLLM records when it was sent): how late the "
               "client sent is unknown")


def is_vllm(data: dict[str, Any]) -> bool:
    return "ttfts" in data or ("request_throughput" in data and "median_ttft_ms" in data)


def read(path: Path, data: dict[str, Any]) -> Found:
    """Every request of one saved vLLM result; UsageError when it was saved without
    --save-detailed (no per-request lists)."""
    missing = [k for k in NEEDED if not isinstance(data.get(k), list)]
    if missing:
        raise UsageError(f"{path}: a vLLM result without {', '.join(missing)}: save it with "
                         "`vllm bench serve --save-result --save-detailed` (per-request lists)")
    n = len(data["ttfts"])
    if any(len(data[k]) != n for k in NEEDED):
        raise UsageError(f"{path}: its per-request lists differ in length")
    ends = data.get("latencies") if isinstance(data.get("latencies"), list) else None
    records = []
    for i in range(n):
        sent, ttft, gaps = float(data["start_times"][i]), data["ttfts"][i], data["itls"][i]
        error = data["errors"][i] or None
        end = sent + (ends[i] if ends and len(ends) == n else ttft + sum(gaps))
        records.append(record(i, sent, sent + ttft if not error else None, gaps, end,
                              int(data["input_lens"][i]), int(data["output_lens"][i]), error))
    tool = f"vllm bench serve ({data.get('backend', 'unknown backend')})"
    return Found(records, _rate(data.get("request_rate")), tool, str(path), [NO_SCHEDULE],
                 data.get("max_concurrency"), data.get("model_id"))


def _rate(value: Any) -> float | None:
    """request_rate as a finite req/s; None for "inf" (all at once) or anything else."""
    try:
        rate = float(value)
    except (TypeError, ValueError):
        return None
    return rate if math.isfinite(rate) else None
