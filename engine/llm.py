"""The offline API: `LLM(...).generate(prompts, params)`."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from engine.core.config import EngineConfig
from engine.core.llm_engine import RequestOutput
from engine.core.sequence import SamplingParams
from engine.model.kv_payload import KVPayload
from engine.model.runner import build_engine

_ENGINE_FIELDS = {f.name for f in fields(EngineConfig)} - {"model_config"}


class LLM:
    """Batch generation over token-id prompts on one engine instance.

    Keyword arguments are EngineConfig fields (model, seed, device, dtype,
    block_size, num_kv_blocks, max_num_batched_tokens, enable_prefix_caching,
    enable_chunked_prefill, role, ...).
    """

    def __init__(self, model: str = "tiny", **kwargs: Any) -> None:
        unknown = set(kwargs) - _ENGINE_FIELDS
        if unknown:
            raise TypeError(f"unknown engine option(s): {', '.join(sorted(unknown))}")
        self.engine = build_engine(EngineConfig(model=model, **kwargs))
        self.config = self.engine.model_config

    def generate(self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams],
                 kv: list[KVPayload | None] | None = None) -> list[RequestOutput]:
        """Generate for every prompt; outputs come back in prompt order.

        All prompts are validated before any is queued, so a bad one raises
        ValueError and leaves the engine as it was.
        """
        params_list = params if isinstance(params, list) else [params] * len(prompts)
        kv_list = kv or [None] * len(prompts)
        if not len(prompts) == len(params_list) == len(kv_list):
            raise ValueError("prompts, params and kv must have the same length")
        for prompt, p in zip(prompts, params_list):
            self.engine.validate(prompt, p)
        ids = [self.engine.add_request(prompt, p, kv=k)
               for prompt, p, k in zip(prompts, params_list, kv_list)]
        results: dict[str, RequestOutput] = {}
        while len(results) < len(ids):
            for out in self.engine.step():
                if out.finished:
                    results[out.request_id] = out
        return [results[i] for i in ids]

    def export_kv(self, request_id: str) -> KVPayload:
        """Prompt KV of a request this (prefill-role) instance finished."""
        payload = self.engine.export_kv(request_id)
        assert isinstance(payload, KVPayload)  # what this engine's model runner exports
        return payload
