"""Derendering generated token IDs into content, reasoning and tool calls, in chunks.

A stream's state is small and travels with the client: the token IDs that have
not yet formed whole UTF-8 characters, the parser's state, and counts. Each
chunk costs work proportional to the chunk; the prompt's token IDs never need
to travel again, and any replica can serve any chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.render.parsing import Parsed, StreamParser
from engine.render.tokenizer import IncrementalDetokenizer, TextTokenizer

MAX_PENDING_IDS = 16  # a UTF-8 character spans at most 4 bytes, each at most a token


class DerenderError(ValueError):
    """A chunk or state that cannot be derendered (the server answers 400)."""


@dataclass
class StreamState:
    """What a stream carries from chunk to chunk (a few hundred bytes of JSON at most)."""

    request_id: str
    pending_ids: list[int]
    parser: dict[str, Any]
    num_tokens: int = 0
    fingerprint: str = ""  # of the front end that started the stream (see frontend.py)

    def to_json(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "pending_ids": self.pending_ids,
                "parser": self.parser, "num_tokens": self.num_tokens,
                "fingerprint": self.fingerprint}

    @classmethod
    def start(cls, request_id: str, reasoning: bool = True, tools: bool = True,
              fingerprint: str = "") -> StreamState:
        return cls(request_id, [], StreamParser.make(reasoning, tools).to_json(), 0, fingerprint)

    @classmethod
    def from_json(cls, d: object) -> StreamState:
        """Validate a state a client echoed back; DerenderError names what is wrong."""
        if not isinstance(d, dict) or set(d) != set(cls.__dataclass_fields__):
            raise DerenderError("stream_state must be the object a previous chunk returned")
        ids, n = d["pending_ids"], d["num_tokens"]
        if not isinstance(d["request_id"], str) or not isinstance(d["fingerprint"], str) \
                or not isinstance(n, int) or n < 0 \
                or not isinstance(ids, list) or len(ids) > MAX_PENDING_IDS \
                or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise DerenderError("stream_state is malformed")
        try:
            StreamParser.from_json(d["parser"])
        except ValueError as e:
            raise DerenderError(f"stream_state is malformed: {e}") from None
        return cls(d["request_id"], ids, d["parser"], n, d["fingerprint"])


def check_ids(vocab_size: int, ids: object) -> list[int]:
    """Token IDs as a list of ints inside the vocabulary, else DerenderError."""
    if not isinstance(ids, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in ids
    ):
        raise DerenderError("token_ids must be a list of integers")
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise DerenderError(f"token id {bad[0]} is outside the vocabulary (size {vocab_size})")
    return ids


def derender_chunk(
    tokenizer: TextTokenizer,
    state: StreamState,
    request_id: str,
    ids: list[int],
    finished: bool,
    vocab_size: int | None = None,
) -> tuple[Parsed, StreamState]:
    """Parse one chunk of generated IDs; returns what it completed and the next state.

    `vocab_size` is the model's (default: the tokenizer's). A model's vocabulary may be
    larger than its tokenizer's (padded rows); such IDs are valid and decode to nothing."""
    if request_id != state.request_id:
        raise DerenderError(
            f"this chunk belongs to request {request_id!r}, the stream_state to "
            f"{state.request_id!r}"
        )
    ids = check_ids(vocab_size or tokenizer.vocab_size, ids)
    try:  # echoed by the client: as untrusted as the chunk's own IDs
        pending = check_ids(vocab_size or tokenizer.vocab_size, state.pending_ids)
    except DerenderError as e:
        raise DerenderError(f"stream_state's pending_ids: {e}") from None
    detok = IncrementalDetokenizer(tokenizer)
    detok.pending = list(pending)
    parser = StreamParser.from_json(state.parser)
    out = parser.feed(detok.feed(ids))
    if finished:  # whatever bytes are left are final: decode them as they are
        out.extend(parser.feed(tokenizer.decode(detok.pending)) if detok.pending else Parsed())
        detok.pending = []
        out.extend(parser.finish())
    if len(detok.pending) > MAX_PENDING_IDS:  # never a character: give up waiting for it
        out.extend(parser.feed(tokenizer.decode(detok.pending)))
        detok.pending = []
    return out, StreamState(
        request_id, detok.pending, parser.to_json(), state.num_tokens + len(ids), state.fingerprint
    )


def derender(tokenizer: TextTokenizer, ids: list[int]) -> Parsed:
    """A whole generation at once (non-streaming)."""
    out, _ = derender_chunk(tokenizer, StreamState.start("whole"), "whole", ids, finished=True)
    return out
