"""Liveness of the instances behind a front, so no request waits out a read timeout on an
instance that has stopped (SIGSTOP, a hung host) or died, and none is sent to one.

One task asks every instance's /health each CHECK_EVERY_S. After MISSES failed checks in
a row an instance is down: it is left out of the rotation (ejected), and the requests in
flight to it are cancelled, marked, so their handlers answer 502 at once. It is back in
the rotation at its first good answer. Nothing runs per request or per token chunk. Inside
a deployment an answer is good only with the proof of holding its secret: a process that
took a dead instance's port is down at its first answer, and so is one whose answer to a
request lacks the proof (the front checks every answer: `ours`).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import aiohttp

from engine.core import deployment
from engine.fronts.recent import Recent
from engine.serve.http_app import NONCE_HEADER, PROOF_HEADER

CHECK_EVERY_S = 0.25
CHECK_TIMEOUT_S = 2.0
STICKY_TTL_S = 600.0  # a conversation idle longer may go anywhere: its cache is cold by then
STICKY_BYTES = 16 << 20  # per tier, conversation IDs and their entries' overhead together
STICKY_ENTRY_BYTES = 200
MISSES = 2  # a stalled instance is given up on after about 0.25 + 2 x 2 = 4.5 s


class UpstreamDown(Exception):
    """The instance stopped answering /health while this request waited on it."""


class Impostor(aiohttp.ClientConnectionError):
    """What answered at an instance's URL could not prove being the deployment's (or did
    not answer the proof's question): nothing more is sent on that connection."""


class Liveness:
    """The instances' health, asked over a session of its own (opened by `start`)."""

    def __init__(self, urls: list[str], secret: bytes | None = None) -> None:
        self.urls, self.secret = list(dict.fromkeys(urls)), secret
        self._session: aiohttp.ClientSession | None = None
        self.down: set[str] = set()
        self.seen: set[str] = set()  # instances that have answered a check, ever
        self._misses = dict.fromkeys(self.urls, 0)
        self._waiting: dict[str, set[asyncio.Task[Any]]] = {u: set() for u in self.urls}
        self._given_up: set[asyncio.Task[Any]] = set()
        self._task: asyncio.Task[Any] | None = None
        # per tier (its URLs): conversation -> the instance its turns go to, oldest first
        self._sticky: dict[tuple[str, ...], Recent[str]] = {}

    def start(self) -> None:
        self._session = aiohttp.ClientSession()
        self._task = asyncio.create_task(self._watch())

    def trace(self) -> aiohttp.TraceConfig:
        """For the front's session to its instances: inside a deployment, every new
        connection to one of them is checked (/health with a proof, over another connection)
        before a request goes on it, so that a process that took a dead instance's port
        gets nothing, not even in the instant before the next check of every instance."""
        config = aiohttp.TraceConfig()

        async def request_start(_session: aiohttp.ClientSession, ctx: SimpleNamespace,
                                params: aiohttp.TraceRequestStartParams) -> None:
            ctx.base = f"{params.url.scheme}://{params.url.host}:{params.url.port}"

        async def connection_made(_session: aiohttp.ClientSession, ctx: SimpleNamespace,
                                  _params: aiohttp.TraceConnectionCreateEndParams) -> None:
            base = getattr(ctx, "base", None)
            if self.secret is None or base not in self._misses:
                return
            if not await self._alive(base):  # not ours, or not answering: gone either way
                self.lost(base)
                raise Impostor(f"{base} did not prove being ours on a new connection")

        config.on_request_start.append(request_start)
        config.on_connection_create_end.append(connection_made)
        return config

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._session is not None:
            await self._session.close()

    def pick(self, rotation: Iterator[str], count: int) -> str | None:
        """The next of `count` URLs from an itertools.cycle that is not down, or None."""
        for _ in range(count):
            url = next(rotation)
            if url not in self.down:
                return url
        return None

    def pick_for(self, key: str | None, urls: list[str],
                 rotation: Iterator[str]) -> str | None:
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

    def serving(self) -> bool:
        """Whether any instance has answered its checks and is not down: until one has, a
        front that says it is healthy would only answer 503 (its instances still load)."""
        return any(u in self.seen and u not in self.down for u in self.urls)

    def nonce(self) -> dict[str, str]:
        """Headers for a request to an instance: a fresh nonce inside a deployment."""
        return {NONCE_HEADER: secrets.token_hex(8)} if self.secret else {}

    def ours(self, base_url: str, sent: dict[str, str], answer: aiohttp.ClientResponse) -> None:
        """Raise Impostor unless `answer` to a request sent with headers `sent` carries the
        deployment's proof; take `base_url` out of the rotation too, unless the answer is a
        4xx: an instance's HTTP parser refuses a request a client made malformed before the
        app (which adds the proof) runs, and that must not let a client eject it (an
        impostor still fails the proven /health checks)."""
        nonce = sent.get(NONCE_HEADER)
        if self.secret is None or nonce is None:
            return
        if not deployment.proven(self.secret, nonce, base_url, answer.headers.get(PROOF_HEADER)):
            if not 400 <= answer.status < 500:
                self.lost(base_url)
            raise Impostor(f"{base_url} answered without this deployment's proof")

    def lost(self, base_url: str) -> None:
        """A connection to `base_url` was refused (nothing listens there: a dead process, not
        a stalled one), or what answered there is not ours: it is down now, until its next
        good /health."""
        self._misses[base_url] = MISSES
        self.down.add(base_url)

    @contextlib.asynccontextmanager
    async def guard(self, base_url: str) -> AsyncIterator[None]:
        """Inside, the current task is cancelled if `base_url` goes down; that cancellation
        comes out as UpstreamDown (a client's own disconnect stays a CancelledError)."""
        me = asyncio.current_task()
        assert me is not None  # guarded code runs in a task
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
                if ok is None:  # an impostor: no second chance
                    self._misses[url] = MISSES
                if ok:
                    self.seen.add(url)
                    self.down.discard(url)
                elif self._misses[url] >= MISSES:
                    self.down.add(url)
                    for task in list(self._waiting[url]):
                        self._given_up.add(task)
                        task.cancel()

    async def _alive(self, base_url: str) -> bool | None:
        """Whether `base_url` answers /health (None: it answers, without the proof)."""
        nonce = secrets.token_hex(8) if self.secret else None
        try:
            timeout = aiohttp.ClientTimeout(total=CHECK_TIMEOUT_S)
            assert self._session is not None, "start() first"
            async with self._session.get(base_url + "/health", timeout=timeout,
                                           params={"proof": nonce} if nonce else None) as r:
                if r.status != 200 or nonce is None:
                    return r.status == 200
                said = (await r.json(content_type=None)).get("proof")
                return (self.secret is not None
                        and deployment.proven(self.secret, nonce, base_url, said)) or None
        except (TimeoutError, aiohttp.ClientError, ValueError, AttributeError):
            return False
