"""Attention over the paged KV cache for a mixed batch of decodes and prefill chunks."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.model.kv_cache import KVCache


@dataclass
class PrefillSegment:
    """A chunk of one request's tokens: rows [start, end) of the batch, attending to
    `context_len` tokens (cached prefix + this chunk)."""

    start: int
    end: int
    context_len: int
    block_table: torch.Tensor | None  # [1, num_blocks]; None when the chunk is the whole context


@dataclass
class AttentionMetadata:
    """Built by the model runner once per step, shared by every layer.

    The batch holds `num_decodes` single-token queries first, then prefill segments.
    """

    slot_mapping: torch.Tensor  # [T] cache slot of every new token
    num_decodes: int
    decode_block_tables: torch.Tensor | None  # [Bd, max_blocks]
    decode_mask: torch.Tensor | None  # [Bd, 1, 1, max_blocks * block_size] 0 = attend, -inf
    prefills: list[PrefillSegment]


def _causal_mask(num_queries: int, context_len: int, device: torch.device) -> torch.Tensor:
    # Query i sits at position context_len - num_queries + i and sees keys up to it.
    q_pos = torch.arange(context_len - num_queries, context_len, device=device)
    k_pos = torch.arange(context_len, device=device)
    return k_pos[None, :] <= q_pos[:, None]  # [nq, ctx]


def _decode_attention(q: torch.Tensor, cache: KVCache, layer: int,
                      meta: AttentionMetadata) -> torch.Tensor:
    # q: [Bd, H, hd] -> [Bd, H, hd]
    # torch's CPU SDPA kernel, not batched matmuls: it reads K and V in place, where the
    # matmuls copy them into their layout first (2-3x slower for single-token queries)
    assert meta.decode_block_tables is not None  # a step with decodes has them
    kc, vc = cache.gather(layer, meta.decode_block_tables)  # [Bd, L, kvh, hd]
    bd, heads, hd = q.shape
    kvh = kc.shape[2]
    # NOTE: the query heads sharing a KV head go in as that head's queries (one position, no
    # causal mask), so each K and V row is read once per KV head, not per query head
    o = F.scaled_dot_product_attention(
        q.view(bd, kvh, heads // kvh, hd), kc.transpose(1, 2), vc.transpose(1, 2),
        attn_mask=meta.decode_mask)  # [Bd, kvh, H / kvh, hd]
    return o.reshape(bd, heads, hd)


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int,
                    cache: KVCache, meta: AttentionMetadata) -> torch.Tensor:
    """Store this step's K/V and attend.

    q: [T, H, hd]; k, v: [T, kvh, hd] -> out: [T, H, hd]
    """
    cache.write(layer, meta.slot_mapping, k, v)
    nd = meta.num_decodes
    if not meta.prefills:  # decodes only: no copy into a mixed output
        return _decode_attention(q, cache, layer, meta)
    out = torch.empty_like(q)
    if nd:
        out[:nd] = _decode_attention(q[:nd], cache, layer, meta)
    for seg in meta.prefills:
        qs = q[seg.start:seg.end].transpose(0, 1).unsqueeze(0)  # [1, H, n, hd]
        if seg.block_table is None:
            ks, vs = k[seg.start:seg.end], v[seg.start:seg.end]
            mask, causal = None, True
        else:
            ks, vs = cache.gather(layer, seg.block_table)
            ks, vs = ks[0, :seg.context_len], vs[0, :seg.context_len]
            mask, causal = _causal_mask(seg.end - seg.start, seg.context_len, q.device), False
        o = F.scaled_dot_product_attention(
            qs, ks.transpose(0, 1).unsqueeze(0), vs.transpose(0, 1).unsqueeze(0),
            attn_mask=mask, is_causal=causal, enable_gqa=True)  # [1, H, n, hd]
        out[seg.start:seg.end] = o[0].transpose(0, 1)
    return out
