"""Turns a SchedulerOutput into tensors, runs the model, samples. The only place
where requests meet tensors."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import torch

from engine.core.config import EngineConfig
from engine.core.kv_layout import KVLayout
from engine.core.llm_engine import LLMEngine
from engine.core.scheduler import SchedulerOutput
from engine.core.sequence import Request
from engine.model.attention import AttentionMetadata, PrefillSegment
from engine.model.causal_lm import CausalLM
from engine.model.dtype import AUTO
from engine.model.dtype import resolve as resolve_dtype
from engine.model.kv_cache import KVCache
from engine.model.kv_payload import KVPayload
from engine.model.sampler import Sampler
from engine.model.weights import init_dummy, load_safetensors_dir

Model = TypeVar("Model", bound=torch.nn.Module)

_GIB = 1 << 30


def resolve_device(device: str) -> torch.device:
    """A torch device, with a clear error when CUDA is asked for and absent."""
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available")
    return dev


def _allocated(model: Model, device: torch.device) -> Model:
    """`model`, built on "meta", with its parameters and buffers allocated on `device`
    (uninitialized; the same tensor where one is shared).

    Not Module.to_empty, whose empty_like of a meta tensor imports sympy (~1.3 s of every
    engine start)."""
    made: dict[int, Any] = {}  # a parameter's or a buffer's allocated twin
    for module in model.modules():
        for store in (module._parameters, module._buffers):
            for name, t in store.items():
                if t is not None:
                    if id(t) not in made:
                        new = torch.empty(t.shape, dtype=t.dtype, device=device)
                        made[id(t)] = torch.nn.Parameter(new, t.requires_grad) \
                            if isinstance(t, torch.nn.Parameter) else new
                    store[name] = made[id(t)]
    return model


class ModelRunner:
    """Owns the model, the KV cache tensors and the sampler of one engine instance."""

    def __init__(self, cfg: EngineConfig) -> None:
        self.cfg = cfg
        mcfg = cfg.model_shape
        self.device = resolve_device(cfg.device)
        if self.device.type == "cpu" and cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        if cfg.dtype == AUTO:
            raise ValueError("ModelRunner needs a concrete dtype: build it from resolve_config()")
        self.dtype = getattr(torch, cfg.dtype)
        with torch.device("meta"):
            model = CausalLM(mcfg, self.device).to(self.dtype)
        self.model = _allocated(model, self.device).eval()
        if Path(cfg.model).is_dir() and any(Path(cfg.model).glob("*.safetensors")):
            load_safetensors_dir(self.model, cfg.model)
        else:
            init_dummy(self.model, cfg.seed)
        self.model.pack_weights()
        self.layout = KVLayout(mcfg.num_hidden_layers, mcfg.num_key_value_heads,
                               mcfg.head_dim, cfg.dtype)
        self.num_blocks = cfg.num_kv_blocks or self._auto_num_blocks()
        self.cache = KVCache(mcfg.num_hidden_layers, self.num_blocks, cfg.block_size,
                             mcfg.num_key_value_heads, mcfg.head_dim, self.dtype, self.device,
                             shared=cfg.kv_shared_memory)
        self.sampler = Sampler(self.device, cfg.seed)

    def _auto_num_blocks(self) -> int:
        cfg = self.cfg
        block_bytes = self.layout.bytes_per_token * cfg.block_size
        budget = cfg.kv_cache_memory_gib * _GIB
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            budget = min(budget, 0.9 * free)
        enough = cfg.max_num_seqs * -(-cfg.model_shape.max_position_embeddings // cfg.block_size)
        return max(1, min(int(budget // block_bytes), enough))

    # ---- one step ----------------------------------------------------------------------------
    @torch.inference_mode()
    def execute(self, out: SchedulerOutput) -> dict[str, int]:
        """Run the scheduled tokens; return request id -> sampled token for every
        request whose computed tokens reach its tokens this step."""
        for req in out.kv_imports:
            kv = req.pending_kv
            assert isinstance(kv, KVPayload)  # what this runner's connectors import
            self.cache.import_(req.block_ids, kv.kv, kv.start)
            req.pending_kv = None
        entries = sorted(out.scheduled, key=lambda e: e[1] != 1)  # single-token queries first
        ids, pos, meta, sample_rows, sample_reqs = self._prepare(entries)
        hidden = self.model(ids, pos, self.cache, meta)  # [T, D]
        if not sample_reqs:
            return {}
        logits = self.model.compute_logits(hidden[sample_rows])  # [N, vocab]
        tokens = self.sampler.sample(logits, sample_reqs)
        return {r.request_id: t for r, t in zip(sample_reqs, tokens)}

    def _prepare(self, entries: list[tuple[Request, int]]
                 ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, torch.Tensor,
                            list[Request]]:
        bs, dev = self.cfg.block_size, self.device
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        decode_tables: list[list[int]] = []
        decode_lens: list[int] = []
        prefills: list[PrefillSegment] = []
        sample_rows: list[int] = []
        sample_reqs: list[Request] = []
        # plain Python ints, one tensor per kind at the end: per-request tensors cost
        # more than a decode step's attention at batch 32
        for req, n in entries:
            start, row = req.num_computed_tokens, len(ids)
            ids.extend(req.all_token_ids[start:start + n])
            positions.extend(range(start, start + n))
            table = req.block_ids
            slots.extend(table[p // bs] * bs + p % bs for p in range(start, start + n))
            if n == 1:
                decode_tables.append(table)
                decode_lens.append(start + 1)
            else:
                prefix_table = torch.tensor([table], device=dev) if start else None
                prefills.append(PrefillSegment(row, row + n, start + n, prefix_table))
            if start + n == req.num_tokens:
                sample_rows.append(row + n - 1)
                sample_reqs.append(req)
        meta = AttentionMetadata(torch.tensor(slots, device=dev), len(decode_tables), None, None,
                                 prefills)
        if decode_tables:
            width = max(map(len, decode_tables))
            # pads read block 0, masked
            padded = [t + [0] * (width - len(t)) for t in decode_tables]
            meta.decode_block_tables = torch.tensor(padded, device=dev)
            lens = torch.tensor(decode_lens, device=dev)
            # additive, in the model's dtype: SDPA converts a boolean mask in every layer
            pad = torch.arange(width * bs, device=dev)[None, :] >= lens[:, None]  # [Bd, W*bs]
            meta.decode_mask = torch.zeros(pad.shape, dtype=self.dtype, device=dev).masked_fill_(
                pad, float("-inf"))[:, None, None, :]
        return (
            torch.tensor(ids, device=dev),
            torch.tensor(positions, device=dev),
            meta,
            torch.tensor(sample_rows, device=dev),
            sample_reqs,
        )

    # ---- KV export -----------------------------------------------------------------------------
    def forget(self, request_id: str) -> None:
        """Drop a finished or aborted request's sampler state."""
        self.sampler.forget(request_id)

    def export_kv(self, req: Request) -> KVPayload:
        """The KV of a finished request's computed tokens: a prefill's prompt, or a kept
        turn's prompt and reply (see KVCache.export)."""
        tokens = req.kv_token_ids
        n = len(tokens)
        kv = self.cache.export(req.block_ids[: -(-n // self.cfg.block_size)], n)
        return KVPayload(req.request_id, self.layout, tokens, kv, self.cfg.block_size)


def resolve_config(config: EngineConfig) -> EngineConfig:
    """`config` with its model config loaded and a concrete dtype in place of "auto"."""
    config = config.resolved()
    return replace(config, dtype=resolve_dtype(config.dtype, config.device).dtype)


def build_engine(config: EngineConfig) -> LLMEngine:
    """An engine instance with this model runner under it."""
    config = resolve_config(config)
    return LLMEngine(config, ModelRunner(config))
