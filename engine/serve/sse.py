"""Reading a server-sent event stream as OpenAI-style servers write it: `data: ...` lines,
ended by `data: [DONE]`."""

from __future__ import annotations

from collections.abc import AsyncIterator


class DataEvents:
    """The payloads of a stream's `data:` lines (an aiohttp StreamReader's), in order, up to
    `[DONE]`; `done` says afterwards whether the stream ended with it (else it was cut)."""

    def __init__(self, content):
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
