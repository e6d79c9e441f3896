"""One simulated engine's batching, as the bundled engine's scheduler does it
(engine/core/scheduler.py): decodes first, then running prefills' chunks, then waiting
requests first come first served, under the token budget and `max_num_seqs`; KV taken a
block at a time as tokens are written, the newest request preempted when a block is
short; decoders counted per block phase give a run of decode-only steps' block needs at
once. No torch. docs/design/planner.md has the whole procedure."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from advisor.plan.system import EngineSpec


@dataclass(eq=False)
class Job:
    """A request on one engine. Decoding once `remaining` is 0; `eq=False`: identity."""

    req: int
    prompt: int  # tokens it arrives with (a P/D decoder's: the prompt, KV imported)
    out: int  # tokens this engine gives (a prefiller: 1, then the KV leaves)
    remaining: int  # tokens still to compute before its next sample
    before: int  # tokens whose KV is in the cache ahead of them
    held: int = 0  # blocks held while prefilling (a decoder's grow with its steps)
    given: int = 0  # tokens given in segments before a preemption
    first: int = -1  # the step that gave this segment's first token
    stepped: int = -1  # the last step that scheduled it
    segments: list[Any] = field(default_factory=list)  # (first step, tokens): what it gave


class Batcher:
    """An engine's queue and pool. Steps are numbered by the engine's step index `k`."""

    def __init__(self, spec: EngineSpec) -> None:
        self.spec, self.bs = spec, spec.block_size
        self.blocks = spec.kv_tokens // spec.block_size
        self.waiting: deque[Job] = deque()
        self.jobs: list[Job] = []  # admitted, in admission order: prefilling and decoding
        self.prefilling: list[Job] = []  # the admitted still prefilling, in the same order
        self.running = 0  # decoding jobs
        self.context = 0.0  # decoding jobs' context, summed
        self.used = 0  # blocks held
        self.due = [0] * self.bs  # [k mod bs]: decoding jobs needing a new block at step k
        self.finishing: dict[int, list[Job]] = {}  # step -> jobs whose last token it gives

    def refusal(self, job: Job) -> str | None:
        """Why the engine refuses `job` at once (its add-time checks), or None."""
        if self._blocks(job.prompt + job.out) > self.blocks:
            return "does not fit the engine's KV cache"
        if not self.spec.chunked_prefill and job.prompt + job.out - 1 > \
                self.spec.max_batched_tokens:
            return "does not fit the token budget without chunked prefill"
        return None

    def free(self) -> int:
        return self.blocks - self.used

    def _need(self, k: int) -> int:
        """Blocks step `k`'s decodes take."""
        return self.due[k % self.bs] if self.running else 0

    def _chunk(self, job: Job, budget: int) -> int:
        if self.spec.chunked_prefill:
            return min(job.remaining, budget)
        return job.remaining if job.remaining <= budget else 0

    def _blocks(self, tokens: int) -> int:
        return -(-tokens // self.bs)

    # ---- decode-only runs ---------------------------------------------------------------------
    def only_decodes(self, k: int) -> bool:
        """Whether step `k` is decodes only and their blocks are there: nothing prefilling
        and the first waiting request not admissible."""
        if self.prefilling or self._need(k) > self.free():
            return False
        if not self.waiting or len(self.jobs) >= self.spec.max_num_seqs:
            return True
        budget = self.spec.max_batched_tokens - self.running
        n = self._chunk(self.waiting[0], budget) if budget > 0 else 0
        return n == 0 or self._blocks(self.waiting[0].before + n) > self.free() - self._need(k)

    def decode_run(self, k: int, m: int) -> int:
        """How many of the `m` decode-only steps from `k` on find their blocks free."""
        per_cycle, free = sum(self.due), self.free()
        if (m // self.bs + 1) * per_cycle <= free:
            return m
        needs = np.cumsum(np.asarray(self.due)[(k + np.arange(m)) % self.bs])  # [m]
        return int(np.searchsorted(needs, free, side="right"))

    def ran(self, k: int, steps: int, blocks: bool = True) -> None:
        """Steps k .. k + steps - 1 ran every decoding job (`blocks`: and took their
        blocks, which `schedule` has done for a step it scheduled itself)."""
        self.context += self.running * steps
        if blocks and self.running:
            full, rest = divmod(steps, self.bs)
            start = k % self.bs
            twice = self.due + self.due  # the steps after `full` cycles, as one slice
            self.used += full * sum(self.due) + sum(twice[start:start + rest])

    # ---- one step, as the engine's scheduler has it ------------------------------------------
    def schedule(self, k: int) -> list[tuple[Job, int]]:
        """Step `k`'s prompt chunks (job, tokens), its decodes' blocks taken, preempting and
        admitting as the engine does; every decoding job left runs."""
        budget = self.spec.max_batched_tokens
        need = self._need(k)
        short = need > self.blocks - self.used
        if not short:
            self.used += need
            budget -= self.running
        else:  # in admission order, each decode taking its block or preempting
            for j in [j for j in self.jobs if not j.remaining]:
                if j.first < 0:  # preempted meanwhile
                    continue
                if (j.before + k - j.first - 1) % self.bs == 0 and not self._take(j, 1, k, True):
                    continue
                j.stepped = k
                budget -= 1
        chunks = []
        for j in list(self.prefilling):
            if budget <= 0:
                break
            n = self._chunk(j, budget) if j.held else 0  # none held: preempted meanwhile
            if n == 0:
                continue
            more = self._blocks(j.before + n) - j.held
            if more <= self.blocks - self.used:
                self.used += more
            elif not self._take(j, more, k, short):
                continue
            j.held += more
            j.stepped = k
            chunks.append((j, n))
            budget -= n
        while self.waiting and budget > 0 and len(self.jobs) < self.spec.max_num_seqs:
            j = self.waiting[0]
            n = self._chunk(j, budget)
            if n == 0 or self._blocks(j.before + n) > self.free():
                break
            self.waiting.popleft()
            self.jobs.append(j)
            self.prefilling.append(j)
            j.held = self._blocks(j.before + n)
            self.used += j.held
            chunks.append((j, n))
            budget -= n
        return chunks

    def _take(self, job: Job, blocks: int, k: int, short: bool) -> bool:
        """Take `blocks` for `job` in step `k`, preempting the newest job not yet scheduled
        in it (else `job` itself) while they are short; whether `job` still runs. Unless
        `short`, every decode is scheduled already."""
        while blocks > self.free():
            victim = next((j for j in reversed(self.jobs) if j is not job and j.stepped != k
                           and (short or j.remaining)), job)
            self._preempt(victim, k)
            if victim is job:
                return False
        self.used += blocks
        return True

    def _preempt(self, job: Job, k: int) -> None:
        """`job` leaves before step `k`: its blocks freed, back to the queue's head to be
        recomputed from its prompt and the tokens it gave."""
        if job.remaining:
            self.jobs.remove(job)
            self.prefilling.remove(job)
            self.used -= job.held
        else:
            given = k - job.first  # at steps first .. k - 1
            self.finishing[job.first + job.out - job.given - 1].remove(job)
            self._stop(job, k - 1, given)
            job.given += given
        job.held, job.before, job.first = 0, 0, -1
        job.remaining = job.prompt + job.given
        self.waiting.appendleft(job)

    def _stop(self, job: Job, k: int, given: int) -> None:
        """A decoding `job` stops after step `k`, having given `given` tokens since it began
        (its entry in `finishing` gone already)."""
        self.jobs.remove(job)
        self.running -= 1
        self.context -= job.before + given
        self.due[(job.first + 1 - job.before) % self.bs] -= 1
        self.used -= self._blocks(job.before + k - job.first)
        job.segments.append((job.first, given))

    # ---- results of a step -----------------------------------------------------------------
    def prefilled(self, job: Job, k: int, decodes: bool) -> None:
        """`job`'s prompt was computed in step `k`, which gave its next token. A prefiller
        lets it go with its blocks still held (until its KV has left); a decoding engine
        keeps it decoding unless that token was its last."""
        job.first = k
        self.prefilling.remove(job)
        left = job.out - job.given
        if not decodes or left == 1:
            self.jobs.remove(job)
            if decodes:
                self.used -= job.held
                job.segments.append((k, 1))
            return
        self.running += 1
        self.context += job.before + 1
        self.due[(k + 1 - job.before) % self.bs] += 1
        self.finishing.setdefault(k + left - 1, []).append(job)

    def finish(self, k: int) -> list[Job]:
        """The jobs whose last token step `k` gave leave, freeing their blocks; those jobs."""
        done = self.finishing.pop(k, [])
        for job in done:
            self._stop(job, k, k - job.first + 1)
        return done
