"""The side channel's wire format: length-prefixed, checksummed JSON headers, then raw bytes.

frame := MAGIC (4) | VERSION (u16) | header length (u32) | header JSON | crc32(header) (u32)
A KV header describes the bytes that follow (tcp) or the shared-memory segment
that holds them (shm). Never pickle: a peer can only send data, not code.
"""

from __future__ import annotations

import json
import socket
import struct
import time
import zlib
from typing import Any

from engine.core.config import DTYPE_BYTES

MAGIC = b"AKV1"
VERSION = 1
MAX_HEADER_BYTES = 16 << 20  # token ids of a long prompt fit easily
MAX_PAYLOAD_BYTES = 64 << 30
MAX_BLOCK_SIZE = 1024  # tokens per block of a remote cache (vLLM's largest is 256)
_PREFIX = struct.Struct("!4sHI")
_CRC = struct.Struct("!I")


class FrameError(ValueError):
    """A frame that is malformed, corrupted or inconsistent: nothing from it is used."""


class ForeignKV(FrameError):
    """The KV offered was computed for other tokens than the request's prompt: the
    request's kv_transfer_params are wrong (a client's mistake, not a transfer failure)."""


def encode(header: dict[str, Any]) -> bytes:
    body = json.dumps(header, separators=(",", ":")).encode()
    return _PREFIX.pack(MAGIC, VERSION, len(body)) + body + _CRC.pack(zlib.crc32(body))


def recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
    """Exactly n bytes, by `deadline` (time.monotonic()) where one is given. Memory grows
    with what arrives, never with what a peer announces: a length prefix alone must not
    make us allocate it."""
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise FrameError(f"too slow: {len(buf)} of {n} bytes by the deadline")
            sock.settimeout(left)
        try:
            piece = sock.recv(min(n - len(buf), 1 << 20))
        except TimeoutError:
            if deadline is None:
                raise
            raise FrameError(f"too slow: {len(buf)} of {n} bytes by the deadline") from None
        if not piece:
            raise FrameError(f"connection closed after {len(buf)} of {n} bytes")
        buf += piece
    return bytes(buf)


def recv_into_exact(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:], min(len(view) - got, 8 << 20))
        if n == 0:
            raise FrameError(f"connection closed after {got} of {len(view)} bytes")
        got += n


IOV_MAX = 1024  # buffers per sendmsg call (Linux's limit)


def send_views(sock: socket.socket, views: list[memoryview]) -> None:
    """sendall() for a list of byte buffers, by scatter-gather sendmsg (no joining copy)."""
    i = 0
    while i < len(views):
        sent = sock.sendmsg(views[i:i + IOV_MAX])
        while i < len(views) and sent >= len(views[i]):  # drop what went out in full
            sent -= len(views[i])
            i += 1
        if sent:  # a partial buffer: keep its tail
            views[i] = views[i][sent:]


def read(sock: socket.socket, max_bytes: int = MAX_HEADER_BYTES,
         deadline: float | None = None) -> dict[str, Any]:
    """Read one header frame of at most `max_bytes`, whole by `deadline` (time.monotonic())
    where one is given; raise FrameError on any inconsistency."""
    magic, version, length = _PREFIX.unpack(recv_exact(sock, _PREFIX.size, deadline))
    if magic != MAGIC:  # NOTE: never echo what answered: the pull must not scan ports
        raise FrameError("the peer is not a KV side channel (bad magic)")
    if version != VERSION:
        raise FrameError(f"unsupported frame version {version}")
    if length > max_bytes:
        raise FrameError(f"header of {length} bytes exceeds the limit")
    body = recv_exact(sock, length, deadline)
    (crc,) = _CRC.unpack(recv_exact(sock, _CRC.size, deadline))
    if zlib.crc32(body) != crc:
        raise FrameError("header checksum mismatch")
    try:
        header = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FrameError(f"header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise FrameError("header is not an object")
    return header


def check_kv_header(h: dict[str, Any]) -> tuple[tuple[int, ...], str, int]:
    """Validate a KV header's dtype, shape and byte count; returns (shape, dtype, nbytes).

    The KV holds the tokens from the header's `start` (default 0) to the end of its
    `token_ids`."""
    dtype, shape, nbytes = h.get("dtype"), h.get("shape"), h.get("nbytes")
    if dtype not in DTYPE_BYTES:
        raise FrameError(f"unknown dtype {dtype!r}")
    if not (isinstance(shape, list) and len(shape) == 5
            and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
        raise FrameError(f"bad shape {shape!r}")
    expected = DTYPE_BYTES[dtype]
    for d in shape:
        expected *= d
    if nbytes != expected or not 0 <= nbytes <= MAX_PAYLOAD_BYTES:
        raise FrameError(f"byte count {nbytes!r} does not match shape {shape} of {dtype}")
    tokens, start = h.get("token_ids"), h.get("start", 0)
    if not (isinstance(start, int) and not isinstance(start, bool) and start >= 0):
        raise FrameError(f"bad start {start!r}")
    if not (isinstance(tokens, list) and len(tokens) == start + shape[2]
            and all(isinstance(t, int) for t in tokens)):
        raise FrameError("token_ids missing or not matching the shape")
    return tuple(shape), dtype, nbytes


def check_block_header(header: dict[str, Any], shape: tuple[int, ...]) -> tuple[list[int],
                       tuple[int, ...]]:
    """Validated (block ids, cache shape) of a header that names blocks of a remote cache
    [L, 2, blocks, block_size, kvh, hd] holding KV of `shape` [L, 2, T, kvh, hd]."""
    ids, cache_shape = header.get("block_ids"), header.get("cache_shape")
    if not (isinstance(cache_shape, list) and len(cache_shape) == 6
            and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in cache_shape)):
        raise FrameError("header lacks the remote cache's shape")
    blocks, bs = cache_shape[2], cache_shape[3]
    if bs > MAX_BLOCK_SIZE:  # NOTE: the buffer a pull takes is whole blocks of it
        raise FrameError(f"block size {bs} exceeds {MAX_BLOCK_SIZE}")
    if (tuple(cache_shape[:2]) != shape[:2] or tuple(cache_shape[4:]) != shape[3:]
            or not isinstance(ids, list) or len(ids) != -(-shape[2] // bs)
            or not all(isinstance(b, int) and 0 <= b < blocks for b in ids)):
        raise FrameError("header's block ids do not fit its cache")
    return ids, tuple(cache_shape)
