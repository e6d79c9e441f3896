"""The engine as the advisor drives it: topologies and their launch, connector and dtype
names, model configs, the chat-history check, and the link measurements. The advisor
imports the engine through this module alone, so that it depends on this surface and not
on the engine's layers.

Every name is imported here, so type checkers see it. The two that need torch (the link
measurements and writing a model's weights) are functions that import it when called: the
command line lists connectors or checks a model without loading torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.core.config import (
    DTYPE_BYTES,
    DTYPES,
    PRESETS,
    EngineConfig,
    ModelConfig,
    check_hf_counts,
    config_from_hf_dict,
    load_model_config,
)
from engine.fronts.proxy import serve as serve_proxy
from engine.kv.connectors import NAMES as CONNECTORS
from engine.kv.links import parse_emulation, parse_link
from engine.model.dtype import DtypeChoice, best_rates, choose_cpu
from engine.model.dtype import resolve as resolve_dtype
from engine.processes.children import LaunchError
from engine.processes.launch import MODES, Deployment, Topology, launch
from engine.processes.supervise import supervise
from engine.render.frontend import FrontendConfig
from engine.render.history import check_history
from engine.render.protocol import error_body
from engine.render.tokenizer import TextTokenizer

__all__ = [
    "CONNECTORS",
    "DTYPES",
    "DTYPE_BYTES",
    "MODES",
    "PRESETS",
    "Deployment",
    "DtypeChoice",
    "EngineConfig",
    "FrontendConfig",
    "LaunchError",
    "ModelConfig",
    "TextTokenizer",
    "Topology",
    "best_rates",
    "check_hf_counts",
    "check_history",
    "choose_cpu",
    "config_from_hf_dict",
    "error_body",
    "gpu_links",
    "host_links",
    "launch",
    "load_model_config",
    "parse_emulation",
    "parse_link",
    "resolve_dtype",
    "serve_proxy",
    "supervise",
    "write_hf_dir",
]


def host_links(nbytes: int = 64 << 20) -> dict[str, dict[str, Any]]:
    """shm and tcp pull throughput on this host for a payload of about `nbytes` (torch)."""
    from engine.kv.loopback import host_links as measure

    return measure(nbytes)


def gpu_links(n: int, nbytes: int = 256 << 20) -> list[dict[str, Any]]:
    """Every ordered pair of `n` GPUs: peer-to-peer and host-staged copy rates (torch)."""
    from engine.kv.loopback import gpu_links as measure

    return measure(n, nbytes)


def write_hf_dir(cfg: ModelConfig, path: Path, seed: int | None = 0,
                 dtype: str = "float32") -> Path:
    """`cfg` written as an HF model directory at `path` (engine.hf_dir; torch for the
    weights, none where `seed` is None)."""
    from engine.hf_dir import write_hf_dir as write

    return write(cfg, path, seed, dtype)
