"""Reading a `text/event-stream` response as the measuring client must from any server:
events end at a blank line, an event's `data:` lines join with newlines, comments (`:`)
and other fields are skipped, and `data: [DONE]` ends an OpenAI-style stream."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp

DONE = b"[DONE]"
MAX_EVENT_BYTES = 16 << 20  # one event's data: past any chunk a server means to send


class EventData:
    """The data of each event of a stream body (an aiohttp StreamReader), in order, up to
    `[DONE]`; `done` says afterwards whether the stream ended with it (else it was cut).
    ValueError for an event past MAX_EVENT_BYTES: a server cannot make the client hold more."""

    def __init__(self, content: aiohttp.StreamReader) -> None:
        self.content, self.done = content, False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        lines: list[bytes] = []
        held = 0
        async for raw in self.content:
            line = raw.rstrip(b"\r\n")
            if line:
                field, _, value = line.partition(b":")
                if field == b"data":
                    lines.append(value[1:] if value.startswith(b" ") else value)
                    held += len(value)
                    if held > MAX_EVENT_BYTES:
                        raise ValueError(f"an event past {MAX_EVENT_BYTES >> 20} MiB")
                continue
            if lines:  # a blank line dispatches the event
                data, lines, held = b"\n".join(lines), [], 0
                if data.strip() == DONE:
                    self.done = True
                    return
                yield data
        # NOTE: a last event the server did not end with a blank line still counts: the
        # spec drops it, but its tokens did arrive
        if lines:
            data = b"\n".join(lines)
            if data.strip() == DONE:
                self.done = True
            else:
                yield data
