"""Requests as the scheduler sees them: token lists and counters, no tensors."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.core.kv_layout import ImportedKV

SAMPLING_EPS = 1e-5  # a temperature below this is greedy (as vLLM): dividing by it overflows
SEED_RANGE = (-(1 << 63), (1 << 63) - 1)  # what a torch.Generator can be seeded with
MAX_STOP_TOKEN_IDS = 256  # per request: each generated token is checked against them
MAX_LOGIT_BIAS = 1024  # per request: the sampler adds each to the logits every step


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens. temperature 0 is greedy; `seed` makes random sampling reproducible."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k cut
    seed: int | None = None
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit), OpenAI's
    stop_set: frozenset[int] = field(default=frozenset(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        object.__setattr__(self, "logit_bias", tuple(tuple(b) for b in self.logit_bias))
        # NOTE: a set, so that the stop check per generated token is O(1) however many ids
        object.__setattr__(self, "stop_set", frozenset(self.stop_token_ids))

    def validate(self) -> None:
        """Raise ValueError naming the bad field."""
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if self.seed is not None and not SEED_RANGE[0] <= self.seed <= SEED_RANGE[1]:
            raise ValueError(f"seed must be a 64-bit signed integer, got {self.seed}")
        if len(self.stop_token_ids) > MAX_STOP_TOKEN_IDS:
            raise ValueError(f"stop_token_ids holds at most {MAX_STOP_TOKEN_IDS} ids, got "
                             f"{len(self.stop_token_ids)}")
        if len(self.logit_bias) > MAX_LOGIT_BIAS:
            raise ValueError(f"logit_bias holds at most {MAX_LOGIT_BIAS} entries, got "
                             f"{len(self.logit_bias)}")

    @property
    def greedy(self) -> bool:
        return self.temperature < SAMPLING_EPS or self.top_k == 1


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class FinishReason(str, enum.Enum):
    STOP = "stop"  # eos or a stop token
    LENGTH = "length"  # max_tokens or the context limit
    ABORT = "abort"
    REMOTE_DECODE = "remote_decode"  # prefill role: KV held for a decoder to pull


@dataclass
class Request:
    """One request's token state. The scheduler advances `num_computed_tokens` toward
    `num_tokens`."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival_time: float = 0.0
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    block_ids: list[int] = field(default_factory=list)
    status: Status = Status.WAITING
    finish_reason: FinishReason | None = None
    num_preemptions: int = 0
    num_cached_tokens: int = 0  # prompt tokens served by the prefix cache or a KV import
    first_scheduled_time: float | None = None
    # Decode side: KV to import before the first step.
    pending_kv: ImportedKV | None = None
    # Prefill side: stop after the first token and hold the blocks for a decoder to pull.
    remote_decode: bool = False
    # Decode side (bidirectional): keep the finished turn's blocks for this conversation.
    keep_as: str | None = None

    @property
    def kv_token_ids(self) -> list[int]:
        """The tokens whose KV is in the cache (not the last sampled one)."""
        return self.all_token_ids[: self.num_computed_tokens]

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_new_tokens(self) -> int:
        """Tokens still to run through the model before the next sample."""
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED
