"""The bundled inference engine: paged KV cache, continuous batching, P/D roles.

Names are imported lazily, so torch-free parts (scheduler, block manager,
proxy) can be used without loading torch.
"""

from importlib import import_module

_EXPORTS = {
    "LLM": "engine.llm",
    "LLMEngine": "engine.core.llm_engine",
    "RequestOutput": "engine.core.llm_engine",
    "KVImportError": "engine.core.llm_engine",
    "SamplingParams": "engine.core.sequence",
    "EngineConfig": "engine.core.config",
    "ModelConfig": "engine.core.config",
    "PRESETS": "engine.core.config",
    "load_model_config": "engine.core.config",
    "KVPayload": "engine.model.kv_payload",
    "KVLayout": "engine.core.kv_layout",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
