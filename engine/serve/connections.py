"""Connections a server keeps only while they work: one that has not sent a whole request's
headers within HEADERS_S of opening is closed (a slow-loris client never finishes them), as
is one whose request's body is still arriving BODY_S after its headers (a client trickling
a byte at a time); keep-alive between requests ends after IDLE_S, and a client past
MAX_PER_CLIENT connections loses its idle ones, then those still sending a body, oldest
first. Checked once a second, never per request."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

HEADERS_S = 10.0
BODY_S = 60.0  # 64 MiB at ~1 MB/s: no honest client on a link we serve takes longer
IDLE_S = 30.0  # aiohttp's keepalive_timeout
MAX_PER_CLIENT = 512
CHECK_EVERY_S = 1.0


async def watch(server: web.Server) -> None:
    """Until cancelled: close what the rules above say, on `server` (AppRunner.server)."""
    loop = asyncio.get_running_loop()
    born: dict[RequestHandler, float] = {}
    # handler -> (its current request, when it was first seen)
    asked: dict[RequestHandler, tuple[Any, ...]] = {}
    while True:
        await asyncio.sleep(CHECK_EVERY_S)
        now, handlers = loop.time(), server.connections
        born = {h: born.get(h, now) for h in handlers}
        asked = {h: _asked(h, asked.get(h), now) for h in handlers}
        by_client: dict[object, list[Any]] = defaultdict(list)
        for h in handlers:
            # aiohttp counts the requests whose headers it parsed on a connection
            late_headers = h._request_count == 0 and now - born[h] > HEADERS_S
            req, since = asked[h]
            if late_headers or (_sending(req) and now - since > BODY_S):
                h.force_close()
                continue
            transport = h.transport
            peer = transport.get_extra_info("peername") if transport else None
            by_client[peer[0] if peer else None].append(h)
        for conns in by_client.values():
            idle = [h for h in conns if h._current_request is None]
            sending = [h for h in conns if _sending(asked[h][0])]
            spare = sorted(idle, key=born.__getitem__) + sorted(sending, key=born.__getitem__)
            for h in spare[:max(0, len(conns) - MAX_PER_CLIENT)]:
                h.force_close()


def _asked(handler: RequestHandler, before: tuple[Any, ...] | None,
           now: float) -> tuple[Any, ...]:
    """(the request `handler` serves now, when it was first seen)."""
    req = handler._current_request
    return before if before is not None and before[0] is req else (req, now)


def _sending(req: web.BaseRequest | None) -> bool:
    """Whether `req`'s body is still arriving (its headers in, not all of its body)."""
    return req is not None and not req.content.is_eof()
