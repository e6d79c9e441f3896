"""The engine as the advisor drives it: topologies and their launch, connector and dtype
names, model configs, the chat-history check, and the link measurements. The advisor
imports the engine through this module alone, so that it depends on this surface and not
on the engine's layers.

Each name loads its module when first used: the command line lists connectors or checks
a model without loading torch.
"""

from __future__ import annotations

from importlib import import_module

# name here -> (module, name there)
_EXPORTS = {
    # models and dtypes
    "DTYPE_BYTES": ("engine.core.config", "DTYPE_BYTES"),
    "DTYPES": ("engine.core.config", "DTYPES"),
    "PRESETS": ("engine.core.config", "PRESETS"),
    "EngineConfig": ("engine.core.config", "EngineConfig"),
    "ModelConfig": ("engine.core.config", "ModelConfig"),
    "config_from_hf_dict": ("engine.core.config", "config_from_hf_dict"),
    "load_model_config": ("engine.core.config", "load_model_config"),
    "write_hf_dir": ("engine.hf_dir", "write_hf_dir"),
    "DtypeChoice": ("engine.model.dtype", "DtypeChoice"),
    "resolve_dtype": ("engine.model.dtype", "resolve"),
    "best_rates": ("engine.model.dtype", "best_rates"),
    "choose_cpu": ("engine.model.dtype", "choose_cpu"),
    # KV links and connectors
    "CONNECTORS": ("engine.kv.connectors", "NAMES"),
    "parse_link": ("engine.kv.links", "parse_link"),
    "parse_emulation": ("engine.kv.links", "parse_emulation"),
    "host_links": ("engine.kv.loopback", "host_links"),
    "gpu_links": ("engine.kv.loopback", "gpu_links"),
    "copy_gbps": ("engine.kv.loopback", "copy_gbps"),
    # the front end
    "FrontendConfig": ("engine.render.frontend", "FrontendConfig"),
    "TextTokenizer": ("engine.render.tokenizer", "TextTokenizer"),
    "check_history": ("engine.render.history", "check_history"),
    "error_body": ("engine.render.protocol", "error_body"),
    # deployments
    "MODES": ("engine.processes.launch", "MODES"),
    "Topology": ("engine.processes.launch", "Topology"),
    "launch": ("engine.processes.launch", "launch"),
    "supervise": ("engine.processes.supervise", "supervise"),
    "LaunchError": ("engine.processes.children", "LaunchError"),
    "serve_proxy": ("engine.fronts.proxy", "serve"),
}


def __dir__() -> list[str]:
    return sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'engine.api' has no attribute {name!r}")
    module, attr = _EXPORTS[name]
    return getattr(import_module(module), attr)
