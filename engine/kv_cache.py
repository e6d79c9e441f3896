"""The paged KV cache tensors: writes by slot, reads by block table, export and import."""

from __future__ import annotations

import torch


class KVCache:
    """All layers' K and V in fixed-size blocks.

    data: [num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim]
    A slot is `block_id * block_size + offset`.
    """

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device: torch.device):
        self.block_size = block_size
        # NOTE: zeros, not empty: padded block-table entries are read (then masked),
        # and masked garbage that happens to be NaN would poison the softmax @ V.
        self.data = torch.zeros(num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim,
                                dtype=dtype, device=device)

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store new keys and values. slots: [T]; k, v: [T, kv_heads, head_dim]"""
        flat = self.data[layer].view(2, -1, *self.data.shape[-2:])  # [2, blocks*bs, kvh, hd]
        flat[0].index_copy_(0, slots, k)
        flat[1].index_copy_(0, slots, v)

    def gather(self, layer: int, block_table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of the blocks in `block_table`.

        block_table: [B, max_blocks] -> k, v: [B, max_blocks * block_size, kvh, hd]
        """
        kv = self.data[layer][:, block_table]  # [2, B, max_blocks, bs, kvh, hd]
        kv = kv.flatten(2, 3)
        return kv[0], kv[1]

    def export(self, block_ids: list[int], num_tokens: int,
               out: torch.Tensor | None = None) -> torch.Tensor:
        """A request's first `num_tokens` tokens as kv: [layers, 2, num_tokens, kvh, hd].

        One gather copy, into `out` when given (e.g. a shared-memory buffer of
        `export_numel(len(block_ids))` elements); the result is a view of it.
        """
        L, two, nb_total = self.data.shape[:3]
        src = self.data.view(L * two, nb_total, -1)  # [L*2, blocks, bs*kvh*hd]
        idx = torch.tensor(block_ids, device=self.data.device)
        shape = (L * two, len(block_ids), src.shape[-1])
        padded = torch.empty(shape, dtype=self.data.dtype, device=self.data.device) if out is None \
            else out.view(shape)
        torch.index_select(src, 1, idx, out=padded)
        return padded.view(L, two, -1, *self.data.shape[-2:])[:, :, :num_tokens]

    def export_numel(self, num_blocks: int) -> int:
        """Elements of an `out` buffer for export() of `num_blocks` blocks."""
        return self.data[:, :, :num_blocks].numel()

    def import_(self, block_ids: list[int], kv: torch.Tensor) -> None:
        """Write kv: [layers, 2, T, kvh, hd] into the first T slots of `block_ids`."""
        num_tokens = kv.shape[2]
        bs = self.block_size
        slots = torch.tensor([block_ids[t // bs] * bs + t % bs for t in range(num_tokens)],
                             device=self.data.device)
        flat = self.data.view(*self.data.shape[:2], -1, *self.data.shape[-2:])
        flat[:, :, slots] = kv.to(device=self.data.device, dtype=self.data.dtype)
