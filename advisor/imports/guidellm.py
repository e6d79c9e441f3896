"""guidellm's `benchmarks.json`: one benchmark per strategy it ran (a sweep runs several
rates), each with its requests (successful, errored, incomplete) and their timings (s, on
the wall clock)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from advisor.errors import UsageError
from advisor.imports.tool_runs import Found, record
from advisor.measure.records import RequestRecord

MEAN_GAPS = ("each gap between tokens: guidellm keeps a request's first and last token "
             "times only, so its ITL is that request's mean gap, which hides stalls (p99 ITL "
             "reads low)")
# NOTE: guidellm stops requests still running at a benchmark's end; they did not finish
# inside the window measured, so they count as misses like any other failure
CUT = "guidellm cut it off at the benchmark's end"
MAX_OUTPUT_TOKENS = 1 << 21  # per request: past any context a served model has


def is_guidellm(data: dict[str, Any]) -> bool:
    return isinstance(data.get("benchmarks"), list) and "guidellm_version" in str(
        data.get("metadata", ""))


def _iterations(value: Any, output_tokens: Any, where: str) -> int:
    """A request's token iterations, each of which streamed at least one of its output
    tokens: a count the file declares is bounded by them before anything is made of it
    (UsageError naming the request otherwise)."""
    ok = isinstance(value, int | float | None) and isinstance(output_tokens, int | float | None)
    n, most = int(value or 0) if ok else -1, int(output_tokens or 0) if ok else 0
    if not 0 <= n <= max(most, 1) or most > MAX_OUTPUT_TOKENS:
        raise UsageError(f"{where}: token_iterations {value!r} against output_tokens "
                         f"{output_tokens!r}: each iteration streams at least one token, and "
                         f"a request has at most {MAX_OUTPUT_TOKENS} of them")
    return n


def read(path: Path, data: dict[str, Any]) -> tuple[list[Found], list[str]]:
    """One Found per benchmark that ran at a rate; and what was left out, and why (a
    synchronous, throughput or concurrent benchmark has no arrival rate to judge)."""
    version = (data.get("metadata") or {}).get("guidellm_version", "")
    found, skipped = [], []
    for k, bench in enumerate(data["benchmarks"]):
        try:
            strategy = bench["config"]["strategy"]
            groups = bench["requests"]
        except (KeyError, TypeError):
            raise UsageError(f"{path}: benchmark {k} has no config.strategy or requests") from None
        kind, rate = strategy.get("type_"), strategy.get("rate")
        where = f"{path} benchmark {k} ({kind}" + (f"@{rate:g})" if rate else ")")
        if not rate:
            skipped.append(f"{where}: no arrival rate (a {kind} benchmark)")
            continue
        records: list[RequestRecord] = []
        for group in ("successful", "errored", "incomplete"):
            for req in groups.get(group) or []:
                records.append(_record(len(records), req, group, where))
        cap = (bench["config"].get("profile") or {}).get("max_concurrency")
        model = (bench["config"].get("backend") or {}).get("model")
        found.append(Found(records, float(rate), f"guidellm {version}".strip(), where,
                           [MEAN_GAPS], cap, model))
    return found, skipped


def _record(index: int, req: dict[str, Any], group: str, where: str) -> RequestRecord:
    info = req.get("info") or {}
    t = info.get("timings") or {}
    sent = t.get("request_start") or req.get("request_start_time")
    end = t.get("request_end") or req.get("request_end_time") or sent
    first, last = t.get("first_token_iteration"), t.get("last_token_iteration")
    chunks = _iterations(t.get("token_iterations"), req.get("output_tokens"),
                         f"{where}: request {index}")
    gaps = [(last - first) / (chunks - 1)] * (chunks - 1) if first and last and chunks > 1 \
        else []
    error = None
    if group == "errored":
        error = str(info.get("error") or "guidellm recorded an error")
    elif group == "incomplete":
        error = CUT
    return record(index, float(sent or 0.0), first if error is None else None, gaps,
                  float(end or 0.0), int(req.get("prompt_tokens") or 0),
                  int(req.get("output_tokens") or 0), error, scheduled=t.get("targeted_start"),
                  conversation=info.get("conversation_id"), turn=info.get("turn_index") or 0)
