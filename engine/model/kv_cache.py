"""The paged KV cache tensors: writes by slot, reads by block table, export and import."""

from __future__ import annotations

import math
import secrets
from multiprocessing import shared_memory

import torch

from engine.core import deployment

# Names of the shared-memory caches this process created (a reader in the same
# process must leave their resource-tracker registration alone).
LOCAL_SEGMENTS: set[str] = set()


def gather_blocks(data: torch.Tensor, block_ids: list[int], num_tokens: int,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """The first `num_tokens` tokens of `block_ids` as kv: [layers, 2, num_tokens, kvh, hd].

    data: [layers, 2, blocks, block_size, kvh, hd] (any cache, local or mapped).
    One gather copy, into `out` when given (at least `len(block_ids) * block_size`
    tokens' worth of elements); the result is a view of it.
    """
    L, two, nb_total = data.shape[:3]
    src = data.view(L * two, nb_total, -1)  # [L*2, blocks, bs*kvh*hd]
    idx = torch.tensor(block_ids, device=data.device)
    shape = (L * two, len(block_ids), src.shape[-1])
    padded = torch.empty(shape, dtype=data.dtype, device=data.device) if out is None \
        else out.view(-1)[:math.prod(shape)].view(shape)
    torch.index_select(src, 1, idx, out=padded)
    return padded.view(L, two, -1, *data.shape[-2:])[:, :, :num_tokens]


def segment_name() -> str:
    """A fresh shared-memory segment name, under the deployment's prefix inside one (a
    decoder of the deployment maps no other: engine.core.deployment)."""
    secret = deployment.current()
    return (deployment.segment_prefix(secret) if secret else "adv") + secrets.token_hex(8)


class KVCache:
    """All layers' K and V in fixed-size blocks.

    data: [num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim]
    A slot is `block_id * block_size + offset`. With `shared=True` (CPU only) the
    tensor lives in a named shared-memory segment (`shm_name`) that a decoder on
    the same host maps and reads held blocks from directly: the shm connector's
    one copy.
    """

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device: torch.device,
                 shared: bool = False) -> None:
        self.block_size = block_size
        shape = (num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim)
        self._segment = None
        if shared:
            if torch.device(device).type != "cpu":
                raise ValueError("a shared-memory KV cache must live on the CPU")
            numel = math.prod(shape)
            self._segment = shared_memory.SharedMemory(
                name=segment_name(), create=True,
                size=numel * torch.empty((), dtype=dtype).element_size())
            LOCAL_SEGMENTS.add(self._segment.name)
            # NOTE: fresh shared-memory pages read as zeros, like torch.zeros below
            self.data = torch.frombuffer(self._segment.buf, dtype=dtype, count=numel).view(shape)
        else:
            # NOTE: zeros, not empty: padded block-table entries are read (then masked), and
            # masked garbage that happens to be NaN would poison the softmax @ V
            self.data = torch.zeros(shape, dtype=dtype, device=device)
        if self.data.device.type == "cpu":
            # touched now (~0.2 s per GiB): pages committed on first use would fault
            # inside measured steps, and a host without the memory fails here, not mid-run
            self.data.view(-1)[:: max(1, 4096 // self.data.element_size())].zero_()

    @property
    def shm_name(self) -> str | None:
        return self._segment.name if self._segment else None

    def close(self) -> None:
        """Remove a shared cache's name (its memory goes when the last mapping does)."""
        if self._segment is not None:
            LOCAL_SEGMENTS.discard(self._segment.name)
            self._segment.unlink()
            self._segment = None

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store new keys and values. slots: [T]; k, v: [T, kv_heads, head_dim]"""
        flat = self.data[layer].view(2, -1, *self.data.shape[-2:])  # [2, blocks*bs, kvh, hd]
        flat[0].index_copy_(0, slots, k)
        flat[1].index_copy_(0, slots, v)

    def gather(self, layer: int, block_table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of the blocks in `block_table`.

        block_table: [B, max_blocks] -> k, v: [B, max_blocks * block_size, kvh, hd]
        """
        two, nb_total, bs, kvh, hd = self.data.shape[1:]
        b, width = block_table.shape
        src = self.data[layer].view(two, nb_total, bs * kvh * hd)
        # index_select on the flattened blocks is ~2x faster than advanced indexing
        kv = src.index_select(1, block_table.reshape(-1)).view(two, b, width * bs, kvh, hd)
        return kv[0], kv[1]

    def export(self, block_ids: list[int], num_tokens: int,
               out: torch.Tensor | None = None) -> torch.Tensor:
        """A request's first `num_tokens` tokens as kv: [layers, 2, num_tokens, kvh, hd]."""
        return gather_blocks(self.data, block_ids, num_tokens, out)

    def import_(self, block_ids: list[int], kv: torch.Tensor, start: int = 0) -> None:
        """Write kv: [layers, 2, T, kvh, hd] into the slots of tokens start..start+T-1 of
        `block_ids`."""
        num_tokens = kv.shape[2]
        bs = self.block_size
        slots = torch.tensor([block_ids[t // bs] * bs + t % bs
                              for t in range(start, start + num_tokens)],
                             device=self.data.device)
        flat = self.data.view(*self.data.shape[:2], -1, *self.data.shape[-2:])
        flat[:, :, slots] = kv.to(device=self.data.device, dtype=self.data.dtype)
