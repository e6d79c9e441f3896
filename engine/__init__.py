"""The bundled inference engine: paged KV cache, continuous batching, P/D roles.

What is named here loads no torch (the scheduler, block manager and configs are usable
without it); the torch parts are imported from their modules: `engine.llm.LLM` (the
offline API) and `engine.model.kv_payload.KVPayload`.
"""

from engine.core.config import PRESETS, EngineConfig, ModelConfig, load_model_config
from engine.core.kv_layout import KVLayout
from engine.core.llm_engine import KVImportError, LLMEngine, RequestOutput
from engine.core.sequence import SamplingParams

__all__ = ["PRESETS", "EngineConfig", "KVImportError", "KVLayout", "LLMEngine", "ModelConfig",
           "RequestOutput", "SamplingParams", "load_model_config"]
