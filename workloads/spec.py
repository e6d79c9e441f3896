"""What a benchmark sends: conversations of turns, each with its own start time.

A single-turn request is a conversation of one turn, so one client path serves
both. A later turn's prompt is built by the client from what was actually sent
and received (history + `new_tokens`), never precomputed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from workloads.arrivals import Arrivals
from workloads.lengths import LengthDist

DEFAULT_VOCAB = (10, 500)  # token ids valid in every preset's and most real models' vocabularies

# prompt tokens one workload holds, each a Python int (~36 bytes with its list slot: ~1.2 GB)
MAX_WORKLOAD_TOKENS = 32_000_000


@dataclass
class Turn:
    """One request of a conversation: the user tokens it adds and how long to wait before it."""

    new_tokens: list[int]
    max_tokens: int
    think_s: float = 0.0  # after the previous reply arrived; 0 for the first turn


@dataclass
class Conversation:
    conversation_id: str
    start: float  # seconds from the benchmark's t=0
    turns: list[Turn]


@dataclass
class Workload:
    """A reproducible request stream plus what made it (for the manifest)."""

    name: str
    conversations: list[Conversation]
    params: dict[str, Any] = field(default_factory=dict)
    chat: bool = False  # meant for the chat API (text messages), not token-ID prompts
    tools: list[dict[str, Any]] | None = None  # chat: the function tools every request offers

    @property
    def num_requests(self) -> int:
        return sum(len(c.turns) for c in self.conversations)

    def longest(self) -> int:
        """The most tokens one request holds, its prompt and max_tokens: a conversation's
        last turn carries every turn before it and each reply (max_tokens long)."""
        return max((sum(len(t.new_tokens) + t.max_tokens for t in c.turns)
                    for c in self.conversations), default=0)

    @property
    def multi_turn(self) -> bool:
        """Whether any conversation has a later turn (then requests do not arrive at a
        rate of their own: a later turn waits on the one before it)."""
        return any(len(c.turns) > 1 for c in self.conversations)


@dataclass(frozen=True)
class SyntheticSpec:
    """Random token-ID prompts; `num_prompts` counts requests (turns), as vLLM does, and
    `arrivals.rate` is requests/s, turns included.

    Prompts are unique per request (random IDs), so prefix caches cannot hide
    prefill work, except for an optional `shared_prefix_len` common to all.
    Multi-turn: `turns` per conversation, `turn_input` new user tokens on each
    later turn, `think_s` (mean of an exponential) between a reply and the next turn;
    conversations start at the rate over the turns per conversation, so that once they
    overlap in a steady stream, requests arrive at the rate.
    """

    input: LengthDist = LengthDist()
    output: LengthDist = LengthDist()
    arrivals: Arrivals = Arrivals()
    num_prompts: int = 100
    turns: int = 1
    turn_input: LengthDist | None = None
    think_s: float = 0.0
    shared_prefix_len: int = 0
    vocab: tuple[int, int] = DEFAULT_VOCAB
    chat: bool = False
    tools: tuple[dict[str, Any], ...] = ()

    def validate(self) -> None:
        if self.num_prompts < 1:
            raise ValueError(f"num_prompts must be >= 1, not {self.num_prompts}")
        if self.turns < 1:
            raise ValueError(f"turns must be >= 1, not {self.turns}")
        if self.think_s < 0 or self.shared_prefix_len < 0:
            raise ValueError("think time and shared prefix length must be >= 0")
        if not 0 <= self.vocab[0] < self.vocab[1]:
            raise ValueError(f"bad vocabulary range {self.vocab}")
        self.input.validate("input length")
        self.output.validate("output length")
        if self.turn_input:
            self.turn_input.validate("turn input length")
        self.arrivals.validate()


def synthesize(spec: SyntheticSpec, seed: int, name: str = "random") -> Workload:
    """The workload `spec` describes; the same seed gives the same requests. ValueError,
    before any prompt is built, where they would hold over MAX_WORKLOAD_TOKENS tokens."""
    spec.validate()
    if spec.num_prompts > MAX_WORKLOAD_TOKENS:
        raise ValueError(f"{spec.num_prompts} requests: over the {MAX_WORKLOAD_TOKENS} tokens "
                         "one workload may hold")
    rng = np.random.default_rng(seed)
    n_conv = -(-spec.num_prompts // spec.turns)
    # the rate counts requests; each conversation brings num_prompts / n_conv of them
    starts = replace(spec.arrivals, rate=spec.arrivals.rate * n_conv / spec.num_prompts) \
        .times(n_conv, rng)
    prefix = rng.integers(*spec.vocab, spec.shared_prefix_len).tolist()
    first_in = spec.input.sample(n_conv, rng)
    later_in = (spec.turn_input or spec.input).sample(n_conv * spec.turns, rng)
    outs = spec.output.sample(n_conv * spec.turns, rng)
    built = spec.shared_prefix_len * n_conv + int(first_in.sum()) + int(later_in.sum())
    if built > MAX_WORKLOAD_TOKENS:
        raise ValueError(f"{spec.num_prompts} requests would hold ~{built} prompt tokens, over "
                         f"the {MAX_WORKLOAD_TOKENS} one workload may: fewer or shorter prompts")
    convs, left = [], spec.num_prompts
    for c in range(n_conv):
        turns = []
        for t in range(min(spec.turns, left)):
            k = c * spec.turns + t
            n_new = int(first_in[c]) if t == 0 else int(later_in[k])
            new = rng.integers(*spec.vocab, n_new).tolist()
            think = float(rng.exponential(spec.think_s)) if t and spec.think_s else 0.0
            turns.append(Turn(prefix + new if t == 0 else new, int(outs[k]), think))
        left -= len(turns)
        convs.append(Conversation(f"conv-{seed}-{c}", float(starts[c]), turns))
    return Workload(name, convs, chat=spec.chat, tools=list(spec.tools) or None)
