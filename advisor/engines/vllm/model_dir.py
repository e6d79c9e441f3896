"""The model directory vLLM loads: a local HF directory as given, or, for one of the bundled
engine's presets, one written here (config.json, tokenizer, chat template, and the seeded
weights the bundled engine draws, so that both engines serve the same model), cached."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from engine import api
from engine.api import ModelConfig

WEIGHT_BYTES_LIMIT = 1 << 30  # larger presets are served with --load-format dummy
WEIGHTS_SEED = 0  # the bundled engine's default seed


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "advisor" / "models"


def model_dir(model: str, dtype: str, root: Path | None = None) -> tuple[str, bool]:
    """(the directory vLLM loads, whether it has no weights and needs --load-format dummy)
    for `model`: a preset's directory, written once under `root`, or `model` itself."""
    if Path(model).is_dir():
        return str(Path(model).resolve()), False
    cfg = api.load_model_config(model)
    weights = _parameters(cfg) * api.DTYPE_BYTES[dtype] <= WEIGHT_BYTES_LIMIT
    name = f"{model}-{dtype}-seed{WEIGHTS_SEED}" if weights else f"{model}-config"
    path = (root or cache_root()) / name
    if not (path / "config.json").is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{name}-"))
        try:
            api.write_hf_dir(cfg, tmp, WEIGHTS_SEED if weights else None, dtype)
            with contextlib.suppress(OSError):  # another sweep wrote it first
                tmp.rename(path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return str(path), not weights


def _parameters(cfg: ModelConfig) -> int:
    """About how many weights `cfg` has (embeddings, attention, MLP, head)."""
    attn = cfg.hidden_size * cfg.head_dim * (2 * cfg.num_attention_heads
                                             + 2 * cfg.num_key_value_heads)
    mlp = 3 * cfg.hidden_size * cfg.intermediate_size
    head = 0 if cfg.tie_word_embeddings else cfg.vocab_size * cfg.hidden_size
    return cfg.vocab_size * cfg.hidden_size + cfg.num_hidden_layers * (attn + mlp) + head
