"""Reading a `text/event-stream` response as the measuring client must from any server:
events end at a blank line, an event's `data:` lines join with newlines, comments (`:`)
and other fields are skipped, and `data: [DONE]` ends an OpenAI-style stream."""

from __future__ import annotations

from collections.abc import AsyncIterator

DONE = b"[DONE]"


class EventData:
    """The data of each event of a stream body (an aiohttp StreamReader), in order, up to
    `[DONE]`; `done` says afterwards whether the stream ended with it (else it was cut)."""

    def __init__(self, content):
        self.content, self.done = content, False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        lines: list[bytes] = []
        async for raw in self.content:
            line = raw.rstrip(b"\r\n")
            if line:
                field, _, value = line.partition(b":")
                if field == b"data":
                    lines.append(value[1:] if value.startswith(b" ") else value)
                continue
            if lines:  # a blank line dispatches the event
                data, lines = b"\n".join(lines), []
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
