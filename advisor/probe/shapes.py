"""Model shapes for sizing and planning: weights, compute per token, and what the KV cache
holds per token and per request for the three layouts P/D has to move (grouped-query
attention, MLA, hybrid attention/SSM). The engine's presets and any local HF
`config.json` are read; `deepseek-v3` and `qwen3-next-80b-a3b` exist only here, for sizing."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from engine.api import DTYPE_BYTES, PRESETS, ModelConfig, check_hf_counts

# bytes per parameter or per cached value: the engine's dtypes, and the quantized formats
# a served model's weights (fp8, int4) or its KV cache (fp8) may be stored in
BYTES: dict[str, float] = {**DTYPE_BYTES, "fp8": 1, "int4": 0.5}


def kv_dtype_for(weights: str) -> str:
    """The KV cache's precision when none is asked for: the weights' where it is a dtype
    the engine computes in, else bfloat16 (quantized weights do not quantize the cache)."""
    return weights if weights in DTYPE_BYTES else "bfloat16"


@dataclass(frozen=True)
class ModelShape:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    params: float  # every parameter (read once per step from memory)
    active_params: float  # the ones a token computes with (MoE: its experts)
    max_context: int
    kind: str = "gqa"  # gqa | mla | hybrid
    attention_layers: int | None = None  # layers with a per-token KV cache (default: all)
    latent_dim: int = 0  # MLA: kv_lora_rank + qk_rope_head_dim
    # fixed per-request state, summed over its layers: hybrid SSM layers' recurrent state,
    # or sliding-window layers' cache (full at the window's length)
    state_elements: int = 0
    weights: str | None = None  # the precision its checkpoint ships in, where its config says
    experts: int = 0  # MoE: routed experts per layer (0: dense)
    experts_per_token: int = 0  # MoE: the experts each token is routed to
    expert_params: float = 0.0  # MoE: every routed expert's parameters, all layers
    intermediate: int = 0  # the MLP's width (MoE: one expert's); 0: not known

    @property
    def kv_layers(self) -> int:
        return self.layers if self.attention_layers is None else self.attention_layers

    def kv_bytes_per_token(self, dtype: str = "bfloat16") -> int:
        b = BYTES[dtype]
        if self.kind == "mla":
            return int(self.kv_layers * self.latent_dim * b)
        return int(self.kv_layers * 2 * self.kv_heads * self.head_dim * b)

    def state_bytes(self, dtype: str = "bfloat16") -> int:
        """Per request, whatever its length (hybrid SSM layers' recurrent and conv state)."""
        return int(self.state_elements * BYTES[dtype])

    def kv_bytes(self, tokens: int, dtype: str = "bfloat16") -> int:
        """What a `tokens`-token prompt's cache holds, and what P/D moves for it."""
        return tokens * self.kv_bytes_per_token(dtype) + self.state_bytes(dtype)

    def weight_bytes(self, dtype: str = "bfloat16") -> float:
        return self.params * BYTES[dtype]

    def weight_bytes_read(self, tokens: Any, dtype: str = "bfloat16") -> Any:
        """What a step of `tokens` tokens (a number or an array) reads of the weights: all
        of a dense model's; of an MoE's, the experts its tokens touch. Under uniform routing
        a layer's expert escapes all `tokens` tokens, each choosing k of E, with
        probability (1 - k/E)^tokens: the expected share touched is one minus that."""
        if not self.experts:
            return self.weight_bytes(dtype)
        # a float's power for one step: numpy's on a scalar costs ~10x, once per step
        many = isinstance(tokens, np.ndarray)
        escape = 1.0 - self.experts_per_token / self.experts
        touched = 1.0 - escape ** (np.maximum(tokens, 1) if many else max(tokens, 1))
        return (self.params - self.expert_params * (1.0 - touched)) * BYTES[dtype]

    def attention_flops_per_pair(self) -> float:
        """FLOPs of one query token attending to one context token, over all layers
        (QK^T and PV: 2 x 2 x heads x head_dim each attention layer)."""
        return 4.0 * self.kv_layers * self.heads * self.head_dim


def _dense_params(c: ModelConfig) -> float:
    attn = c.hidden_size * c.head_dim * (2 * c.num_attention_heads + 2 * c.num_key_value_heads)
    mlp = 3 * c.hidden_size * c.intermediate_size
    embed = c.vocab_size * c.hidden_size * (1 if c.tie_word_embeddings else 2)
    return float(c.num_hidden_layers * (attn + mlp) + embed)


def from_config(c: ModelConfig) -> ModelShape:
    """A dense grouped-query model the engine runs (a preset or a Llama/Qwen config.json)."""
    p = _dense_params(c)
    return ModelShape(c.name, c.num_hidden_layers, c.hidden_size, c.num_attention_heads,
                      c.num_key_value_heads, c.head_dim, p, p, c.max_position_embeddings,
                      intermediate=c.intermediate_size)


def _mla(name: str, d: dict[str, Any], params: float, active: float) -> ModelShape:
    return ModelShape(name, d["num_hidden_layers"], d["hidden_size"], d["num_attention_heads"],
                      d["num_attention_heads"], d.get("qk_nope_head_dim", 128)
                      + d["qk_rope_head_dim"], params, active,
                      d.get("max_position_embeddings", 4096), kind="mla",
                      latent_dim=d["kv_lora_rank"] + d["qk_rope_head_dim"])


def _qwen3_next(name: str, d: dict[str, Any], params: float, active: float) -> ModelShape:
    """Every `full_attention_interval`-th layer attends; the others are Gated DeltaNet with
    a recurrent state (value heads x key dim x value dim) and a short conv state."""
    layers, every = d["num_hidden_layers"], d.get("full_attention_interval", 4)
    attention = layers // every
    kh, vh = d["linear_num_key_heads"], d["linear_num_value_heads"]
    kd, vd = d["linear_key_head_dim"], d["linear_value_head_dim"]
    conv_dim = 2 * kh * kd + vh * vd
    per_layer = vh * kd * vd + (d.get("linear_conv_kernel_dim", 4) - 1) * conv_dim
    return ModelShape(name, layers, d["hidden_size"], d["num_attention_heads"],
                      d["num_key_value_heads"], d["head_dim"], params, active,
                      d.get("max_position_embeddings", 4096), kind="hybrid",
                      attention_layers=attention, state_elements=(layers - attention) * per_layer)


def _nemotron_h(name: str, d: dict[str, Any], params: float, active: float) -> ModelShape:
    """`hybrid_override_pattern`: M = Mamba2 layer (state heads x head_dim x d_state, plus
    conv state), * = attention layer, - = MLP only."""
    pattern = d["hybrid_override_pattern"]
    mamba, attention = pattern.count("M"), pattern.count("*")
    heads, hd, state = d["mamba_num_heads"], d["mamba_head_dim"], d["ssm_state_size"]
    conv_dim = heads * hd + 2 * d.get("n_groups", 1) * state
    per_layer = heads * hd * state + (d.get("conv_kernel", 4) - 1) * conv_dim
    return ModelShape(name, len(pattern), d["hidden_size"], d["num_attention_heads"],
                      d["num_key_value_heads"], d.get("head_dim") or d["hidden_size"]
                      // d["num_attention_heads"], params, active,
                      d.get("max_position_embeddings", 4096), kind="hybrid",
                      attention_layers=attention, state_elements=mamba * per_layer)


def quantized(q: object) -> str | None:
    """The weights' precision a config's `quantization_config` names: fp8 (quant_method
    fp8, or compressed-tensors / modelopt in 8-bit floats), int4 (4-bit weights:
    AWQ, GPTQ, MXFP4, ...); None where there is none or it is another."""
    if not isinstance(q, dict):
        return None
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8" or "fp8" in str(q.get("quant_algo", "")).lower():
        return "fp8"
    if q.get("bits") == 4 or q.get("w_bit") == 4 or method == "mxfp4":
        return "int4"
    return None


def _routed(d: dict[str, Any]) -> tuple[int, int, float]:
    """(routed experts per layer, experts per token, all routed experts' parameters) of a
    config.json; zeros for a dense model."""
    experts = d.get("n_routed_experts") or d.get("num_experts") or 0
    if not experts:
        return 0, 0, 0.0
    inter = d.get("moe_intermediate_size") or d.get("intermediate_size", 4 * d["hidden_size"])
    layers = d["num_hidden_layers"] - d.get("first_k_dense_replace", 0)
    return (int(experts), int(d.get("num_experts_per_tok") or 1),
            float(layers * 3 * d["hidden_size"] * inter * experts))


def _moe_gqa(name: str, d: dict[str, Any]) -> ModelShape:
    """A grouped-query attention MoE (Qwen3-MoE, Mixtral, gpt-oss and alike) from its
    config.json."""
    heads = d["num_attention_heads"]
    kv_heads = d.get("num_key_value_heads", heads)
    head_dim = d.get("head_dim") or d["hidden_size"] // heads
    full, window = _windowed(d, kv_heads, head_dim)
    return ModelShape(name, d["num_hidden_layers"], d["hidden_size"], heads, kv_heads,
                      head_dim, *_moe_params(d), d.get("max_position_embeddings", 4096),
                      attention_layers=full, state_elements=window,
                      weights=quantized(d.get("quantization_config")), **_expert_fields(d),
                      intermediate=d.get("moe_intermediate_size") or d.get("intermediate_size",
                                                                           0))


def _windowed(d: dict[str, Any], kv_heads: int, head_dim: int) -> tuple[int | None, int]:
    """(layers caching every token, elements the sliding-window layers cache per request)
    where `layer_types` names sliding-window layers (gpt-oss alternates them with full
    attention); (None, 0) where it names none: every layer caches every token."""
    sliding = list(d.get("layer_types") or ()).count("sliding_attention")
    if not sliding or not d.get("sliding_window"):
        return None, 0
    return (d["num_hidden_layers"] - sliding,
            sliding * d["sliding_window"] * 2 * kv_heads * head_dim)


def _expert_fields(d: dict[str, Any]) -> dict[str, Any]:
    experts, per_token, params = _routed(d)
    return {"experts": experts, "experts_per_token": per_token, "expert_params": params}


def _moe_params(d: dict[str, Any]) -> tuple[float, float]:
    """(total, active) parameters of a config.json, estimated from its shapes: attention as
    four hidden x hidden projections, MLPs (dense or routed experts plus shared ones) as
    three matrices each, and the embeddings."""
    h, layers = d["hidden_size"], d["num_hidden_layers"]
    experts = d.get("n_routed_experts") or d.get("num_experts") or 0
    inter = d.get("moe_intermediate_size") or d.get("intermediate_size", 4 * h)
    shared = d.get("n_shared_experts") or (1 if d.get("shared_expert_intermediate_size") else 0)
    topk = d.get("num_experts_per_tok") or 1
    embed = 2 * d.get("vocab_size", 0) * h
    if not experts:
        per = 4 * h * h + 3 * h * d.get("intermediate_size", 4 * h)
        return float(layers * per + embed), float(layers * per + embed)
    total = layers * (4 * h * h + 3 * h * inter * (experts + shared)) + embed
    active = layers * (4 * h * h + 3 * h * inter * (topk + shared)) + embed
    return float(total), float(active)


# Shapes from the published config.json files; parameter counts as the model cards give them.
SHAPE_ONLY = {
    "deepseek-v3": _mla("deepseek-v3", {
        "num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 128,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "kv_lora_rank": 512,
        "max_position_embeddings": 163840}, 671e9, 37e9),
    "qwen3-next-80b-a3b": _qwen3_next("qwen3-next-80b-a3b", {
        "num_hidden_layers": 48, "hidden_size": 2048, "num_attention_heads": 16,
        "num_key_value_heads": 2, "head_dim": 256, "full_attention_interval": 4,
        "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
        "max_position_embeddings": 262144}, 80e9, 3e9),
    # Qwen/Qwen3-235B-A22B's config.json (parameters estimated from its shapes: ~235B, ~22B
    # active, as its model card gives them)
    "qwen3-235b-a22b": _moe_gqa("qwen3-235b-a22b", {
        "num_hidden_layers": 94, "hidden_size": 4096, "num_attention_heads": 64,
        "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 12288,
        "moe_intermediate_size": 1536, "num_experts": 128, "num_experts_per_tok": 8,
        "vocab_size": 151936, "max_position_embeddings": 40960}),
    # openai/gpt-oss-120b's config.json: its experts in MXFP4 (4-bit), every other layer
    # attending over a 128-token window (~117B parameters, ~5.1B active, as its model card)
    "gpt-oss-120b": _moe_gqa("gpt-oss-120b", {
        "num_hidden_layers": 36, "hidden_size": 2880, "num_attention_heads": 64,
        "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880,
        "num_experts": 128, "num_experts_per_tok": 4, "vocab_size": 201088,
        "max_position_embeddings": 131072, "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 18,
        "quantization_config": {"quant_method": "mxfp4"}}),
}
NAMES = (*PRESETS, *SHAPE_ONLY)


def from_hf_dict(d: dict[str, Any], name: str) -> ModelShape:
    """Any config.json: MLA and the hybrid layouts here, the rest as the engine reads it;
    its weights' precision from its `quantization_config`, where it has one. ValueError
    for a number out of range (engine.api.check_hf_counts)."""
    check_hf_counts(d)
    if "kv_lora_rank" in d:
        shape = _mla(name, d, *_moe_params(d))
    elif "linear_num_value_heads" in d:
        shape = _qwen3_next(name, d, *_moe_params(d))
    elif "hybrid_override_pattern" in d:
        shape = _nemotron_h(name, d, *_moe_params(d))
    elif d.get("num_experts") or d.get("num_local_experts") or d.get("n_routed_experts"):
        d = {**d, "num_experts": d.get("num_experts") or d.get("num_local_experts")}
        return _moe_gqa(name, d)
    else:
        from engine.api import config_from_hf_dict

        shape = from_config(config_from_hf_dict(d, name))
    return replace(shape, weights=quantized(d.get("quantization_config")))



# presets that mimic a published model: the name vLLM loads it by
HF_NAMES = {"qwen2.5-0.5b": "Qwen/Qwen2.5-0.5B-Instruct", "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
            "qwen3-0.6b": "Qwen/Qwen3-0.6B", "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
            "llama-3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
            "deepseek-v3": "deepseek-ai/DeepSeek-V3",
            "qwen3-next-80b-a3b": "Qwen/Qwen3-Next-80B-A3B-Instruct",
            "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B", "gpt-oss-120b": "openai/gpt-oss-120b"}
_PRESET_OF = {hf: preset for preset, hf in HF_NAMES.items()}


def shape_of(model: str) -> ModelShape:
    """A preset (the engine's or a shape-only one), the published name a preset mimics
    (HF_NAMES), or a local directory / config.json. ValueError naming what is wrong."""
    model = _PRESET_OF.get(model, model)
    if model in PRESETS:
        return from_config(PRESETS[model])
    if model in SHAPE_ONLY:
        return SHAPE_ONLY[model]
    path = Path(model)
    path = path / "config.json" if path.is_dir() else path
    if not path.is_file():
        raise ValueError(f"unknown model {model!r}: not a preset ({', '.join(NAMES)}) nor a "
                         "local directory with config.json")
    try:
        d = json.loads(path.read_text())
        return from_hf_dict(d, model)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: {e}") from None
    except KeyError as e:
        raise ValueError(f"{path} lacks field {e.args[0]!r}") from None
    except (TypeError, AttributeError, RecursionError) as e:
        raise ValueError(f"{path}: not an HF config.json this can read ({type(e).__name__}: "
                         f"{str(e)[:200]})") from None
    except ValueError as e:  # a number out of range, or one of thousands of digits
        raise ValueError(f"{path}: {str(e)[:200]}") from None
