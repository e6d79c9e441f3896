"""The bundled inference engine: paged KV cache, continuous batching, P/D roles.

Names are imported lazily, so torch-free parts (scheduler, block manager,
proxy) can be used without loading torch.
"""

from importlib import import_module

_EXPORTS = {
    "LLM": "engine.llm",
    "LLMEngine": "engine.llm_engine",
    "RequestOutput": "engine.llm_engine",
    "KVImportError": "engine.llm_engine",
    "SamplingParams": "engine.sequence",
    "EngineConfig": "engine.config",
    "ModelConfig": "engine.config",
    "PRESETS": "engine.config",
    "load_model_config": "engine.config",
    "KVPayload": "engine.kv_transfer",
    "KVLayout": "engine.kv_transfer",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
