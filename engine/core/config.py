"""Model and engine configuration: HF-style model fields, named presets, engine knobs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
DTYPES = ("auto", *DTYPE_BYTES)  # what a user may ask for; auto is resolved before running
BODY_BYTES_PER_TOKEN = 64  # a request body's bytes per context token at most: JSON, escapes
BODY_FLOOR_BYTES = 1 << 20
DEFAULT_BODY_BYTES = 64 << 20  # a front that does not know the model's context
ID_BYTES_PER_TOKEN = 8  # a token ID in JSON, its comma included
LEG_BYTES = 64 << 10  # what a front adds to a body it passes on, but the IDs


def max_body_bytes(context_tokens: int, passed_on: bool = False) -> int:
    """The largest request body a model of `context_tokens` can need: one past it cannot
    fit, and is refused (413) before it is read whole, let alone parsed. A body `passed_on`
    by a front may carry more: the prompt's token IDs and the front's own fields."""
    client = max(BODY_FLOOR_BYTES, BODY_BYTES_PER_TOKEN * context_tokens)
    return client + (ID_BYTES_PER_TOKEN * context_tokens + LEG_BYTES if passed_on else 0)


API_KEY_ENV = "ADVISOR_API_KEY"  # how the launcher hands a front its key (not argv: ps shows it)


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype: str) -> int:
    """KV cache bytes per token: layers x 2 (K, V) x KV heads x head_dim x dtype bytes."""
    return layers * 2 * kv_heads * head_dim * DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class ModelConfig:
    """A Llama/Qwen2/Qwen3-architecture decoder, with Hugging Face field names."""

    name: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    torch_dtype: str = "bfloat16"
    attention_bias: bool = False  # Qwen2 has q/k/v biases
    qk_norm: bool = False  # Qwen3 normalizes q and k per head
    eos_token_id: int | None = None

    def kv_bytes_per_token(self, dtype: str | None = None) -> int:
        """KV cache bytes per token in `dtype` (default: the model's own)."""
        return kv_bytes_per_token(self.num_hidden_layers, self.num_key_value_heads,
                                  self.head_dim, dtype or self.torch_dtype)

    def validate(self) -> None:
        """Raise ValueError when the shapes cannot form a model."""
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.head_dim % 2:
            raise ValueError("head_dim must be even for rotary embeddings")
        for f in ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size",
                  "max_position_embeddings"):
            if getattr(self, f) < 1:
                raise ValueError(f"{f} must be positive")


def _preset(name: str, **kw: Any) -> ModelConfig:
    return ModelConfig(name=name, **kw)


PRESETS: dict[str, ModelConfig] = {
    # For tests: milliseconds per step; small vocab keeps greedy ties improbable.
    "tiny": _preset("tiny", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, intermediate_size=128, vocab_size=512,
                    max_position_embeddings=2048, tie_word_embeddings=True, eos_token_id=2),
    # tiny as vLLM's CPU attention can serve it (head_dim 32 or more): real vLLM in tests
    "mini": _preset("mini", hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=32, intermediate_size=256, vocab_size=512,
                    max_position_embeddings=2048, tie_word_embeddings=True, eos_token_id=2),
    # The CPU demo model: a 1k-token prefill costs ~0.7 s on one core in bf16, a
    # decode step ~20 ms (weight-read bound). Few, wide layers keep prefill GEMM-bound.
    "small": _preset("small", hidden_size=1024, num_hidden_layers=4, num_attention_heads=8,
                     num_key_value_heads=2, head_dim=64, intermediate_size=3584,
                     vocab_size=16384, max_position_embeddings=16384,
                     tie_word_embeddings=True, eos_token_id=2),
    "qwen2.5-0.5b": _preset("qwen2.5-0.5b", hidden_size=896, num_hidden_layers=24,
                            num_attention_heads=14, num_key_value_heads=2, head_dim=64,
                            intermediate_size=4864, vocab_size=151936,
                            max_position_embeddings=32768, rope_theta=1000000.0,
                            tie_word_embeddings=True, attention_bias=True,
                            eos_token_id=151645),
    "qwen2.5-7b": _preset("qwen2.5-7b", hidden_size=3584, num_hidden_layers=28,
                          num_attention_heads=28, num_key_value_heads=4, head_dim=128,
                          intermediate_size=18944, vocab_size=152064,
                          max_position_embeddings=32768, rope_theta=1000000.0,
                          attention_bias=True, eos_token_id=151645),
    "qwen3-0.6b": _preset("qwen3-0.6b", hidden_size=1024, num_hidden_layers=28,
                          num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                          intermediate_size=3072, vocab_size=151936,
                          max_position_embeddings=40960, rope_theta=1000000.0,
                          tie_word_embeddings=True, qk_norm=True, eos_token_id=151645),
    "llama-3.1-8b": _preset("llama-3.1-8b", hidden_size=4096, num_hidden_layers=32,
                            num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                            intermediate_size=14336, vocab_size=128256,
                            max_position_embeddings=131072, rope_theta=500000.0,
                            rms_norm_eps=1e-5, eos_token_id=128009),
    "llama-3.1-70b": _preset("llama-3.1-70b", hidden_size=8192, num_hidden_layers=80,
                             num_attention_heads=64, num_key_value_heads=8, head_dim=128,
                             intermediate_size=28672, vocab_size=128256,
                             max_position_embeddings=131072, rope_theta=500000.0,
                             rms_norm_eps=1e-5, eos_token_id=128009),
}

