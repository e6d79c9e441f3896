"""Token-budget continuous batching, no torch. Per step, under `max_num_batched_tokens`:
running decodes (one token each), then running prefills (a chunk each), then waiting
requests first come first served while the budget, `max_num_seqs` and the block pool
allow; when a block is short, the most recently admitted request not yet scheduled this
step is preempted (freed, recomputed later), failing that the request itself."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from engine.core.block_manager import BlockManager
from engine.core.kv_layout import ImportedKV
from engine.core.sequence import FinishReason, Request, Status


@dataclass
class SchedulerOutput:
    """What the model runs this step: (request, number of its tokens) in batch order."""

    scheduled: list[tuple[Request, int]] = field(default_factory=list)
    kv_imports: list[Request] = field(default_factory=list)  # write pending_kv before the forward

    @property
    def num_batched_tokens(self) -> int:
        return sum(n for _, n in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


class Scheduler:
    """Moves requests from waiting to running to finished, one step at a time."""

    def __init__(self, block_manager: BlockManager, max_num_batched_tokens: int,
                 max_num_seqs: int, enable_chunked_prefill: bool, eos_token_id: int | None) -> None:
        self.bm = block_manager
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.enable_chunked_prefill = enable_chunked_prefill
        self.eos_token_id = eos_token_id
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # ---- scheduling ------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        done: set[str] = set()
        decodes = [r for r in self.running if r.num_new_tokens == 1]
        prefills = [r for r in self.running if r.num_new_tokens > 1]
        for req in decodes + prefills:
            if budget == 0:
                break
            if req.status is not Status.RUNNING:  # preempted earlier in this loop
                continue
            n = self._chunk(req.num_new_tokens, budget)
            if n == 0:
                continue
            if not self._allocate_or_preempt(req, n, done):
                continue
            out.scheduled.append((req, n))
            done.add(req.request_id)
            budget -= n
        self._admit(out, budget)
        return out

    def _chunk(self, num_new: int, budget: int) -> int:
        if num_new <= budget:
            return num_new
        return budget if self.enable_chunked_prefill else 0

    def _allocate_or_preempt(self, req: Request, n: int, done: set[str]) -> bool:
        while not self.bm.allocate(req, n):
            victims = [r for r in self.running if r.request_id not in done and r is not req]
            victim = victims[-1] if victims else req
            self._preempt(victim)
            if victim is req:
                return False
        return True

    def _admit(self, out: SchedulerOutput, budget: int) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            if req.pending_kv is not None:
                n = self._admit_import(req, req.pending_kv, budget)
            else:
                n = self._admit_fresh(req, budget)
            if n == 0:
                break
            self.waiting.popleft()
            req.status = Status.RUNNING
            self.running.append(req)
            out.scheduled.append((req, n))
            if req.pending_kv is not None:
                out.kv_imports.append(req)
            budget -= n

    def _admit_fresh(self, req: Request, budget: int) -> int:
        computed = self.bm.get_computed_blocks(req.all_token_ids)
        req.num_computed_tokens = len(computed) * self.bm.block_size
        n = self._chunk(req.num_new_tokens, budget)
        if n == 0 or not self.bm.allocate(req, n, computed):
            req.num_computed_tokens = 0
            return 0
        req.num_cached_tokens = max(req.num_cached_tokens, req.num_computed_tokens)
        return n

    def _admit_import(self, req: Request, kv: ImportedKV, budget: int) -> int:
        # NOTE: at least the last prompt token is computed here, so that this engine samples
        # the next token itself; a payload from `start` on needs the prefix cache to still
        # hold the tokens before, or it is dropped and all is computed
        have = min(kv.num_tokens, req.num_tokens - 1)
        local: list[int] = []
        if kv.start:
            local = self.bm.get_computed_blocks(req.all_token_ids)[: kv.start // self.bm.block_size]
            if kv.start % self.bm.block_size or len(local) * self.bm.block_size < kv.start \
                    or have <= kv.start:
                req.pending_kv = None
                return self._admit_fresh(req, budget)
        n = self._chunk(req.num_tokens - have, budget)
        if n == 0 or not self.bm.allocate(req, have + n, local):
            return 0
        req.num_computed_tokens = have
        req.num_cached_tokens = have
        return n

    def _preempt(self, req: Request) -> None:
        self.bm.free(req)
        self.running.remove(req)
        req.num_computed_tokens = 0
        req.status = Status.WAITING
        req.num_preemptions += 1
        self.waiting.appendleft(req)

    # ---- results -----------------------------------------------------------------------------
    def update_from_output(self, out: SchedulerOutput, sampled: dict[str, int]) -> list[Request]:
        """Advance counters, append sampled tokens, and return the requests that finished.

        `sampled` maps request id -> token for every request whose computed tokens
        caught up with its tokens this step. Finished requests leave `running`;
        their blocks are NOT freed here (the engine frees them or holds them for export).
        """
        finished = []
        for req, n in out.scheduled:
            req.num_computed_tokens += n
            self.bm.cache_full_blocks(req)
            token = sampled.get(req.request_id)
            if token is None:
                continue
            req.output_token_ids.append(token)
            reason = self._stop_reason(req, token)
            if reason is not None:
                self._finish(req, reason)
                finished.append(req)
        return finished

    def _stop_reason(self, req: Request, token: int) -> FinishReason | None:
        if req.remote_decode:
            return FinishReason.REMOTE_DECODE
        p = req.params
        if token in p.stop_set or (not p.ignore_eos and token == self.eos_token_id):
            return FinishReason.STOP
        if len(req.output_token_ids) >= p.max_tokens:
            return FinishReason.LENGTH
        return None

    def _finish(self, req: Request, reason: FinishReason) -> None:
        if req in self.running:
            self.running.remove(req)
        req.status = Status.FINISHED
        req.finish_reason = reason

    def abort(self, request_id: str) -> Request | None:
        """Remove a request wherever it is, free its blocks, and return it (None if unknown)."""
        for queue in (self.waiting, self.running):
            for req in queue:
                if req.request_id == request_id:
                    queue.remove(req)
                    self.bm.free(req)
                    req.status = Status.FINISHED
                    req.finish_reason = FinishReason.ABORT
                    return req
        return None
