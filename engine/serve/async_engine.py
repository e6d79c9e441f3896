"""Runs an LLMEngine on its own thread beside an asyncio event loop.

The engine thread owns the engine: every mutation reaches it through a queue,
which also wakes it at once when idle (no polling). Outputs go back to each
request's asyncio queue with `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

from engine.core.llm_engine import LLMEngine, RequestOutput
from engine.core.sequence import SamplingParams
from engine.model.kv_payload import KVPayload

_IDLE_WAKE_S = 0.25  # how often an idle engine still checks KV leases


@dataclass
class StepStats:
    """What the engine thread reports after every step (for metrics)."""

    duration_s: float
    num_running: int
    num_waiting: int
    kv_usage: float


class AsyncEngine:
    """Async front of one engine instance."""

    def __init__(self, engine: LLMEngine, on_step: Callable[[StepStats],
                 None] | None = None) -> None:
        self.engine = engine
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue[Any]]] = {}
        self._on_step = on_step
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._inbox.put(lambda: None)
        self._thread.join(timeout=10)

    # ---- API (event loop side) ------------------------------------------------------------------
    async def generate(self, prompt_token_ids: list[int], params: SamplingParams,
                       request_id: str, kv: KVPayload | None = None,
                       remote_decode: bool | None = None,
                       keep_as: str | None = None) -> AsyncGenerator[RequestOutput, None]:
        """Stream a request's outputs. Raises ValueError (bad request) before the first
        output; closing the iterator early aborts the request and frees its blocks."""
        loop = asyncio.get_running_loop()
        outputs: asyncio.Queue[Any] = asyncio.Queue()
        self._streams[request_id] = (loop, outputs)
        added = loop.create_future()

        def add() -> None:
            try:
                self.engine.add_request(prompt_token_ids, params, request_id, kv, remote_decode,
                                        keep_as)
                loop.call_soon_threadsafe(_settle, added, None)
            except Exception as e:
                self._streams.pop(request_id, None)
                loop.call_soon_threadsafe(_settle, added, e)

        self._inbox.put(add)
        finished = False
        try:
            # NOTE: inside the try, so that a caller cancelled while its request is admitted
            # still aborts it
            await added
            while not finished:
                out = await outputs.get()
                if isinstance(out, Exception):
                    raise RuntimeError(f"engine step failed: {out}") from out
                finished = out.finished
                yield out
        finally:
            self._streams.pop(request_id, None)
            if not finished:
                self._inbox.put(lambda: self.engine.abort(request_id))

    def submit(self, fn: Callable[[], object]) -> None:
        """Run `fn()` on the engine thread between steps; fire and forget (any thread)."""
        self._inbox.put(fn)

    # ---- engine thread --------------------------------------------------------------------------
    def _fail_all(self, error: Exception) -> None:
        for request_id, (loop, q) in list(self._streams.items()):
            self.engine.abort(request_id)
            loop.call_soon_threadsafe(q.put_nowait, error)

    def _run(self) -> None:
        eng = self.engine
        while not self._stop.is_set():
            busy = eng.has_unfinished()
            try:
                job = self._inbox.get(block=not busy, timeout=None if busy else _IDLE_WAKE_S)
                job()
                while True:  # drain everything queued before stepping
                    self._inbox.get_nowait()()
            except queue.Empty:
                pass
            eng.expire_leases()
            if not eng.has_unfinished():
                continue
            t = time.perf_counter()
            try:
                outs = eng.step()
            except Exception as e:
                self._fail_all(e)
                continue
            if self._on_step:
                sched = eng.scheduler
                self._on_step(StepStats(time.perf_counter() - t, len(sched.running),
                                        len(sched.waiting), eng.block_manager.usage))
            for out in outs:
                target = self._streams.get(out.request_id)
                if target is not None:
                    loop, q = target
                    loop.call_soon_threadsafe(q.put_nowait, out)


def _settle(future: asyncio.Future[Any], error: Exception | None) -> None:
    """Resolve an admission future unless its waiter was cancelled meanwhile."""
    if not future.done():
        future.set_result(None) if error is None else future.set_exception(error)
