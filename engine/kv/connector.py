"""The KV-connector seam: how a request's prompt KV moves from a prefiller to a decoder.

As vLLM splits it, the scheduler side says what is held and where (the lease table,
`engine.core.leases`, and the side channel's `kv_transfer_params`,
`engine.kv.source`); the worker side moves bytes: a `KVConnector`, one file per
transport under `engine.kv.connectors`. Every connector is a pull, like NIXL's: the
decoder connects to the prefiller's side channel, asks for a request by id and
transport, reads a header frame, and `receive`s the KV the header describes.
"""

from __future__ import annotations

import asyncio
import socket
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch

from engine.core import deployment
from engine.core.kv_layout import KVLayout
from engine.kv import frame
from engine.kv.buffers import BufferPool
from engine.model.kv_cache import KVCache
from engine.model.kv_payload import KVPayload

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 60.0
REQUIRED = ("remote_engine_id", "remote_request_id", "remote_host", "remote_port")
POOL = BufferPool()  # receive buffers, shared by every pull in this process


@dataclass
class TransferRecord:
    """One pull: bytes moved and when (time.monotonic()); `emulated` names an imposed link."""

    nbytes: int
    start: float
    end: float
    connector: str
    emulated: str | None = None

    @property
    def seconds(self) -> float:
        return self.end - self.start


class PulledKV:
    """A pulled payload; its buffer goes back to the pool once the engine has imported it."""

    def __init__(self, payload: KVPayload, record: TransferRecord,
                 buffer: torch.Tensor | None) -> None:
        self.payload: KVPayload | None = payload
        self.record, self._buffer = record, buffer

    def close(self, imported: bool = True) -> None:
        """Drop the payload. Pass imported=False when the engine might still read it (an
        aborted request): the buffer is then left to the allocator rather than reused
        under a late import."""
        self.payload = None
        if self._buffer is not None and imported:
            POOL.give(self._buffer)
        self._buffer = None


def can_pull(params: dict[str, Any] | None) -> bool:
    """vLLM's rule: pull only when engine id, request id, host and port are all present."""
    return params is not None and params.get("do_remote_prefill") is True and all(
        params.get(k) not in (None, "") for k in REQUIRED)


def check_params(params: dict[str, Any], allowed_hosts: tuple[str, ...]) -> None:
    """ValueError when pull-ready kv_transfer_params are malformed or name a side channel
    this decoder may not pull from (a decoder must not connect wherever it is told)."""
    host, port = params.get("remote_host"), params.get("remote_port")
    if not isinstance(host, str) or not isinstance(port, int) or isinstance(port, bool) \
            or not 0 < port < 65536:
        raise ValueError("remote_host must be a string and remote_port an integer in 1-65535")
    if not all(isinstance(params.get(k), str) for k in ("remote_request_id", "remote_engine_id")):
        raise ValueError("remote_request_id and remote_engine_id must be strings")
    if host not in allowed_hosts:
        raise ValueError(f"remote_host {host!r} is not one this decoder pulls from "
                         f"({', '.join(allowed_hosts)}; see --kv-pull-hosts)")


def connect(params: dict[str, Any]) -> socket.socket:
    """A blocking connection to the side channel that `params` (kv_transfer_params) name."""
    sock = socket.create_connection((params["remote_host"], int(params["remote_port"])),
                                    timeout=CONNECT_TIMEOUT_S)
    sock.settimeout(READ_TIMEOUT_S)
    return sock


def release(params: dict[str, Any]) -> None:
    """Tell the prefill side it may free the request's blocks (best effort)."""
    try:
        with connect(params) as sock:
            sock.sendall(frame.encode({"op": "release", "request_id": params["remote_request_id"],
                                       "token": params.get("remote_request_token"),
                                       **deployment.admission()}))
            frame.read(sock)
    except (OSError, frame.FrameError):
        pass  # the lease frees them anyway


class KVConnector(ABC):
    """One transport. The producer half runs on the prefiller's side-channel threads
    (`describe`, `send`); the consumer half in the decoder (`receive`, via `pull`)."""

    name: str  # the connector's name: a class's own, or (link emulation) the one it wraps

    # ---- producer side ---------------------------------------------------------------------------
    @abstractmethod
    def describe(self, cache: KVCache, block_ids: list[int]) -> dict[str, Any]:
        """Header fields beyond the KV's shape that tell a decoder where the held blocks are
        (none when the bytes follow the header). FrameError when this cache cannot be
        served this way."""

    def send(self, sock: socket.socket, cache: KVCache, block_ids: list[int],  # noqa: B027
             num_tokens: int) -> None:
        """After the header: write the KV bytes, for transports that carry them (an optional
        step: connectors whose decoder reads the blocks in place send nothing)."""

    # ---- consumer side ---------------------------------------------------------------------------
    @abstractmethod
    def receive(self, sock: socket.socket, header: dict[str, Any], shape: tuple[int, ...],
                dtype: str,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The KV a checked header describes, kv: [L, 2, T, kvh, hd] on `device`, and the
        pool buffer that holds it (None when it lives elsewhere)."""

    def pull(self, params: dict[str, Any], layout: KVLayout,
             device: torch.device = torch.device("cpu"),
             prompt: list[int] | None = None, have: int = 0) -> PulledKV:
        """Blocking pull of the request `params` name, for an engine with `layout` on `device`;
        with `prompt`, KV computed for other tokens is refused before anything is allocated.
        `have`: tokens this engine already holds, so only the KV after them (from a whole
        block of the source's, see KVPayload.start) need come. Raises
        FrameError/OSError/ValueError on failure."""
        rid = params["remote_request_id"]
        start = time.monotonic()
        with connect(params) as sock:
            sock.sendall(frame.encode({"op": "pull", "request_id": rid, "mode": self.name,
                                       "token": params.get("remote_request_token"),
                                       "from": have, **deployment.admission()}))
            header = frame.read(sock)
            if "error" in header:
                raise frame.FrameError(f"prefill side refused the pull: {header['error']}")
            shape, dtype, nbytes = frame.check_kv_header(header)
            if dtype != layout.dtype or (shape[0], shape[3], shape[4]) != (
                    layout.num_layers, layout.num_kv_heads, layout.head_dim):
                raise frame.FrameError(f"KV of shape {shape} / {dtype} does not fit this engine")
            if prompt is not None and header["token_ids"] != prompt:
                raise frame.ForeignKV("the KV offered was computed for other tokens than this "
                                      "request's prompt")
            if header.get("start", 0) > have:
                raise frame.FrameError("the source skipped KV this engine does not hold")
            kv, buf = self.receive(sock, header, shape, dtype, device)
        payload = KVPayload(rid, layout, header["token_ids"], kv, header.get("block_size", 0),
                            header.get("start", 0))
        return PulledKV(payload, TransferRecord(nbytes, start, time.monotonic(), self.name), buf)

    async def pull_async(self, params: dict[str, Any], layout: KVLayout, device: torch.device,
                         prompt: list[int] | None = None, have: int = 0) -> PulledKV:
        """`pull` on a worker thread, so the event loop keeps serving."""
        return await asyncio.to_thread(self.pull, params, layout, device, prompt, have)
