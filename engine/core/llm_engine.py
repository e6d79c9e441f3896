"""The engine: requests in, one step at a time, token deltas out. Not thread-safe:
one thread owns it (the server runs it beside its event loop).

Torch-free: the model runs behind an `Executor` (engine.model.runner.ModelRunner),
which `engine.model.runner.build_engine` plugs in.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Protocol

from engine.core.block_manager import BlockManager
from engine.core.config import EngineConfig
from engine.core.kept import PREFIX as KEPT_PREFIX
from engine.core.kept import KeptConversations
from engine.core.kv_layout import ImportedKV, KVLayout
from engine.core.leases import KVLeases
from engine.core.scheduler import Scheduler, SchedulerOutput
from engine.core.sequence import FinishReason, Request, SamplingParams


class KVImportError(ValueError):
    """Imported KV cannot serve the request (layout or token mismatch) under policy `fail`."""


@dataclass
class RequestOutput:
    """A request's progress after a step: the tokens new this step and all so far."""

    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    new_token_ids: list[int]
    finished: bool
    finish_reason: str | None
    num_cached_tokens: int
    num_preemptions: int
    first_scheduled_time: float | None  # time.monotonic() of the step that first ran it


class Executor(Protocol):
    """What the engine needs of a model runner: its pool size, its KV layout, a step."""

    num_blocks: int
    layout: KVLayout

    def execute(self, out: SchedulerOutput) -> dict[str, int]: ...

    def forget(self, request_id: str) -> None: ...

    def export_kv(self, req: Request) -> ImportedKV: ...


