"""The unit of KV transfer between a prefill and a decode instance: the prompt's KV as
one tensor, with what it was computed for."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.core.kv_layout import KVLayout


@dataclass
class KVPayload:
    """A request's prompt KV as one contiguous buffer plus metadata.

    `kv` is token-major and independent of either side's block size; it holds the tokens
    from `start` on (an importer that asked for a tail already holds the ones before):
    kv: [num_layers, 2, num_tokens - start, num_kv_heads, head_dim]
    `token_ids` are all the tokens the KV was computed for; an importer compares
    them with its prompt, so a diverged prompt can never reuse wrong KV.
    """

    request_id: str
    layout: KVLayout
    token_ids: list[int]
    kv: torch.Tensor
    block_size: int
    start: int = 0

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()

    def check_compatible(self, layout: KVLayout, prompt_token_ids: list[int]) -> None:
        """Raise ValueError when this payload cannot serve as KV for `prompt_token_ids` here."""
        if self.layout != layout:
            raise ValueError(f"KV layout mismatch: payload {self.layout}, engine {layout}")
        expected = (layout.num_layers, 2, self.num_tokens - self.start, layout.num_kv_heads,
                    layout.head_dim)
        if tuple(self.kv.shape) != expected:
            raise ValueError(f"KV tensor shape {tuple(self.kv.shape)} != {expected}")
        # NOTE: KV for a prefix is fine (the rest is computed here), for other tokens never
        if self.token_ids != prompt_token_ids[: self.num_tokens] or not self.token_ids:
            raise ValueError("KV was computed for different tokens than this prompt")

    def prefix(self, num_tokens: int) -> KVPayload:
        """This payload cut to its first `num_tokens` tokens, at least `start` (a view)."""
        if num_tokens < self.start:
            raise ValueError(f"a prefix of {num_tokens} tokens ends before this payload's "
                             f"first token {self.start}")
        return KVPayload(self.request_id, self.layout, self.token_ids[:num_tokens],
                         self.kv[:, :, :num_tokens - self.start], self.block_size, self.start)
