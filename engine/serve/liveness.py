"""Liveness of the instances behind a front, so a request never waits out a read timeout
on an instance that has stopped (SIGSTOP, a hung host) or died.

While requests to an instance are in flight, one watcher per instance asks its /health
every CHECK_EVERY_S; after MISSES failed checks in a row it cancels those requests' tasks,
marked, so their handlers answer 502 at once. Nothing runs per token chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import aiohttp

CHECK_EVERY_S = 1.0
CHECK_TIMEOUT_S = 2.0
MISSES = 2  # a stalled instance is given up on after about 1 + 2 x 2 = 5 s


class UpstreamDown(Exception):
    """The instance stopped answering /health while this request waited on it."""


class Liveness:
    """Per-instance watchers over one aiohttp session (given as a getter: it starts later)."""

    def __init__(self, session: Callable[[], aiohttp.ClientSession]):
        self._session = session
        self._waiting: dict[str, set[asyncio.Task]] = {}
        self._watchers: dict[str, asyncio.Task] = {}
        self._given_up: set[asyncio.Task] = set()

    @contextlib.asynccontextmanager
    async def guard(self, base_url: str) -> AsyncIterator[None]:
        """Inside, the current task is cancelled if `base_url` stops answering; that
        cancellation comes out as UpstreamDown (a client's own disconnect stays a
        CancelledError)."""
        me = asyncio.current_task()
        self._waiting.setdefault(base_url, set()).add(me)
        if base_url not in self._watchers:
            self._watchers[base_url] = asyncio.create_task(self._watch(base_url))
        try:
            yield
        except asyncio.CancelledError:
            if me not in self._given_up:
                raise
            me.uncancel()
            raise UpstreamDown(f"{base_url} stopped answering /health") from None
        finally:
            self._given_up.discard(me)
            self._waiting[base_url].discard(me)

    async def _watch(self, base_url: str) -> None:
        misses = 0
        try:
            while self._waiting.get(base_url):
                await asyncio.sleep(CHECK_EVERY_S)
                misses = 0 if await self._alive(base_url) else misses + 1
                if misses >= MISSES:
                    for task in list(self._waiting.get(base_url, ())):
                        self._given_up.add(task)
                        task.cancel()
                    misses = 0
        finally:
            self._watchers.pop(base_url, None)

    async def _alive(self, base_url: str) -> bool:
        try:
            timeout = aiohttp.ClientTimeout(total=CHECK_TIMEOUT_S)
            async with self._session().get(base_url + "/health", timeout=timeout) as r:
                return r.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return False

    async def close(self) -> None:
        for task in list(self._watchers.values()):
            task.cancel()
