"""A Llama / Qwen2 / Qwen3 decoder over a paged KV cache.

Projections are fused (q|k|v and gate|up) so a decode step issues few matmuls;
`engine.model.weights` maps Hugging Face tensor names onto the fused parameters.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from engine.core.config import ModelConfig
from engine.model.attention import AttentionMetadata, paged_attention
from engine.model.kv_cache import KVCache
from engine.model.linear import (
    SMALL_BATCH,
    Linear,
    can_gate,
    gated,
    linear,
    pack,
    vector_layout,
    warm,
)

NORM_CHUNK = 1 << 17  # elements a norm takes per pass: 128 tokens of a 1024-wide model


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [T, ..., dim] -> the same; normalised over dim, NORM_CHUNK elements at a time
        # in 128-token pieces, so that each pass's float32 temporaries stay in the cache
        # (a whole prefill's go to memory, ~2.5x slower)
        rows = max(1, NORM_CHUNK // x[0].numel())
        out = torch.empty_like(x)
        if x.shape[0] <= rows:  # a decode step's batch: one pass, no slicing
            self._norm(x, out)
            return out
        for i in range(0, x.shape[0], rows):
            self._norm(x[i:i + rows], out[i:i + rows])
        return out

    def _norm(self, x: torch.Tensor, out: torch.Tensor) -> None:
        # as HF: x * rsqrt(mean(x^2) + eps) in float32, rounded, times weight
        # one float32 reduction and the product rounded as written (out=), as HF's .to()
        # does, not F.rms_norm on x.float(), which runs ~6 passes over a float32 copy
        s = torch.linalg.vector_norm(x, 2, -1, keepdim=True, dtype=torch.float32)  # [..., 1]
        r = s.mul_(s).mul_(1 / x.shape[-1]).add_(self.eps).rsqrt_()
        torch.mul(x, r, out=out).mul_(self.weight)


class Rotary:
    """Rotary position embedding, HF's rotate-half convention. Tables live on `device`
    (not module buffers, so the model itself can be built on the meta device)."""

    def __init__(self, head_dim: int, max_positions: int, theta: float,
                 device: torch.device) -> None:
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32,
                                                 device=device) / head_dim))
        freqs = torch.outer(torch.arange(max_positions, dtype=torch.float32, device=device),
                            inv_freq)
        self.cos = torch.cat([freqs, freqs], dim=-1).cos()  # [max_pos, hd]
        # sin with its first half negated, so rotate-half is a roll (apply_rotary)
        self.sin = torch.cat([-freqs, freqs], dim=-1).sin()  # [max_pos, hd]

    def at(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, signed sin: [T, 1, hd] for positions: [T], looked up once per step for
        every layer."""
        return (self.cos[positions].unsqueeze(1).to(dtype),
                self.sin[positions].unsqueeze(1).to(dtype))


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [T, heads, hd]; cos, sin: [T, 1, hd] (Rotary.at: sin's first half negated)
    # rotate-half(x) * sin == roll(x, hd/2) * signed sin: three kernels instead of six
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, -1), sin)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.qkv_proj = Linear(cfg.hidden_size, (self.nh + 2 * self.nkv) * self.hd,
                                  bias=cfg.attention_bias)
        self.o_proj = Linear(self.nh * self.hd, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.hd, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(self.hd, cfg.rms_norm_eps) if cfg.qk_norm else None

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                cache: KVCache, meta: AttentionMetadata) -> torch.Tensor:
        # x: [T, D]
        T = x.shape[0]
        qkv = self.qkv_proj(x)  # [T, (H + 2 kvh) hd]
        nq = self.nh * self.hd
        v = qkv[:, nq + self.nkv * self.hd:].view(T, self.nkv, self.hd)
        if self.q_norm is not None and self.k_norm is not None:
            q = apply_rotary(self.q_norm(qkv[:, :nq].view(T, self.nh, self.hd)), *rope)
            k = apply_rotary(self.k_norm(qkv[:, nq:nq + self.nkv * self.hd]
                                         .view(T, self.nkv, self.hd)), *rope)
        else:  # q and k rotated together: [T, H + kvh, hd]
            qk = apply_rotary(qkv[:, :nq + self.nkv * self.hd].view(T, -1, self.hd), *rope)
            q, k = qk[:, :self.nh], qk[:, self.nh:]
        o = paged_attention(q, k, v, self.layer, cache, meta)  # [T, H, hd]
        return cast(torch.Tensor, self.o_proj(o.reshape(T, self.nh * self.hd)))