class LLMEngine:
    """One engine instance (role both, prefill or decode) over one executor."""

    def __init__(self, config: EngineConfig, runner: Executor) -> None:
        self.config = config.resolved()
        self.model_config = self.config.model_shape
        own = self.model_config.max_position_embeddings
        if (self.config.max_model_len or 0) > own:
            raise ValueError(f"max_model_len {self.config.max_model_len} exceeds the model's "
                             f"context of {own} tokens")
        self.max_model_len = self.config.max_model_len or own
        self.runner = runner
        self.block_manager = BlockManager(self.runner.num_blocks, self.config.block_size,
                                          self.config.enable_prefix_caching)
        self.scheduler = Scheduler(self.block_manager, self.config.max_num_batched_tokens,
                                   self.config.max_num_seqs, self.config.enable_chunked_prefill,
                                   self.model_config.eos_token_id)
        self.requests: dict[str, Request] = {}
        self.held = KVLeases(self.config.kv_lease_duration, self.block_manager.free)
        self.kept = KeptConversations(
            self.config.decoder_kv_ttl,
            self.config.decoder_kv_blocks or max(1, self.runner.num_blocks // 4),
            self.block_manager.free) if self.config.keep_conversations else None
        self.num_kv_import_failures = 0
        self._ids = itertools.count()

    # ---- requests ----------------------------------------------------------------------------
    def validate(self, prompt_token_ids: list[int], params: SamplingParams) -> None:
        """Raise ValueError naming what makes this request impossible to serve."""
        params.validate()
        n = len(prompt_token_ids)
        if n == 0:
            raise ValueError("prompt is empty")
        vocab = self.model_config.vocab_size
        bad = [t for t in prompt_token_ids if not isinstance(t, int) or not 0 <= t < vocab]
        if bad:
            raise ValueError(f"prompt token id {bad[0]!r} is outside the vocabulary [0, {vocab})")
        if any(not 0 <= t < vocab for t, _ in params.logit_bias):
            raise ValueError(f"logit_bias names a token id outside the vocabulary [0, {vocab})")
        limit = self.max_model_len
        if n + params.max_tokens > limit:
            raise ValueError(f"prompt ({n} tokens) + max_tokens ({params.max_tokens}) exceeds "
                             f"the model's context of {limit} tokens")
        if self.block_manager.blocks_needed(n + params.max_tokens) > self.block_manager.num_blocks:
            raise ValueError(f"prompt + max_tokens needs more KV blocks than the pool's "
                             f"{self.block_manager.num_blocks}")
        budget = self.config.max_num_batched_tokens
        if not self.config.enable_chunked_prefill and n + params.max_tokens - 1 > budget:
            raise ValueError(f"with chunked prefill off, prompt + max_tokens must fit in "
                             f"max_num_batched_tokens ({budget})")

    def add_request(self, prompt_token_ids: list[int], params: SamplingParams,
                    request_id: str | None = None, kv: ImportedKV | None = None,
                    remote_decode: bool | None = None, keep_as: str | None = None) -> str:
        """Queue a request; returns its id.

        kv: prompt KV pulled from a prefill instance; checked against the prompt,
        and on mismatch either dropped (policy `recompute`) or refused (`fail`).
        remote_decode: stop after the first token and hold the KV for export
        (defaults to True on a `prefill`-role engine).
        keep_as: a conversation id: when finished, keep the KV of prompt and reply for that
        conversation's next turn (engines with keep_conversations; ignored elsewhere).
        """
        self.validate(prompt_token_ids, params)
        request_id = request_id or f"req-{next(self._ids)}"
        if request_id in self.requests or request_id in self.held:
            raise ValueError(f"request id {request_id!r} is already in use")
        if kv is not None:
            kv = self._check_import(kv, prompt_token_ids)
        if remote_decode is None:
            remote_decode = self.config.role == "prefill"
        req = Request(request_id, list(prompt_token_ids), params, arrival_time=time.monotonic(),
                      pending_kv=kv, remote_decode=remote_decode,
                      keep_as=keep_as if self.kept is not None else None)
        self.requests[request_id] = req
        self.scheduler.add(req)
        return request_id

    def cached_prefix_len(self, prompt_token_ids: list[int]) -> int:
        """Tokens of `prompt_token_ids` the prefix cache holds now: a hint for a pull that
        need not move them (any thread; the scheduler checks again when it admits)."""
        return len(self.block_manager.get_computed_blocks(prompt_token_ids)) \
            * self.block_manager.block_size

    def _check_import(self, kv: ImportedKV, prompt: list[int]) -> ImportedKV | None:
        try:
            kv.check_compatible(self.runner.layout, prompt)
            return kv
        except ValueError as e:
            self.num_kv_import_failures += 1
            if self.config.kv_load_failure_policy == "fail":
                raise KVImportError(f"KV import failed: {e}") from None
            return None

    def abort(self, request_id: str) -> bool:
        """Stop a request and free its blocks (held KV too). True if it was known."""
        if request_id in self.held:
            self.release_kv(request_id)
            return True
        req = self.scheduler.abort(request_id)
        self.requests.pop(request_id, None)
        self.runner.forget(request_id)
        return req is not None

    def has_unfinished(self) -> bool:
        return self.scheduler.has_work()

    # ---- stepping -------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """Schedule, run the model once, and report every request that advanced."""
        self.expire_leases()
        if self.kept is not None:
            self.kept.make_room(lambda: self.block_manager.num_free_blocks, self._blocks_wanted())
        out = self.scheduler.schedule()
        if out.is_empty:
            return []
        now = time.monotonic()
        for req, _ in out.scheduled:
            if req.first_scheduled_time is None:
                req.first_scheduled_time = now
        sampled = self.runner.execute(out)
        finished = self.scheduler.update_from_output(out, sampled)
        for req in finished:
            self._retire(req)
        return [self._output(req, [sampled[req.request_id]])
                for req, _ in out.scheduled if req.request_id in sampled]

    def _retire(self, req: Request) -> None:
        self.requests.pop(req.request_id, None)
        self.runner.forget(req.request_id)
        if req.finish_reason is FinishReason.REMOTE_DECODE:
            self.held.hold(req)
        elif not (req.keep_as and self.kept is not None and self.kept.keep(req, req.keep_as)):
            self.block_manager.free(req)

    @staticmethod
    def _output(req: Request, new: list[int]) -> RequestOutput:
        reason = req.finish_reason.value if req.finish_reason else None
        return RequestOutput(req.request_id, req.prompt_token_ids, list(req.output_token_ids),
                             new, req.is_finished, reason, req.num_cached_tokens,
                             req.num_preemptions, req.first_scheduled_time)

    # ---- KV held for export (prefill side) --------------------------------------------------
    def export_kv(self, request_id: str) -> ImportedKV:
        """The prompt KV of a finished remote-decode request, copied; its lease keeps running.

        Safe to call from any thread (a connector's): held blocks are never written,
        and the lease cannot expire while the copy runs.
        """
        with self._leases(request_id).reading(request_id) as req:
            return self.runner.export_kv(req)

    def lend_kv(self, request_id: str) -> tuple[list[int], list[int]]:
        """(block ids, token ids) of held KV (a prefill's prompt, or a kept conversation's
        prompt and reply), for a connector that reads the cache itself; renews the lease
        (see KVLeases.lend). Any thread."""
        req = self._leases(request_id).lend(request_id)
        tokens = req.kv_token_ids
        return req.block_ids[: self.block_manager.blocks_needed(len(tokens))], tokens

    def release_kv(self, request_id: str) -> bool:
        """Free the blocks held for `request_id` (the decoder has its copy). True if held."""
        return self._leases(request_id).release(request_id)

    def expire_leases(self, now: float | None = None) -> list[str]:
        """Free held KV whose lease ran out; returns the expired request ids."""
        kept = self.kept.leases.expire(now) if self.kept is not None else []
        return self.held.expire(now) + kept

    def _leases(self, request_id: str) -> KVLeases:
        """Where `request_id`'s KV is held: kept for a conversation, or for a decoder."""
        if self.kept is not None and request_id.startswith(KEPT_PREFIX):
            return self.kept.leases
        return self.held

    def _blocks_wanted(self) -> int:
        """Free blocks the next step may need: one per running request, and the first
        waiting request's whole prompt."""
        first = self.scheduler.waiting[0] if self.scheduler.waiting else None
        need = self.block_manager.blocks_needed(first.num_tokens) if first else 0
        return len(self.scheduler.running) + need
