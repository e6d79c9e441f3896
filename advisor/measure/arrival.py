"""When response bytes reached this machine, by the kernel's clock rather than the client's.

The client stamps each streamed chunk when its event loop gets to it. A loop busy with
other streams, a core the hypervisor paused, or a vCPU waking from idle makes that stamp
late by up to milliseconds, and every stream in flight pays it at once. With
SO_TIMESTAMPNS the kernel stamps each packet as it is received; the client's sockets
read that stamp with the data, so its TTFT and ITL no longer include its own delays.
Where the kernel gives no stamp (not Linux), the time of the read is used instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from typing import Any

# Linux's value; Python's socket module does not name it.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_ANCILLARY = socket.CMSG_SPACE(16)  # one struct timespec
# a kernel stamp further than this from the read is not trusted (the wall clock stepped)
_MAX_AGE_S = 1.0


class StampedSocket(socket.socket):
    """A socket whose reads record `arrived`: when the kernel received the latest bytes
    read (time.monotonic() seconds), or when they were read where it cannot say.

    One read returns every byte queued so far, stamped with its newest packet: a reader
    that fell more than a packet behind gets the newer stamp for both, never later than
    the read. The kernel turns stamping on a moment after the first socket asks, so a
    process's first reads may carry none and are stamped when they happen.
    """

    arrived: float = 0.0

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        data, ancillary, _, _ = self.recvmsg(bufsize, _ANCILLARY, flags)
        self.arrived = receive_time(ancillary)
        return data

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        view = memoryview(buffer)
        n, ancillary, _, _ = self.recvmsg_into([view[: nbytes or len(view)]], _ANCILLARY, flags)
        self.arrived = receive_time(ancillary)
        return n


def receive_time(ancillary: list[tuple[int, int, bytes]]) -> float:
    """When the bytes a recvmsg returned with `ancillary` arrived (time.monotonic()
    seconds): the kernel's stamp among them, else now."""
    stamp = _kernel_stamp(ancillary)
    return stamp if stamp is not None else time.monotonic()


def _kernel_stamp(ancillary: list[tuple[int, int, bytes]]) -> float | None:
    """The SO_TIMESTAMPNS stamp among a recvmsg's ancillary data, in time.monotonic()
    seconds; None where there is none, or where it is not in the last second (the wall
    clock it is taken on stepped since)."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack("qq", data[:16])
            now, offset = _clocks()
            stamp = sec + nsec / 1e9 - offset
            return stamp if now - _MAX_AGE_S <= stamp <= now else None
    return None


def _clocks() -> tuple[float, float]:
    """(time.monotonic(), time.time() - time.monotonic()): the offset from the tightest
    of three bracketed reads: the two clocks cannot be read at once, and an interrupt
    between two reads (up to ~0.2 ms on a VM waking from idle) widens only its own bracket.
    """
    best = (float("inf"), 0.0, 0.0)
    for _ in range(3):
        before = time.monotonic()
        wall = time.time()
        after = time.monotonic()
        if after - before < best[0]:
            best = (after - before, after, wall - (before + after) / 2)
    return best[1], best[2]


class StampedSockets:
    """The socket factory for aiohttp's connector (`TCPConnector(socket_factory=...)`),
    remembering each socket it made so a response's can be found by its file number."""

    def __init__(self) -> None:
        self._by_fd: dict[int, StampedSocket] = {}

    def __call__(self, addr_info: tuple[Any, ...]) -> socket.socket:
        family, type_, proto, _, _ = addr_info
        sock = StampedSocket(family, type_, proto)
        with contextlib.suppress(OSError):  # not Linux: reads are stamped when they happen
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        # NOTE: a closed socket's number is reused by the next one made, which replaces it
        self._by_fd[sock.fileno()] = sock
        return sock

    def of(self, transport: asyncio.BaseTransport | None) -> StampedSocket | None:
        """The socket under an open connection's transport, if this factory made it."""
        sock = transport.get_extra_info("socket") if transport is not None else None
        return self._by_fd.get(sock.fileno()) if sock is not None else None
