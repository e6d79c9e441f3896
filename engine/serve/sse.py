"""Server-sent event streams as OpenAI-style servers write them: `data: ...` events, ended
by `data: [DONE]`; writing one event, and reading a stream's."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
from aiohttp import web

from engine.render.protocol import error_body

DONE = b"data: [DONE]\n\n"


def event(obj: dict[str, Any] | bytes) -> bytes:
    """One `data:` event: a JSON object, or JSON bytes as they are."""
    data = obj if isinstance(obj, bytes) else json.dumps(obj, separators=(",", ":")).encode()
    return b"data: " + data + b"\n\n"


def error_event(message: str) -> bytes:
    """An OpenAI-style upstream error (502) as one event: how a stream whose headers are
    already out says that it failed."""
    return event(error_body(message, "upstream_error", 502))


async def relay(upstream: aiohttp.ClientResponse, resp: web.StreamResponse, who: str,
                peek: Callable[[bytes], None] | None = None) -> None:
    """`upstream`'s body into `resp` (prepared: its headers are out) as it comes, each
    piece shown to `peek` too; a failure on the way is written as an error event naming
    `who`."""
    try:
        async for chunk in upstream.content.iter_any():
            await resp.write(chunk)
            if peek is not None:
                peek(chunk)
    except (TimeoutError, aiohttp.ClientError) as e:
        await resp.write(error_event(f"{who} failed mid-stream: {e}"))


class EventTail:
    """Fed a stream's bytes piece by piece, keeps the last `data:` event holding `needle`
    (parsed), without parsing the others: how a proxy finds what a server says in its
    final chunk while relaying the rest untouched."""

    def __init__(self, needle: bytes) -> None:
        self.needle, self.found = needle, None
        self._buf = b""

    def __call__(self, piece: bytes) -> None:
        self._buf += piece
        *events, self._buf = self._buf.split(b"\n\n")
        for ev in events:
            if self.needle in ev and ev.startswith(b"data:"):
                try:
                    self.found = json.loads(ev[5:])
                except ValueError:
                    continue


class DataEvents:
    """The payloads of a stream's `data:` lines (an aiohttp StreamReader's), in order, up to
    `[DONE]`; `done` says afterwards whether the stream ended with it (else it was cut)."""

    def __init__(self, content: aiohttp.StreamReader) -> None:
        self.content, self.done = content, False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for line in self.content:
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                self.done = True
                return
            yield data
