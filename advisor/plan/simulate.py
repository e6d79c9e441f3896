"""A discrete-event simulation of a serving system: requests arrive, engines step (batching
as advisor.plan.batching does), KV crosses its link, each step lasting what its step model
says, with a wake-up cost after idle and contention between instances sharing a host
where the system has them. Decode-only steps are planned as one run up to the next event,
so it costs O(requests) events, not O(steps). docs/design/planner.md has the model."""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from advisor.measure.records import RequestRecord
from advisor.plan.batching import Batcher, Job
from advisor.plan.steptime import Step
from advisor.plan.system import EngineSpec, SimRequest, System

JITTER_SEED = 0


@dataclass
class _Engine:
    role: str  # both | prefill | decode
    q: Batcher  # its queue, requests and blocks (and its EngineSpec: `q.spec`)
    busy: bool = False
    step_ends: list[Any] = field(default_factory=list)
    run: bool = False  # the steps in progress are a planned run of decode-only steps
    chunks: list[Any] = field(default_factory=list)  # this step's (job, tokens)
    first_step: int = 0  # of the steps in progress (a run of decode-only steps, or one)
    generation: int = 0  # bumped when a run is cut: its planned end event is stale
    idle_since: float | None = -np.inf  # None while it steps (the start: idle for ever)


@dataclass
class Simulation:
    """What the simulation gives back: one client record per request, and the transfers."""

    records: list[RequestRecord]
    transfers_s: list[float]
    transfer_bytes: float
    duration: float
    start: float  # the first arrival on the records' clock


# NOTE: the records' clock starts here, not at 0: a RequestRecord's 0 means "never sent"
EPOCH = 1.0


def simulate(system: System, requests: list[SimRequest],
             concurrency: int | None = None) -> Simulation:
    """Every request served (or refused) on `system`; records as the client keeps them.
    With `concurrency`, a closed loop as `vllm bench serve --max-concurrency` runs one: at
    most that many in flight, each further request sent (at the earliest at its arrival)
    when one ends."""
    shifted = [SimRequest(r.arrival + EPOCH, r.prompt, r.output) for r in requests]
    return _Sim(system, shifted, concurrency).run()