_SSM_KEYS = ("mamba_d_state", "ssm_state_size", "layers_block_type", "hybrid_override_pattern",
             "layer_types_mamba")
_SUPPORTED_ARCHS = {
    "LlamaForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "MistralForCausalLM",
}


# the numbers a config.json may give, each an integer from 1 (or 0) to a bound past any
# published model's: a 4,000-digit size, 28.5 layers or zero heads are no model
HF_COUNTS: dict[str, tuple[int, int]] = {
    "num_hidden_layers": (1, 1024), "hidden_size": (1, 1 << 17), "head_dim": (1, 4096),
    "num_attention_heads": (1, 4096), "num_key_value_heads": (1, 4096),
    "intermediate_size": (1, 1 << 20), "moe_intermediate_size": (1, 1 << 20),
    "shared_expert_intermediate_size": (0, 1 << 20), "vocab_size": (1, 1 << 23),
    "max_position_embeddings": (1, 1 << 24), "num_experts": (0, 1 << 14),
    "num_local_experts": (0, 1 << 14), "n_routed_experts": (0, 1 << 14),
    "num_experts_per_tok": (1, 1 << 10), "n_shared_experts": (0, 1 << 10),
    "first_k_dense_replace": (0, 1024), "full_attention_interval": (1, 1024),
    "kv_lora_rank": (1, 1 << 14), "q_lora_rank": (1, 1 << 14), "qk_nope_head_dim": (1, 4096),
    "qk_rope_head_dim": (1, 4096), "v_head_dim": (1, 4096), "linear_num_value_heads": (1, 4096),
    "linear_num_key_heads": (1, 4096), "linear_key_head_dim": (1, 4096),
    "linear_value_head_dim": (1, 4096), "sliding_window": (0, 1 << 24)}


def check_hf_counts(d: dict[str, Any]) -> None:
    """ValueError naming the first field of a config.json whose number is out of
    HF_COUNTS' range (or not an integer); null stands for absent."""
    for key, (low, high) in HF_COUNTS.items():
        v = d.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)
                              or not low <= v <= high):
            raise ValueError(f"{key} must be an integer from {low} to {high}, not "
                             f"{str(v)[:20]}")


