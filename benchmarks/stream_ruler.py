"""A streaming server whose timing is known, cheap enough to drive a client to its limit:
raw asyncio protocol, events encoded once, each request's first event `ttft_ms` after its
first bytes arrived and one every `itl_ms` after, on an absolute schedule. It keeps, per
request (by its X-Request-ID or X-Conversation-Id header), when it arrived and when each
event was written: `GET /truth` returns them, `GET /reset` forgets them.

    python benchmarks/stream_ruler.py --port 8300 --ttft-ms 10 --itl-ms 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from typing import ClassVar

_TOKENS = re.compile(rb'"max(?:_completion)?_tokens"\s*:\s*(\d+)')
_KEY = re.compile(rb"\r\n(?:x-request-id|x-conversation-id):\s*([^\r\n]+)", re.I)
_LENGTH = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.I)
HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n")


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


EVENT = _chunk(b'data: {"id":"r","object":"text_completion","choices":[{"index":0,'
               b'"text":"tok","finish_reason":null}]}\n\n')


def _tail(n: int) -> bytes:
    usage = json.dumps({"id": "r", "object": "text_completion", "choices": [],
                        "usage": {"prompt_tokens": 1, "completion_tokens": n,
                                  "total_tokens": n + 1}}).encode()
    return _chunk(b"data: " + usage + b"\n\n") + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


class Ruler(asyncio.Protocol):
    truth: ClassVar[dict[str, dict]] = {}

    def __init__(self, ttft_s: float, itl_s: float):
        self.ttft_s, self.itl_s = ttft_s, itl_s
        self.buf, self.first = b"", 0.0

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if not self.buf:
            self.first = time.monotonic()
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end]
            m = _LENGTH.search(head)
            size = int(m.group(1)) if m else 0
            if len(self.buf) < end + 4 + size:
                return
            body, self.buf = self.buf[end + 4:end + 4 + size], self.buf[end + 4 + size:]
            self._answer(head, body, self.first)
            self.first = time.monotonic()

    def _answer(self, head: bytes, body: bytes, arrived: float) -> None:
        if head.startswith(b"GET"):
            if b"/reset" in head.split(b"\r\n", 1)[0]:
                Ruler.truth = {}
            data = json.dumps(Ruler.truth).encode()
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
            return
        m = _TOKENS.search(body)
        n = int(m.group(1)) if m else 16
        key = _KEY.search(head)
        writes: list[float] = []
        Ruler.truth[(key.group(1) if key else b"%d" % len(Ruler.truth)).decode()] = {
            "arrived": arrived, "writes": writes}
        self.transport.write(HEAD)
        loop = asyncio.get_running_loop()
        for k in range(n):
            loop.call_at(arrived + self.ttft_s + k * self.itl_s, self._write, writes,
                         EVENT + (_tail(n) if k == n - 1 else b""))

    def _write(self, writes: list[float], data: bytes) -> None:
        if not self.transport.is_closing():
            writes.append(time.monotonic())
            self.transport.write(data)


async def serve(host: str, port: int, ttft_ms: float, itl_ms: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Ruler(ttft_ms / 1000, itl_ms / 1000), host,
                                      port, backlog=4096)
    print(f"stream ruler ready on http://{host}:{port}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8300)
    ap.add_argument("--ttft-ms", type=float, default=10.0)
    ap.add_argument("--itl-ms", type=float, default=5.0)
    a = ap.parse_args()
    asyncio.run(serve(a.host, a.port, a.ttft_ms, a.itl_ms))


if __name__ == "__main__":
    main()
