"""A streaming server whose timing is known, cheap enough to drive a client to its limit:
raw asyncio protocol, events encoded once, each request's first event `ttft_ms` after its
first bytes arrived (with --kernel-stamps, the kernel's receive stamp) and one every
`itl_ms` after, on an absolute schedule. It keeps, per request (by its X-Request-ID or
X-Conversation-Id header), when it arrived and when each event was written: `GET /truth`
returns them, `GET /reset` forgets them.

    python benchmarks/stream_ruler.py --port 8300 --ttft-ms 10 --itl-ms 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import time
from typing import ClassVar

from advisor.measure.arrival import SO_TIMESTAMPNS, receive_time

_ANCILLARY = socket.CMSG_SPACE(16)
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

    def __init__(self, ttft_s: float, itl_s: float, kernel_stamps: bool = False):
        self.ttft_s, self.itl_s, self.kernel_stamps = ttft_s, itl_s, kernel_stamps
        self.head, self.parts, self.have, self.need, self.first = b"", [], 0, -1, 0.0

    def connection_made(self, transport) -> None:
        # NOTE: reads bypass the transport (paused) for recvmsg, whose kernel stamp says
        # when a request's first bytes arrived however late this loop gets to them
        # (on a duplicate of the socket: asyncio watches no descriptor a transport holds)
        self.transport, self.sock = transport, None
        # NOTE: an event must not wait on Nagle for the ACK of the headers before it
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not self.kernel_stamps:
            return
        self.sock = socket.socket(fileno=os.dup(transport.get_extra_info("socket").fileno()))
        transport.pause_reading()
        asyncio.get_running_loop().add_reader(self.sock.fileno(), self._readable)

    def connection_lost(self, exc) -> None:
        if self.sock is not None and self.sock.fileno() >= 0:
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
            self.sock.close()

    def _readable(self) -> None:
        # NOTE: a read is stamped with its newest packet: a request's first byte is read
        # alone, so a late read of many packets still gives when its first one came
        size = 1 if self.need < 0 and not self.head else 1 << 18
        try:
            data, ancillary, _, _ = self.sock.recvmsg(size, _ANCILLARY)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.transport.close()
            return
        self.data_received(data, receive_time(ancillary))

    def data_received(self, data: bytes, stamp: float = 0.0) -> None:
        # NOTE: a body's pieces are only counted until it is whole: a long prompt arrives in
        # hundreds of reads, and joining them each time would make its arrival stamps late
        while data:
            if self.need < 0:  # in the head
                if not self.head:
                    self.first = stamp or time.monotonic()
                self.head += data
                end = self.head.find(b"\r\n\r\n")
                if end < 0:
                    return
                data, self.head = self.head[end + 4:], self.head[:end]
                m = _LENGTH.search(self.head)
                self.need, self.parts, self.have = int(m.group(1)) if m else 0, [], 0
            take = data[:self.need - self.have]
            self.parts.append(take)
            self.have += len(take)
            data = data[len(take):]
            if self.have == self.need:
                self._answer(self.head, b"".join(self.parts), self.first)
                self.head, self.need = b"", -1

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


async def serve(host: str, port: int, ttft_ms: float, itl_ms: float,
                kernel_stamps: bool) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Ruler(ttft_ms / 1000, itl_ms / 1000, kernel_stamps), host, port, backlog=4096)
    if kernel_stamps:  # NOTE: accepted sockets inherit it: first packets are stamped on arrival
        for listener in server.sockets:
            listener.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
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
    ap.add_argument("--kernel-stamps", action="store_true",
                    help="arrival from the kernel's receive stamp, for long bodies that this "
                         "loop reads late")
    a = ap.parse_args()
    asyncio.run(serve(a.host, a.port, a.ttft_ms, a.itl_ms, a.kernel_stamps))


if __name__ == "__main__":
    main()