def config_from_hf_dict(d: dict[str, Any], name: str) -> ModelConfig:
    """Build a ModelConfig from a Hugging Face `config.json` dictionary.

    Raises ValueError for architectures whose KV layout this engine does not model
    (MLA, hybrid SSM, ...), rather than guessing, and for a number out of range.
    """
    check_hf_counts(d)
    archs = d.get("architectures") or []
    if archs and not set(archs) & _SUPPORTED_ARCHS:
        raise ValueError(
            f"architecture {archs[0]} is not supported yet "
            f"(supported: {', '.join(sorted(_SUPPORTED_ARCHS))})"
        )
    # NOTE: these keep state that is not per-head K and V per token: refused, not guessed.
    if "kv_lora_rank" in d:
        raise ValueError("MLA (latent KV, kv_lora_rank) models are not supported yet")
    if any(k in d for k in _SSM_KEYS) or "mamba" in str(d.get("model_type", "")).lower():
        raise ValueError(
            "hybrid SSM models (per-request state, not per-token KV) are not supported yet"
        )
    try:
        heads = d["num_attention_heads"]
        eos = d.get("eos_token_id")
        cfg = ModelConfig(
            name=name,
            hidden_size=d["hidden_size"],
            num_hidden_layers=d["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=d.get("num_key_value_heads", heads),
            head_dim=d.get("head_dim") or d["hidden_size"] // heads,
            intermediate_size=d["intermediate_size"],
            vocab_size=d["vocab_size"],
            max_position_embeddings=d.get("max_position_embeddings", 4096),
            rope_theta=float(d.get("rope_theta", 10000.0)),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            torch_dtype=str(d.get("torch_dtype", "bfloat16")),
            attention_bias=bool(d.get("attention_bias", "Qwen2ForCausalLM" in archs)),
            qk_norm="Qwen3ForCausalLM" in archs,
            eos_token_id=eos[0] if isinstance(eos, list) else eos,
        )
    except KeyError as e:
        raise ValueError(f"config.json lacks field {e.args[0]!r}") from None
    cfg.validate()
    return cfg


def load_model_config(model: str) -> ModelConfig:
    """A preset name, a directory holding `config.json`, or a path to a config.json."""
    if model in PRESETS:
        return PRESETS[model]
    path = Path(model)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ValueError(
            f"unknown model {model!r}: not a preset ({', '.join(PRESETS)}) "
            "nor a local directory with config.json"
        )
    try:
        d = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read {path}: {e}") from None
    return config_from_hf_dict(d, name=str(path.parent.name))


@dataclass(frozen=True)
class EngineConfig:
    """Engine knobs. One small dataclass; the LLM and server constructors fill it."""

    model: str = "tiny"
    seed: int = 0
    device: str = "cpu"
    dtype: str = "auto"  # or float32 / bfloat16 / float16; auto: what is fast here (model.dtype)
    block_size: int = 16
    num_kv_blocks: int | None = None
    kv_cache_memory_gib: float = 2.0  # used when num_kv_blocks is None
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    role: str = "both"  # both | prefill | decode
    kv_lease_duration: float = 30.0
    kv_load_failure_policy: str = "fail"  # fail | recompute
    kv_shared_memory: bool = False  # KV cache in named shared memory (the shm connector reads it)
    # bidirectional KV (decode role): keep finished turns for their conversation's next turn
    keep_conversations: bool = False
    decoder_kv_ttl: float = 480.0  # vLLM's default lease for a decoder's kept KV
    decoder_kv_blocks: int | None = None  # budget of kept blocks; None: a quarter of the pool
    num_threads: int | None = None  # CPU only; None keeps torch's default
    max_model_len: int | None = None  # context (prompt + output); None: the model's own
    model_config: ModelConfig | None = field(default=None, compare=False)

    def validate(self) -> None:
        """Raise ValueError naming the first bad knob."""
        if self.role not in ("both", "prefill", "decode"):
            raise ValueError(f"role must be both, prefill or decode, not {self.role!r}")
        if self.kv_load_failure_policy not in ("fail", "recompute"):
            raise ValueError("kv_load_failure_policy must be 'fail' or 'recompute'")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {self.dtype!r}")
        if self.block_size < 1 or self.max_num_batched_tokens < 1 or self.max_num_seqs < 1:
            raise ValueError("block_size, max_num_batched_tokens and max_num_seqs must be positive")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 1:
            raise ValueError("num_kv_blocks must be positive")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError("max_model_len must be positive")

    @property
    def model_shape(self) -> ModelConfig:
        """The model's config; ValueError before `resolved()` loaded it."""
        if self.model_config is None:
            raise ValueError(f"the config of {self.model!r} is not loaded: resolve it first")
        return self.model_config

    def resolved(self) -> EngineConfig:
        """This config with `model_config` loaded from `model`."""
        cfg = (
            self if self.model_config else replace(self, model_config=load_model_config(self.model))
        )
        cfg.validate()
        return cfg
