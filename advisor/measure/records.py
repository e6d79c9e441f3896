"""What the client sends to and what it records: an endpoint, one request as the client saw
it, and a run of them. Plain data (no HTTP here), shared by the client, the statistics
and the planner's simulated runs."""

from __future__ import annotations

from dataclasses import dataclass, field

from advisor.errors import UsageError

COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"


@dataclass(frozen=True)
class Endpoint:
    """Where and how to send: `path` is /v1/completions (token-ID prompts) or
    /v1/chat/completions; `temperature` goes with every request (None: the server's
    default).

    Greedy (0.0) by default, as `vllm bench serve` sends it: sent with no temperature,
    an OpenAI server samples at 1.0, which costs a server work the benchmark did not ask for.
    """

    base_url: str
    model: str
    path: str = COMPLETIONS
    ignore_eos: bool = True
    timeout_s: float = 600.0
    api_key: str | None = None
    temperature: float | None = 0.0

    def validate(self) -> None:
        if self.path not in (COMPLETIONS, CHAT):
            raise UsageError(f"endpoint must be {COMPLETIONS} or {CHAT}, not {self.path!r}")
        if not self.base_url.startswith(("http://", "https://")):
            raise UsageError(f"base URL must start with http:// or https://, not {self.base_url!r}")
        if not self.timeout_s > 0:
            raise UsageError("request timeout must be > 0")


@dataclass
class RequestRecord:
    """One request as the client saw it."""

    index: int
    conversation_id: str
    turn: int
    warmup: bool
    scheduled: float  # when it should have been sent
    dispatched: float = 0.0  # when the client began sending it (after any concurrency cap)
    sent: float = 0.0  # when its body was written; 0 if never sent
    chunks: list[float] = field(default_factory=list)  # arrival of each content chunk
    end: float = 0.0
    prompt_tokens: int = 0
    output_tokens: int = 0
    token_source: str = "chunks"  # usage | chunks: where output_tokens came from
    status: int | None = None
    error: str | None = None
    kv_transfer_ms: float | None = None  # when the server reports its KV transfer (ours does)
    cached_tokens: int | None = None  # prompt tokens not computed (usage.prompt_tokens_details)
    body_sent: bool = field(default=False, repr=False)

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == 200 and bool(self.chunks)


@dataclass
class ClientRun:
    """What a client run saw: every record, when the schedule began and when the last
    response ended."""

    records: list[RequestRecord]
    start: float  # t=0 of the schedule
    end: float  # last response finished
    cpu_s: float = 0.0  # the measuring process's CPU seconds (every thread) from t=0 to the end
    loop_lags: list[float] = field(default_factory=list)  # the event loop's wake-ups, s late
    workers: int = 1  # client processes it ran in (advisor.measure.workers), cpu_s their sum

    @classmethod
    def of(cls, records: list[RequestRecord], start: float, cpu_s: float,
           loop_lags: list[float], workers: int = 1) -> ClientRun:
        """A run of `records` from t=0 `start`: warm-ups first, then in schedule order,
        re-indexed; its end the last response's end."""
        records = sorted(records, key=lambda r: (r.warmup is False, r.scheduled, r.turn))
        for i, r in enumerate(records):
            r.index = i
        ends = [r.end for r in records if not r.warmup and r.end]
        return cls(records, start, max(ends, default=start), cpu_s, loop_lags, workers)

    @property
    def duration(self) -> float:
        return self.end - self.start

    def send_lateness(self) -> list[float]:
        """How late each first turn went out against its schedule, s (later turns wait on
        the one before, so they have no schedule to be late for)."""
        return [r.dispatched - r.scheduled for r in self.records
                if not r.warmup and r.turn == 0 and r.dispatched]
