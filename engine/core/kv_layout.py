"""What the engine core knows of moved KV: the layout both sides must share, and what it
asks of an imported payload (the tensor itself lives in engine.model.kv_payload)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from engine.core.config import kv_bytes_per_token


@dataclass(frozen=True)
class KVLayout:
    """What both sides must agree on for KV bytes to mean the same thing."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: str

    @property
    def bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.num_layers, self.num_kv_heads, self.head_dim, self.dtype)


class ImportedKV(Protocol):
    """A prompt's KV handed to a decode engine (engine.model.kv_payload.KVPayload): the
    tokens it was computed for from `start` on, checked against the prompt before use."""

    start: int

    @property
    def num_tokens(self) -> int: ...

    def check_compatible(self, layout: KVLayout, prompt_token_ids: list[int]) -> None: ...
