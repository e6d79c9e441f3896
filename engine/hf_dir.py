"""A model as a Hugging Face directory that other engines load (vLLM among them): config.json,
the tokenizer with its chat template, and, where asked, the seeded weights this engine would
run, as safetensors, so that both engines serve the same model."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from engine.core.config import ModelConfig
from engine.model.causal_lm import CausalLM
from engine.model.weights import hf_state_dict, init_dummy
from engine.render.tokenizer import (
    DEFAULT_CHAT_TEMPLATE,
    DEFAULT_TOKENIZER,
    REALISTIC_TOKENIZER,
    REALISTIC_VOCAB,
    SPECIAL_TOKENS,
)


def architecture(cfg: ModelConfig) -> tuple[str, str]:
    """(architectures[0], model_type) of the HF family whose layers `cfg` has: Qwen3 (q/k
    norms), Qwen2 (q/k/v biases), else Llama."""
    if cfg.qk_norm:
        return "Qwen3ForCausalLM", "qwen3"
    if cfg.attention_bias:
        return "Qwen2ForCausalLM", "qwen2"
    return "LlamaForCausalLM", "llama"


def hf_config(cfg: ModelConfig, dtype: str) -> dict[str, Any]:
    """config.json's fields for `cfg`, its weights stored in `dtype`."""
    arch, model_type = architecture(cfg)
    return {"architectures": [arch], "model_type": model_type,
            "hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_hidden_layers,
            "num_attention_heads": cfg.num_attention_heads,
            "num_key_value_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim,
            "intermediate_size": cfg.intermediate_size, "vocab_size": cfg.vocab_size,
            "max_position_embeddings": cfg.max_position_embeddings,
            "rope_theta": cfg.rope_theta, "rms_norm_eps": cfg.rms_norm_eps,
            "tie_word_embeddings": cfg.tie_word_embeddings, "hidden_act": "silu",
            "attention_bias": cfg.attention_bias, "torch_dtype": dtype,
            "eos_token_id": cfg.eos_token_id, "bos_token_id": None}


def write_hf_dir(cfg: ModelConfig, path: Path, seed: int | None = 0,
                 dtype: str = "float32") -> Path:
    """`path` holding `cfg` as an HF model: config.json, tokenizer.json and
    tokenizer_config.json (the bundled tokenizer this engine gives a model of that vocabulary,
    and its chat template), and, unless `seed` is None, model.safetensors with the weights
    this engine draws for `seed` (else load it with vLLM's --load-format dummy)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(hf_config(cfg, dtype), indent=1))
    realistic = cfg.vocab_size >= REALISTIC_VOCAB
    shutil.copyfile(REALISTIC_TOKENIZER if realistic else DEFAULT_TOKENIZER,
                    path / "tokenizer.json")
    eos = SPECIAL_TOKENS[cfg.eos_token_id] if cfg.eos_token_id is not None and \
        cfg.eos_token_id < len(SPECIAL_TOKENS) else None
    (path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": DEFAULT_CHAT_TEMPLATE,
        "eos_token": eos, "pad_token": SPECIAL_TOKENS[0], "bos_token": None,
        "model_max_length": cfg.max_position_embeddings, "add_bos_token": False}, indent=1))
    (path / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": cfg.eos_token_id, "do_sample": False}))
    if seed is not None:
        model = CausalLM(replace(cfg, torch_dtype="float32"), torch.device("cpu"))
        init_dummy(model, seed)
        tensors = {k: v.to(getattr(torch, dtype)) for k, v in hf_state_dict(model).items()}
        if cfg.tie_word_embeddings:
            tensors.pop("lm_head.weight", None)
        save_file(tensors, str(path / "model.safetensors"))
    return path
