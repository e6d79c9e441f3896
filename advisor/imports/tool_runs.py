"""One run measured by another tool, as our records: what every importer returns, and the
record built from what such files keep of a request.

Times in a record are seconds on the file's own clock; statistics only take differences
within a record and between a run's records, so no clock needs to match ours. What a
format does not keep is named in `unknown`, and the evidence carries it; nothing is
filled in where a file is silent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from advisor.measure.records import RequestRecord

# what no other tool's file says, whatever its format
NEVER_KEPT = (
    "KV transfer times (no other tool records them; the transfer row is not judged)",
    "front-end CPU (no counters were read while it ran)",
    "the measuring client's own saturation (its self-check is ours)",
)


@dataclass
class Found:
    """One run at one rate: every request of it, where it came from, what it lacks."""

    records: list[RequestRecord]
    rate: float | None  # req/s the tool was asked for; None: the file does not say
    tool: str  # "aiperf 0.13.0", ...
    source: str  # the file (and the benchmark within it)
    unknown: list[str] = field(default_factory=list)  # beyond NEVER_KEPT
    max_concurrency: int | None = None
    model: str | None = None  # the model the tool asked for, where the file names it

    @property
    def start(self) -> float:
        """The run's t=0: its first request's schedule (or send)."""
        return min((r.scheduled or r.sent for r in self.records if r.scheduled or r.sent),
                   default=0.0)

    @property
    def duration(self) -> float:
        """From the run's t=0 to the last end, s."""
        return max((r.end for r in self.records if r.end), default=0.0) - self.start


MAX_TOKENS = 1 << 24  # a request's tokens, either way


def _finite(t: object) -> bool:
    return isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t)


def record(index: int, sent: float, first: float | None, gaps: Sequence[float], end: float,
           prompt_tokens: int, output_tokens: int, error: str | None = None,
           scheduled: float | None = None, conversation: str | None = None,
           turn: int = 0) -> RequestRecord:
    """A request sent at `sent` (s) whose first content arrived at `first` and each later
    one `gaps` (s) after the one before, ending at `end`; failed with `error`, or without
    any content. `scheduled`: when it was due (None: unknown, taken as when it was sent).
    ValueError where a time is not a finite number or a count is out of range."""
    times = [sent, end, *([first] if first is not None else []),
             *([scheduled] if scheduled is not None else [])]
    if len(gaps) > MAX_TOKENS or not all(_finite(t) for t in (*times, *gaps)):
        raise ValueError(f"request {index}: its times must be finite numbers (seconds)")
    if not (0 <= prompt_tokens <= MAX_TOKENS and 0 <= output_tokens <= MAX_TOKENS):
        raise ValueError(f"request {index}: its token counts must be 0 to {MAX_TOKENS}")
    chunks = []
    if first is not None and error is None:
        t = first
        chunks.append(t)
        for g in gaps:
            t += g
            chunks.append(t)
    ok = error is None and bool(chunks)
    return RequestRecord(
        index, conversation or f"imported-{index}", turn, False,
        scheduled if scheduled is not None else sent, dispatched=sent, sent=sent,
        chunks=chunks, end=end, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
        token_source="usage", status=200 if ok else None,
        error=None if ok else (error or "the file records no content for it"))