class MLP(nn.Module):
    halves: tuple[torch.Tensor, torch.Tensor] | None = None  # packed gate, up (pack_weights)

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.inter = cfg.intermediate_size
        self.gate_up_proj = Linear(cfg.hidden_size, 2 * self.inter, bias=False)
        self.down_proj = Linear(self.inter, cfg.hidden_size, bias=False)

    def pack_weights(self) -> None:
        """Pack gate and up apart for prefill-sized inputs (`linear.gated`), where that
        runs; decode keeps the fused gate|up (one GEMV streams both)."""
        w = self.gate_up_proj.weight
        gate, up = (pack(w[: self.inter]), pack(w[self.inter:])) if can_gate(w) else (None, None)
        self.halves = (gate, up) if gate is not None and up is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [T, D] -> [T, D]
        if self.halves is not None and x.shape[0] > SMALL_BATCH:
            return cast(torch.Tensor, self.down_proj(gated(x, *self.halves)))
        gate, up = self.gate_up_proj(x).split(self.inter, dim=-1)
        return cast(torch.Tensor, self.down_proj(F.silu(gate).mul_(up)))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], cache: KVCache,
                meta: AttentionMetadata) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope, cache, meta)
        return cast(torch.Tensor, x + self.mlp(self.post_attention_layernorm(x)))


class CausalLM(nn.Module):
    """Token ids in, hidden states out; `compute_logits` on the rows that sample."""

    def __init__(self, cfg: ModelConfig, device: torch.device) -> None:
        super().__init__()
        self.cfg = cfg
        # the weight is given so that no init runs on "meta", where normal_ would import
        # torch._dynamo (~3 s per engine start)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size,
                                         _weight=torch.empty(cfg.vocab_size, cfg.hidden_size))
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary = Rotary(cfg.head_dim, cfg.max_position_embeddings, cfg.rope_theta, device)
        self.lm_head = None if cfg.tie_word_embeddings else Linear(
            cfg.hidden_size, cfg.vocab_size, bias=False)
        # the tied head's weight as compute_logits multiplies by it, and its packed copy
        # (pack_weights sets them)
        self._head: torch.Tensor | None = None
        self._head_packed: torch.Tensor | None = None

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                meta: AttentionMetadata) -> torch.Tensor:
        # input_ids, positions: [T] -> hidden: [T, D]
        x = self.embed_tokens(input_ids)
        rope = self.rotary.at(positions, x.dtype)
        for layer in self.layers:
            x = layer(x, rope, cache, meta)
        return cast(torch.Tensor, self.norm(x))

    def pack_weights(self) -> None:
        """Give every projection and the LM head a copy laid out for decode-sized batches
        (`engine.model.linear`) and lay their weights out for vectors; call once the
        weights are loaded, before compute_logits."""
        for module in self.modules():
            if isinstance(module, (Linear, MLP)):
                module.pack_weights()
        if self.lm_head is None:
            # a copy where vector_layout re-lays it: the embedding's lookup reads rows
            w = self.embed_tokens.weight.detach()
            self._head, self._head_packed = vector_layout(w), pack(w)
            warm(self._head, None, self._head_packed)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        # hidden: [N, D] -> logits: [N, vocab] in float32
        if self.lm_head is not None:
            return cast(torch.Tensor, self.lm_head(hidden).float())
        assert self._head is not None  # laid out by pack_weights
        return linear(hidden, self._head, None, self._head_packed).float()
