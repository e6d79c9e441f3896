"""Model weights: seeded dummy weights, or Hugging Face safetensors from a local directory."""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch

from engine.model.causal_lm import CausalLM

# HF projection -> (our fused parameter, index of its slice)
_FUSED = {"q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
          "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}
_PROJ = re.compile(
    r"^(layers\.\d+\.(?:self_attn|mlp))\.(q_proj|k_proj|v_proj|gate_proj|up_proj)\.(weight|bias)$"
)


@torch.no_grad()
def init_dummy(model: CausalLM, seed: int) -> None:
    """Deterministic weights for `seed`, scaled so activations and logits stay O(1-10).

    Linear weights ~ N(0, 4/fan_in): with gain 1 the residual stream stays near the
    input embedding and greedy output repeats one token; gain 2 gives varied text.
    Embeddings ~ N(0, D^-1/2) give logits of a few units, tied or not.
    """
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.fill_(1.0)
        elif name.endswith("bias"):
            p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
        elif name == "embed_tokens.weight":
            p.copy_(torch.randn(p.shape, generator=gen) * model.cfg.hidden_size**-0.25)
        else:
            p.copy_(torch.randn(p.shape, generator=gen) * (2.0 / math.sqrt(p.shape[1])))


def _slices(model: CausalLM, fused: str) -> list[int]:
    cfg = model.cfg
    if fused == "qkv_proj":
        kv = cfg.num_key_value_heads * cfg.head_dim
        return [cfg.num_attention_heads * cfg.head_dim, kv, kv]
    return [cfg.intermediate_size, cfg.intermediate_size]


def _target(model: CausalLM, hf_name: str) -> tuple[str, int | None]:
    """Our parameter name for an HF tensor name, and which slice of a fused one."""
    name = hf_name.removeprefix("model.")
    m = _PROJ.match(name)
    if m:
        fused, idx = _FUSED[m.group(2)]
        return f"{m.group(1)}.{fused}.{m.group(3)}", idx
    return name, None


@torch.no_grad()
def load_state_dict(model: CausalLM, tensors: dict[str, torch.Tensor]) -> None:
    """Copy HF-named tensors into `model`; raise ValueError on unknown, missing or misshapen
    ones."""
    params = dict(model.named_parameters())
    seen: set[tuple[str, int | None]] = set()
    for hf_name, t in tensors.items():
        if "rotary_emb" in hf_name:
            continue
        name, idx = _target(model, hf_name)
        if name == "lm_head.weight" and model.lm_head is None:
            continue  # tied: some checkpoints still store it
        if name not in params:
            raise ValueError(f"unexpected tensor {hf_name!r} in checkpoint")
        dst: torch.Tensor = params[name]
        if idx is not None:
            sizes = _slices(model, name.split(".")[-2])
            dst = dst.narrow(0, sum(sizes[:idx]), sizes[idx])
        if tuple(dst.shape) != tuple(t.shape):
            raise ValueError(
                f"tensor {hf_name!r} has shape {tuple(t.shape)}, expected {tuple(dst.shape)}"
            )
        dst.copy_(t.to(dst.dtype))
        seen.add((name, idx))
    for name in params:
        fused = name.split(".")[-2]
        parts = (
            range(len(_slices(model, fused))) if fused in ("qkv_proj", "gate_up_proj") else [None]
        )
        if any((name, i) not in seen for i in parts):
            raise ValueError(f"checkpoint lacks weights for {name!r}")


def hf_state_dict(model: CausalLM) -> dict[str, torch.Tensor]:
    """The model's weights under Hugging Face names (the inverse of load_state_dict)."""
    inverse = {(f, i): hf for hf, (f, i) in _FUSED.items()}
    out = {}
    for name, p in model.named_parameters():
        fused = name.split(".")[-2]
        if fused in ("qkv_proj", "gate_up_proj"):
            prefix, kind = name.rsplit(".", 2)[0], name.rsplit(".", 1)[1]
            for i, part in enumerate(p.detach().split(_slices(model, fused))):
                out[f"model.{prefix}.{inverse[(fused, i)]}.{kind}"] = part.contiguous()
        elif name == "lm_head.weight":
            out[name] = p.detach().contiguous()
        else:  # contiguous: pack_weights may have re-laid it (linear.vector_layout)
            out[f"model.{name}"] = p.detach().contiguous()
    return out


def load_safetensors_dir(model: CausalLM, directory: str | Path) -> None:
    """Load every `*.safetensors` file of a local directory into `model`."""
    from safetensors.torch import load_file

    files = sorted(Path(directory).glob("*.safetensors"))
    if not files:
        raise ValueError(f"no *.safetensors files in {directory}")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(load_file(str(f)))
    load_state_dict(model, tensors)
