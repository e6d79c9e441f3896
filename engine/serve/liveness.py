"""Liveness of the instances behind a front, so no request waits out a read timeout on an
instance that has stopped (SIGSTOP, a hung host) or died, and none is sent to one.

One task asks every instance's /health each CHECK_EVERY_S. After MISSES failed checks in
a row an instance is down: it is left out of the rotation (ejected), and the requests in
flight to it are cancelled, marked, so their handlers answer 502 at once. It is back in
the rotation at its first good answer. Nothing runs per request or per token chunk. Inside
a deployment an answer is good only with the proof of holding its secret: a process that
took a dead instance's port is never routed to.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Callable

import aiohttp

from engine.core import deployment
from engine.serve.recent import Recent

CHECK_EVERY_S = 1.0
CHECK_TIMEOUT_S = 2.0
STICKY_TTL_S = 600.0  # a conversation idle longer may go anywhere: its cache is cold by then
STICKY_BYTES = 16 << 20  # per tier, conversation IDs and their entries' overhead together
STICKY_ENTRY_BYTES = 200
MISSES = 2  # a stalled instance is given up on after about 1 + 2 x 2 = 5 s


class UpstreamDown(Exception):
    """The instance stopped answering /health while this request waited on it."""


class Liveness:
    """The instances' health, over one aiohttp session (a getter: it starts later)."""

    def __init__(self, session: Callable[[], aiohttp.ClientSession], urls: list[str],
                 secret: bytes | None = None):
        self._session, self.urls, self.secret = session, list(dict.fromkeys(urls)), secret
        self.down: set[str] = set()
        self._misses = dict.fromkeys(self.urls, 0)
        self._waiting: dict[str, set[asyncio.Task]] = {u: set() for u in self.urls}
        self._given_up: set[asyncio.Task] = set()
        self._task: asyncio.Task | None = None
        # per tier (its URLs): conversation -> the instance its turns go to, oldest first
        self._sticky: dict[tuple[str, ...], Recent[str]] = {}

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def pick(self, rotation, count: int) -> str | None:
        """The next of `count` URLs from an itertools.cycle that is not down, or None."""
        for _ in range(count):
            url = next(rotation)
            if url not in self.down:
                return url
        return None

    def pick_for(self, key: str | None, urls: list[str], rotation) -> str | None:
        """`pick`, except that a conversation (`key`) sticks to the instance its first turn
        went to while that one is up, so its prefix cache (or held KV) can serve the next
        turn. First turns still go round robin: no imbalance for single-turn traffic."""
        if not key:
            return self.pick(rotation, len(urls))
        sticky = self._sticky.get(tuple(urls))
        if sticky is None:
            sticky = self._sticky[tuple(urls)] = Recent(
                STICKY_TTL_S, STICKY_BYTES, lambda key, url: len(key) + STICKY_ENTRY_BYTES)
        url = sticky.get(key)
        if url is None or url in self.down:
            url = self.pick(rotation, len(urls))
        if url is not None:
            sticky.put(key, url)
        return url

    def refused(self, base_url: str) -> None:
        """A connection to `base_url` was refused: nothing listens there (a dead process, not
        a stalled one), so it is down now, until its next good /health."""
        self._misses[base_url] = MISSES
        self.down.add(base_url)

    @contextlib.asynccontextmanager
    async def guard(self, base_url: str) -> AsyncIterator[None]:
        """Inside, the current task is cancelled if `base_url` goes down; that cancellation
        comes out as UpstreamDown (a client's own disconnect stays a CancelledError)."""
        me = asyncio.current_task()
        self._waiting[base_url].add(me)
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

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(CHECK_EVERY_S)
            alive = await asyncio.gather(*(self._alive(u) for u in self.urls))
            for url, ok in zip(self.urls, alive):
                self._misses[url] = 0 if ok else self._misses[url] + 1
                if ok:
                    self.down.discard(url)
                elif self._misses[url] >= MISSES:
                    self.down.add(url)
                    for task in list(self._waiting[url]):
                        self._given_up.add(task)
                        task.cancel()

    async def _alive(self, base_url: str) -> bool:
        nonce = secrets.token_hex(8) if self.secret else None
        try:
            timeout = aiohttp.ClientTimeout(total=CHECK_TIMEOUT_S)
            async with self._session().get(base_url + "/health", timeout=timeout,
                                           params={"proof": nonce} if nonce else None) as r:
                if r.status != 200 or nonce is None:
                    return r.status == 200
                said = (await r.json(content_type=None)).get("proof")
                return said == deployment.proof(self.secret, nonce)
        except (TimeoutError, aiohttp.ClientError, ValueError, AttributeError):
            return False