class _Sim:
    def __init__(self, system: System, requests: list[SimRequest],
                 concurrency: int | None = None) -> None:
        self.sys, self.reqs = system, requests
        self.cap = concurrency
        self.pending = iter(range(len(requests)))  # not yet sent (a closed loop's queue)
        self.rng = np.random.default_rng(JITTER_SEED)
        self.decoders = [_Engine("decode" if system.prefill else "both", Batcher(s))
                         for s in system.decode]
        self.prefillers = [_Engine("prefill", Batcher(s)) for s in system.prefill]
        self.engines = self.decoders + self.prefillers
        self.events: list[Any] = []
        self.seq = itertools.count()
        self.served: dict[int, tuple[_Engine, Job]] = {}  # request -> where it decoded
        self.link_free = [0.0] * len(self.decoders)
        self.transfers: dict[int, float] = {}
        self.moved = 0.0  # KV bytes sent
        self.failed: dict[int, str] = {}
        self.target: dict[int, int] = {}  # request -> its decoder
        self.lone_ms: dict[int, float] = {}  # id(spec) -> one request's decode step (jitter)

    def _at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self.events, (t, next(self.seq), fn, args))

    def run(self) -> Simulation:
        for _ in range(len(self.reqs) if self.cap is None else self.cap):
            self._send_next(0.0)
        while self.events:
            t, _, fn, args = heapq.heappop(self.events)
            fn(t, *args)
        return self._outcome()

    def _send_next(self, t: float) -> None:
        """The next request not yet sent, sent at `t` or at its arrival if later."""
        i = next(self.pending, None)
        if i is None:
            return
        r = self.reqs[i]
        if t > r.arrival:  # a closed loop's: sent when a slot freed, and stamped so
            r = self.reqs[i] = SimRequest(t, r.prompt, r.output)
        pd = bool(self.prefillers)
        hop = (self.sys.front_ms + (self.sys.proxy_ms if pd else 0.0)) / 1000
        d = i % len(self.decoders)
        self.target[i] = d
        if pd:
            e = self.prefillers[i % len(self.prefillers)]
            job = Job(i, r.prompt, 1, r.prompt, 0)
        else:
            e, job = self.decoders[d], Job(i, r.prompt, r.output, r.prompt, 0)
        self._at(r.arrival + hop, self._arrive, e, job)

    def _ended(self, t: float, jobs: int) -> None:
        """`jobs` requests ended (served or refused) at `t`: a closed loop sends as many."""
        if self.cap is not None:
            for _ in range(jobs):
                self._send_next(t)

    # ---- engines ------------------------------------------------------------------------------
    def _arrive(self, t: float, e: _Engine, job: Job) -> None:
        why = e.q.refusal(job)
        if why:
            self.failed[job.req] = why
            self._ended(t, 1)
            return
        e.q.waiting.append(job)
        if e.busy and e.run:
            self._cut(t, e)
        self._start(t, e)

    def _start(self, t: float, e: _Engine) -> None:
        if e.busy:
            return
        q, k = e.q, len(e.step_ends)
        spec = q.spec
        run = q.only_decodes(k)
        # a run of decode-only steps lasts until the next request's last token or the first
        # step short of blocks (an arrival cuts it at the step in progress)
        if run:
            if not q.running:
                return
            m = q.decode_run(k, min(q.finishing) - k + 1)
            chunks = []
        else:
            chunks = q.schedule(k)
            if not chunks and not q.running:
                return
        idle_s = None if e.idle_since is None or not self.sys.wake else t - e.idle_since
        if e.idle_since is not None:
            self._disturb(t, e)
        e.idle_since = None
        shared = 1.0 + self.sys.contention * sum(o.busy for o in self.engines if o is not e) \
            if self.sys.contention else 1.0
        e.busy, e.run, e.chunks, e.first_step = True, run, chunks, k
        if run:
            e.step_ends.extend(self._run_ends(t, spec, q.running, q.context, m, shared, idle_s))
        else:
            tokens = singles = 0
            pairs = read = q.context
            for job, n in chunks:
                tokens += n
                singles += n == 1
                pairs += n * (job.before + (n + 1) / 2)
                read += job.before + n
            # a one-token chunk (a transferred prompt's last token) is a decode's work
            ms = spec.step.ms(Step(q.running + singles, tokens - singles, pairs, read)) * shared
            if spec.jitter:
                ms = self._jittered(spec, ms, 1)[0]
            e.step_ends.append(t + (float(ms) + self._wake_ms(idle_s, float(ms))) / 1000)
        self._at(e.step_ends[-1], self._step_done, e, e.generation)

    def _run_ends(self, t: float, spec: EngineSpec, running: int, context: float, m: int,
                  shared: float, idle_s: float | None) -> list[float]:
        """The end times of `m` decode-only steps of `running` requests from `t`, their
        context `context` tokens at the first and growing by `running` a step.

        A step model is linear in the context at a fixed batch, or the larger of two such
        lines, so convex: when its times at steps 0, 1 and m - 1 lie on one line, every
        step's does, and three calls give the run's times."""
        def at(i: int) -> float:
            c = context + running * i
            return float(spec.step.ms(Step(running, 0, c, c)))

        a, b, z = at(0), at(1), at(m - 1)
        if m < 3 or abs(z - a - (m - 1) * (b - a)) <= 1e-9 * z:
            a, b = a * shared, b * shared
            if not spec.jitter:  # the line's sum: t + k a + (b - a) k (k - 1) / 2 at step k
                half = (b - a) / 2000
                k = np.arange(1.0, m + 1)  # [m] steps done at each end
                ends: list[float] = (t + self._wake_ms(idle_s, a) / 1000
                                     + k * (a / 1000 - half + half * k)).tolist()
                return ends
            ms = (b - a) * np.arange(m) + a  # [m]
        else:
            grown = context + running * np.arange(m)  # [m] context at each step
            ms = np.asarray(spec.step.ms(Step(running, 0, grown, grown))) * shared  # [m]
        if spec.jitter:
            ms = self._jittered(spec, ms, m)
        ms[0] += self._wake_ms(idle_s, ms[0])
        ms /= 1000
        ms[0] += t
        return cast("list[float]", np.cumsum(ms, out=ms).tolist())

    def _wake_ms(self, idle_s: float | None, step_ms: float) -> float:
        """The extra ms of a `step_ms` step after its engine sat idle `idle_s` seconds: the
        wake-up curve there (0 when it steps on from its last step)."""
        if idle_s is None:
            return 0.0
        idle, fixed, share = zip(*self.sys.wake)
        return float(np.interp(idle_s, idle, fixed) + np.interp(idle_s, idle, share) * step_ms)

    def _jittered(self, spec: EngineSpec, ms: float | np.ndarray[Any, Any], m: int
                  ) -> np.ndarray[Any, Any]:
        """[m] step times `ms` (a scalar or [m]) times a lognormal factor of median 1: its
        sigma is `spec.jitter` for a step no longer than one request's decode step, and
        shrinks as 1/sqrt(length) for longer ones.

        A step's noise is the disturbances that land in it, so its relative spread falls as
        the step grows (with a decode step's spread a long prefill would lose ~10% of its
        throughput to the lognormal's mean)."""
        ref = self.lone_ms.get(id(spec))
        if ref is None:
            ref = self.lone_ms[id(spec)] = float(spec.step.ms(Step(decodes=1)))
        sigma = spec.jitter * np.sqrt(np.minimum(1.0, ref / np.maximum(ms, 1e-9)))
        return ms * np.exp(sigma * self.rng.standard_normal(m))

    def _cut(self, t: float, e: _Engine) -> None:
        """A job arrived while `e` runs planned decode-only steps: stop after the step in
        progress at `t`, so the next one can take it."""
        last = len(e.step_ends) - 1
        j = bisect.bisect_left(e.step_ends, t, e.first_step, last)
        if j < last:
            del e.step_ends[j + 1:]
            e.generation += 1
            self._at(e.step_ends[j], self._step_done, e, e.generation)

    def _step_done(self, t: float, e: _Engine, generation: int) -> None:
        if generation != e.generation:
            return  # a run that was cut short ends at its new last step instead
        k, q = len(e.step_ends) - 1, e.q
        q.ran(e.first_step, k - e.first_step + 1, blocks=e.run)
        ended = len(q.finish(k))
        for job, n in e.chunks:
            job.remaining -= n
            job.before += n
            if job.remaining:
                continue
            q.prefilled(job, k, decodes=e.role != "prefill")
            if e.role == "prefill":
                self._send(t, e, job)
            else:
                self.served[job.req] = (e, job)
                ended += job.out - job.given == 1  # its first token was its last
        e.busy, e.run, e.chunks = False, False, []
        self._ended(t, ended)
        self._start(t, e)
        if not e.busy:
            e.idle_since = t
            self._disturb(t, e)

    def _disturb(self, t: float, e: _Engine) -> None:
        """`e` starts or stops stepping at `t`: with contention, the others' planned runs
        end after their step in progress, so their next steps see the change."""
        if self.sys.contention:
            for o in self.engines:
                if o is not e and o.busy and o.run:
                    self._cut(t, o)

    # ---- P/D ----------------------------------------------------------------------------------
    def _send(self, t: float, e: _Engine, job: Job) -> None:
        """The prompt's KV crosses to the request's decoder, queued behind earlier
        transfers into that decoder; the prefiller frees it when done. As vLLM's
        NixlConnector pulls it: the decode request reaches the decoder after the proxy's
        hop, its scheduler parks it and the read starts with the decoder's next step
        (`start_load_kv`); a finished read is seen at the end of the step it lands in, and
        the request joins the step after (`_arrive` at the step boundary)."""
        d = self.target[job.req]
        assert self.sys.kv_bytes is not None and self.sys.link is not None  # a P/D's
        nbytes = self.sys.kv_bytes(job.before)
        start = max(self._next_step(self.decoders[d], t + self.sys.proxy_ms / 1000),
                    self.link_free[d])
        end = start + self.sys.link.seconds(nbytes)
        self.moved += nbytes
        self.link_free[d] = end
        self.transfers[job.req] = end - start
        r = self.reqs[job.req]
        self._at(end, self._transferred, e, job, self.decoders[d],
                 Job(job.req, r.prompt, r.output, 1, r.prompt - 1))

    @staticmethod
    def _next_step(e: _Engine, t: float) -> float:
        """When `e` next starts a step at or after `t`: at once where it is idle, else at
        the end of its step in progress (as planned at `t`)."""
        if not e.busy:
            return t
        j = bisect.bisect_left(e.step_ends, t, e.first_step)
        return e.step_ends[j] if j < len(e.step_ends) else t

    def _transferred(self, t: float, pre: _Engine, job: Job, dec: _Engine, nxt: Job) -> None:
        pre.q.used -= job.held
        self._start(t, pre)
        self._arrive(t, dec, nxt)

    # ---- records ------------------------------------------------------------------------------
    def _outcome(self) -> Simulation:
        records, last = [], 0.0
        for i, r in enumerate(self.reqs):
            rec = RequestRecord(i, f"sim-{i}", 0, False, r.arrival, r.arrival, r.arrival,
                                prompt_tokens=r.prompt, token_source="usage")
            if i in self.served:
                e, job = self.served[i]
                rec.chunks = [t for k, n in job.segments for t in e.step_ends[k:k + n]] \
                    if len(job.segments) > 1 else e.step_ends[job.first:job.first + r.output]
                rec.end, rec.status, rec.output_tokens = rec.chunks[-1], 200, r.output
                if i in self.transfers:
                    rec.kv_transfer_ms = self.transfers[i] * 1000
                last = max(last, rec.end)
            else:
                rec.status, rec.error = 503, self.failed.get(i, "never served")
                rec.end = r.arrival
            records.append(rec)
        start = min((r.arrival for r in self.reqs), default=0.0)
        return Simulation(records, list(self.transfers.values()), self.moved,
                       max(last - start, 0.0), start)
