"""Connections a server keeps only while they work: one that has not sent a whole request's
headers within HEADERS_S of opening is closed (a slow-loris client never finishes them),
keep-alive between requests ends after IDLE_S, and a client past MAX_PER_CLIENT
connections loses its idle ones, oldest first. Checked once a second, never per request."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from aiohttp import web

HEADERS_S = 10.0
IDLE_S = 30.0  # aiohttp's keepalive_timeout
MAX_PER_CLIENT = 512
CHECK_EVERY_S = 1.0


async def watch(server: web.Server) -> None:
    """Until cancelled: close what the rules above say, on `server` (AppRunner.server)."""
    loop = asyncio.get_running_loop()
    born: dict = {}
    while True:
        await asyncio.sleep(CHECK_EVERY_S)
        now, handlers = loop.time(), server.connections
        born = {h: born.get(h, now) for h in handlers}
        by_client: dict[object, list] = defaultdict(list)
        for h in handlers:
            # aiohttp counts the requests whose headers it parsed on a connection
            if h._request_count == 0 and now - born[h] > HEADERS_S:
                h.force_close()
                continue
            transport = h.transport
            peer = transport.get_extra_info("peername") if transport else None
            by_client[peer[0] if peer else None].append(h)
        for conns in by_client.values():
            idle = [h for h in conns if h._current_request is None]
            for h in sorted(idle, key=born.__getitem__)[:max(0, len(conns) - MAX_PER_CLIENT)]:
                h.force_close()
