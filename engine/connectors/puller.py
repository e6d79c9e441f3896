"""Decode side of the KV side channel: pull a request's KV from a prefill instance."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from multiprocessing import resource_tracker, shared_memory

import torch

from engine.connectors import frame
from engine.connectors.source import LOCAL_SEGMENTS
from engine.kv_transfer import KVLayout, KVPayload

CONNECT_TIMEOUT_S = 5.0
REQUIRED = ("remote_engine_id", "remote_request_id", "remote_host", "remote_port")


@dataclass
class TransferRecord:
    """One pull: bytes moved and when (time.monotonic())."""

    nbytes: int
    start: float
    end: float
    connector: str

    @property
    def seconds(self) -> float:
        return self.end - self.start


class PulledKV:
    """A pulled payload plus what must happen once it has been imported."""

    def __init__(self, payload: KVPayload, record: TransferRecord,
                 segment: shared_memory.SharedMemory | None = None):
        self.payload, self.record, self._segment = payload, record, segment

    def close(self) -> None:
        """Drop the mapping of a shared-memory payload (after the import copied it)."""
        self.payload = None
        if self._segment is not None:
            try:
                self._segment.close()
            except BufferError:  # a view is still alive somewhere; GC releases it
                pass
            self._segment = None


def can_pull(params: dict | None) -> bool:
    """vLLM's rule: pull only when engine id, request id, host and port are all present."""
    return bool(params) and params.get("do_remote_prefill") is True and all(
        params.get(k) not in (None, "") for k in REQUIRED)


def _connect(params: dict) -> socket.socket:
    sock = socket.create_connection((params["remote_host"], int(params["remote_port"])),
                                    timeout=CONNECT_TIMEOUT_S)
    sock.settimeout(60.0)
    return sock


def pull(params: dict, mode: str, layout: KVLayout) -> PulledKV:
    """Blocking pull over `mode` ("tcp" or "shm"). Raises FrameError/OSError/ValueError on failure."""
    rid = params["remote_request_id"]
    start = time.monotonic()
    with _connect(params) as sock:
        sock.sendall(frame.encode({"op": "pull", "request_id": rid, "mode": mode}))
        header = frame.read(sock)
        if "error" in header:
            raise frame.FrameError(f"prefill side refused the pull: {header['error']}")
        shape, dtype, nbytes = frame.check_kv_header(header)
        if dtype != layout.dtype or (shape[0], shape[3], shape[4]) != (
                layout.num_layers, layout.num_kv_heads, layout.head_dim):
            raise frame.FrameError(f"KV of shape {shape} / {dtype} does not fit this engine")
        segment = None
        if mode == "tcp":
            kv = torch.empty(shape, dtype=getattr(torch, dtype))
            frame.recv_into_exact(sock, memoryview(kv.view(torch.uint8).numpy()).cast("B"))
        else:
            kv, segment = _map_segment(header, shape, dtype)
    payload = KVPayload(rid, layout, header["token_ids"], kv, header.get("block_size", 0))
    return PulledKV(payload, TransferRecord(nbytes, start, time.monotonic(), mode), segment)


def _map_segment(header: dict, shape, dtype: str):
    name, padded = header.get("shm_name"), header.get("padded_tokens")
    if not isinstance(name, str) or not isinstance(padded, int) or padded < shape[2]:
        raise frame.FrameError("shm header lacks a segment name or padded size")
    seg = shared_memory.SharedMemory(name=name)
    # NOTE: the prefill side owns (and unlinks) the segment; don't let this
    # process's resource tracker unlink it too when we exit.
    if seg.name not in LOCAL_SEGMENTS:
        resource_tracker.unregister(seg._name, "shared_memory")  # noqa: SLF001
    full = (shape[0], 2, padded, shape[3], shape[4])
    count = full[0] * 2 * padded * shape[3] * shape[4]
    if count * frame.DTYPES[dtype] > seg.size:
        seg.close()
        raise frame.FrameError("shm segment smaller than its header says")
    kv = torch.frombuffer(seg.buf, dtype=getattr(torch, dtype), count=count).view(full)
    return kv[:, :, :shape[2]], seg


def release(params: dict) -> None:
    """Tell the prefill side it may free the request's blocks (best effort)."""
    try:
        with _connect(params) as sock:
            sock.sendall(frame.encode({"op": "release", "request_id": params["remote_request_id"]}))
            frame.read(sock)
    except (OSError, frame.FrameError):
        pass  # the lease frees them anyway
