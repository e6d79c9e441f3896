"""A naive reference decoder: contiguous tensors, no cache, full recompute per token.

Written from the Hugging Face tensor names with plain math, independent of the
engine's fused layers and paged attention, so it can serve as ground truth.
"""

from __future__ import annotations

import torch

from engine.core.config import ModelConfig


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rope(x: torch.Tensor, theta: float) -> torch.Tensor:
    # x: [T, heads, hd]; rotate pairs (i, i + hd/2) by angle pos * theta^(-2i/hd)
    T, _, hd = x.shape
    inv = theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]  # [T, hd/2]
    cos, sin = ang.cos().to(x.dtype)[:, None, :], ang.sin().to(x.dtype)[:, None, :]
    a, b = x[..., : hd // 2], x[..., hd // 2:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


@torch.no_grad()
def reference_logits(sd: dict[str, torch.Tensor], cfg: ModelConfig, ids: list[int]) -> torch.Tensor:
    """Logits [T, vocab] for every position of `ids`."""
    T, H, K, hd = len(ids), cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    eps = cfg.rms_norm_eps
    x = sd["model.embed_tokens.weight"][torch.tensor(ids)].float()
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        w = {k[len(p):]: v.float() for k, v in sd.items() if k.startswith(p)}
        h = _rms(x, w["input_layernorm.weight"], eps)
        q = h @ w["self_attn.q_proj.weight"].T + w.get("self_attn.q_proj.bias", 0)
        k = h @ w["self_attn.k_proj.weight"].T + w.get("self_attn.k_proj.bias", 0)
        v = h @ w["self_attn.v_proj.weight"].T + w.get("self_attn.v_proj.bias", 0)
        q, k, v = q.view(T, H, hd), k.view(T, K, hd), v.view(T, K, hd)
        if cfg.qk_norm:
            q = _rms(q, w["self_attn.q_norm.weight"], eps)
            k = _rms(k, w["self_attn.k_norm.weight"], eps)
        q, k = _rope(q, cfg.rope_theta), _rope(k, cfg.rope_theta)
        k, v = k.repeat_interleave(H // K, dim=1), v.repeat_interleave(H // K, dim=1)
        att = torch.einsum("thd,shd->hts", q, k) / hd ** 0.5
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        o = torch.einsum("hts,shd->thd", att, v).reshape(T, H * hd)
        x = x + o @ w["self_attn.o_proj.weight"].T
        h = _rms(x, w["post_attention_layernorm.weight"], eps)
        gate = h @ w["mlp.gate_proj.weight"].T
        up = h @ w["mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w["mlp.down_proj.weight"].T
    x = _rms(x, sd["model.norm.weight"].float(), eps)
    head = sd.get("lm_head.weight", sd["model.embed_tokens.weight"]).float()
    return x @ head.T


def reference_greedy(sd, cfg: ModelConfig, prompt: list[int], max_tokens: int) -> list[int]:
    """Greedy continuation by full recompute, ignoring EOS."""
    ids = list(prompt)
    out = []
    for _ in range(max_tokens):
        tok = int(reference_logits(sd, cfg, ids)[-1].argmax())
        out.append(tok)
        ids.append(tok)
    return out
