"""`vllm bench serve --save-result`'s JSON, from one of our runs, so that tools reading
vLLM's results read ours. Its keys follow vllm/benchmarks/serve.py as stored at commit
009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1 (`main_async`'s result_json over `benchmark`'s
result, and `compute_result_filename`).

What our client does not keep is left out rather than made up: `generated_texts` (it counts
tokens, it keeps no text). `start_times` are seconds from the run's t=0 (vLLM's are its
process's perf_counter), and `queue_times` the wait behind --max-concurrency.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from datetime import datetime
from typing import Any

from advisor.measure.failures import reason
from advisor.measure.records import RequestRecord
from advisor.measure.stats import latency

METRIC_KEY = re.compile(r"(mean|median|std|p[0-9.]+)_(ttft|tpot|itl|e2el)_ms")
# dropped unless --save-detailed, as vLLM drops them
DETAILED = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "errors")


def file_name(label: str, rate: float | str, max_concurrency: int | None, model: str,
              date: str) -> str:
    """vLLM's default name for the file: LABEL-RATEqps[-concurrencyN]-MODEL-DATE.json."""
    concurrency = f"-concurrency{max_concurrency}" if max_concurrency is not None else ""
    return f"{label}-{rate}qps{concurrency}-{model.rsplit('/', maxsplit=1)[-1]}-{date}.json"


def now() -> str:
    """The date as vLLM writes it in the file and its name."""
    return datetime.now().strftime("%Y%m%d-%H%M%S")


def vllm_result(stats: dict[str, Any], records: list[RequestRecord], start: float,
                setup: dict[str, Any], detailed: bool) -> dict[str, Any]:
    """The result JSON: `setup` (date, backend, label, model_id, ..., as vLLM orders them),
    then the run's figures from `stats` (our summary, whose metric keys are vLLM's) and
    `records` (times relative to `start`)."""
    done = [r for r in records if not r.warmup]
    lats = [latency(r) for r in done]
    out = {
        **setup,
        "duration": stats["duration"],
        "completed": stats["completed"],
        "failed": stats["failed"],
        "total_input_tokens": stats["total_input_tokens"],
        "total_output_tokens": stats["total_output_tokens"],
        "request_throughput": stats["request_throughput"],
        "request_goodput": stats["request_goodput"] if stats.get("goodput_slos") else None,
        "output_throughput": stats["output_throughput"],
        "total_token_throughput": stats["total_token_throughput"],
        "input_lens": [r.prompt_tokens for r in done],
        "output_lens": [r.output_tokens if lat else 0 for r, lat in zip(done, lats)],
        "ttfts": [lat.ttft if lat else 0.0 for lat in lats],
        "itls": [lat.itls.tolist() if lat else [] for lat in lats],
        "latencies": [lat.e2el if lat else 0.0 for lat in lats],
        "start_times": [r.sent - start if r.sent else 0.0 for r in done],
        "queue_times": [max(0.0, r.dispatched - r.scheduled) if r.dispatched else 0.0
                        for r in done],
        "errors": ["" if lat else reason(r.status, r.error) for r, lat in zip(done, lats)],
        **peaks(done),
        "rtfx": 0.0,  # speech-to-text only
    }
    out.update({k: v for k, v in stats.items() if METRIC_KEY.fullmatch(k)})
    if not detailed:
        for k in DETAILED:
            del out[k]
    return out


def peaks(records: list[RequestRecord]) -> dict[str, float]:
    """vLLM's max_output_tokens_per_s (output chunks in the busiest whole second from the
    first request's start) and max_concurrent_requests (requests under way at some time in
    that second, as vLLM counts them: more than --max-concurrency when some end in it)."""
    ok = [r for r in records if r.ok]
    if not ok:
        return {"max_output_tokens_per_s": 0.0, "max_concurrent_requests": 0}
    t0 = min(r.sent for r in ok)
    tokens = Counter(math.floor(t - t0) for r in ok for t in r.chunks)
    second, most = max(tokens.items(), key=lambda kv: kv[1])
    under_way = sum(math.floor(r.sent - t0) <= second <= math.floor(r.end - t0) for r in ok)
    return {"max_output_tokens_per_s": float(most), "max_concurrent_requests": under_way}
