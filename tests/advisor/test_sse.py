"""The client's own event-stream reader, held to the SSE format any server may write."""

import asyncio

import pytest

from advisor.measure.sse import EventData

pytestmark = pytest.mark.unit


class Lines:
    """An aiohttp StreamReader's line iteration, over fixed lines."""

    def __init__(self, lines: list[bytes]):
        self.lines = lines

    async def __aiter__(self):
        for line in self.lines:
            yield line


def read(lines: list[bytes]) -> tuple[list[bytes], bool]:
    async def go():
        events = EventData(Lines(lines))
        return [d async for d in events], events.done

    return asyncio.run(go())


def test_events_end_at_blank_lines_and_done_ends_the_stream():
    got, done = read([b'data: {"a": 1}\n', b"\n", b"data: [DONE]\n", b"\n",
                      b"data: after\n", b"\n"])
    assert got == [b'{"a": 1}'] and done


def test_multi_line_data_comments_other_fields_and_crlf():
    got, done = read([b": keep-alive\n", b"\n", b"event: message\r\n", b"id: 7\r\n",
                      b"data:first\r\n", b"data: second\r\n", b"\r\n", b"data: [DONE]\r\n",
                      b"\r\n"])
    assert got == [b"first\nsecond"] and done


def test_a_stream_cut_short_is_not_done_but_keeps_what_arrived():
    got, done = read([b"data: 1\n", b"\n", b"data: 2\n"])
    assert got == [b"1", b"2"] and not done
    assert read([b"data: 1\n", b"\n", b"data: [DONE]\n"]) == ([b"1"], True)
