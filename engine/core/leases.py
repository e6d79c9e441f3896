"""KV a prefiller holds for decoders to pull: the scheduler side of a KV connector.

A request that finished with `remote_decode` keeps its blocks here under a lease
(`kv_lease_duration`), until a decoder releases it or the lease runs out. Readers
(exports, side-channel pulls) run on other threads; the table is locked.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from engine.core.sequence import Request


@dataclass
class _Held:
    request: Request
    expires_at: float
    readers: int = 0  # reads in progress; the lease cannot expire under them


class KVLeases:
    """Held requests by id, each with a lease; `free(request)` returns its blocks."""

    def __init__(self, duration_s: float, free: Callable[[Request], None]) -> None:
        self.duration_s, self._free = duration_s, free
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()
        self.expired_total = 0  # leases that ran out (read from other threads: an int)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._held

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, req: Request, key: str | None = None) -> None:
        """Keep a finished request's blocks for `duration_s` under `key` (default: its id),
        engine thread."""
        with self._lock:
            self._held[key or req.request_id] = _Held(req, time.monotonic() + self.duration_s)

    def get(self, request_id: str) -> Request | None:
        """The held request, or None; does not touch its lease."""
        held = self._held.get(request_id)
        return held.request if held else None

    def expires_at(self, request_id: str) -> float:
        """time.monotonic() at which the held request's lease runs out."""
        return self._get(request_id).expires_at

    def lend(self, request_id: str) -> Request:
        """The held request, its lease renewed (any thread). A reader of its blocks must
        finish within `duration_s` of this call, or they may be reused under it."""
        with self._lock:
            held = self._get(request_id)
            held.expires_at = time.monotonic() + self.duration_s
        return held.request

    @contextlib.contextmanager
    def reading(self, request_id: str) -> Iterator[Request]:
        """The held request, which cannot expire or be released until the block exits."""
        with self._lock:
            held = self._get(request_id)
            held.readers += 1
        try:
            yield held.request
        finally:
            with self._lock:
                held.readers -= 1

    def release(self, request_id: str) -> bool:
        """Free a held request's blocks now (the decoder has its copy). True if freed."""
        with self._lock:
            held = self._held.get(request_id)
            if held is None or held.readers:
                return False
            del self._held[request_id]
        self._free(held.request)
        return True

    def expire(self, now: float | None = None) -> list[str]:
        """Free every request whose lease ran out; returns their ids."""
        now = time.monotonic() if now is None else now
        with self._lock:
            expired = [
                rid for rid, h in self._held.items() if h.expires_at <= now and not h.readers
            ]
        freed = [rid for rid in expired if self.release(rid)]
        self.expired_total += len(freed)
        return freed

    def oldest(self) -> str | None:
        """The held request whose lease runs out first (and none reads), or None."""
        with self._lock:
            free = [(h.expires_at, rid) for rid, h in self._held.items() if not h.readers]
        return min(free)[1] if free else None

    def num_blocks(self) -> int:
        """Blocks held, over every held request."""
        with self._lock:
            return sum(len(h.request.block_ids) for h in self._held.values())

    def _get(self, request_id: str) -> _Held:
        held = self._held.get(request_id)
        if held is None:
            raise KeyError(
                f"no KV held for request {request_id!r} (never prefilled, "
                "already released, or its lease expired)"
            )
        return held
