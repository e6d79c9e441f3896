"""Decode side of the KV side channel: pull a request's KV from a prefill instance."""

from __future__ import annotations

import math
import socket
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from multiprocessing import resource_tracker, shared_memory

import torch

from engine.connectors import cuda, frame
from engine.connectors.buffers import BufferPool
from engine.kv_cache import LOCAL_SEGMENTS, gather_blocks
from engine.kv_transfer import KVLayout, KVPayload

CONNECT_TIMEOUT_S = 5.0
REQUIRED = ("remote_engine_id", "remote_request_id", "remote_host", "remote_port")
MAX_MAPPED_CACHES = 16
POOL = BufferPool()  # receive buffers, shared by every pull in this process


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
    """A pulled payload; its buffer goes back to the pool once the engine has imported it."""

    def __init__(self, payload: KVPayload, record: TransferRecord, buffer: torch.Tensor):
        self.payload, self.record, self._buffer = payload, record, buffer

    def close(self, imported: bool = True) -> None:
        """Drop the payload. # NOTE: pass imported=False when the engine might still
        read it (an aborted request): the buffer is then left to the allocator
        rather than reused under a late import."""
        self.payload = None
        if self._buffer is not None and imported:
            POOL.give(self._buffer)
        self._buffer = None


def can_pull(params: dict | None) -> bool:
    """vLLM's rule: pull only when engine id, request id, host and port are all present."""
    return bool(params) and params.get("do_remote_prefill") is True and all(
        params.get(k) not in (None, "") for k in REQUIRED)


def _connect(params: dict) -> socket.socket:
    sock = socket.create_connection((params["remote_host"], int(params["remote_port"])),
                                    timeout=CONNECT_TIMEOUT_S)
    sock.settimeout(60.0)
    return sock


def pull(params: dict, mode: str, layout: KVLayout,
         device: torch.device = torch.device("cpu")) -> PulledKV:
    """Blocking pull over `mode` ("tcp", "shm" or "cuda") for an engine on `device`.

    Raises FrameError/OSError/ValueError on failure.
    """
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
        if mode == "tcp":
            buf = POOL.take(nbytes)
            frame.recv_into_exact(sock, memoryview(buf[:nbytes].numpy()))
            kv = buf[:nbytes].view(getattr(torch, dtype)).view(shape)
        elif mode == "shm":
            kv, buf = _gather_shared(header, shape, dtype)
        else:
            ids, cache_shape = _block_header(header, shape)
            data = cuda.open_cache(header.get("cuda_cache") or {})
            if tuple(data.shape) != cache_shape or str(data.dtype) != f"torch.{dtype}":
                raise frame.FrameError("the CUDA cache does not match its header")
            kv = gather_blocks(data, ids, shape[2])  # on the prefill GPU
            kv, buf = cuda.move(kv, device, cuda.route(kv.device, device)), None
    payload = KVPayload(rid, layout, header["token_ids"], kv, header.get("block_size", 0))
    return PulledKV(payload, TransferRecord(nbytes, start, time.monotonic(), mode), buf)


# ---- shm: read held blocks straight out of the prefill instance's mapped cache -------------------
_mapped: OrderedDict[str, tuple[shared_memory.SharedMemory, torch.Tensor]] = OrderedDict()
_mapped_lock = threading.Lock()


def _map_cache(name: str, cache_shape: tuple[int, ...], dtype: str) -> torch.Tensor:
    """The remote cache as data: [L, 2, blocks, bs, kvh, hd]; mappings are kept (LRU)."""
    with _mapped_lock:
        if name in _mapped:
            _mapped.move_to_end(name)
            seg, data = _mapped[name]
            if tuple(data.shape) == cache_shape:
                return data
            raise frame.FrameError(f"shared cache {name} changed shape")
        seg = shared_memory.SharedMemory(name=name)
        # NOTE: the prefill side owns (and unlinks) the segment; don't let this
        # process's resource tracker unlink it too when we exit.
        if name not in LOCAL_SEGMENTS:
            resource_tracker.unregister(seg._name, "shared_memory")  # noqa: SLF001
        count = math.prod(cache_shape)
        if count * frame.DTYPES[dtype] > seg.size:
            seg.close()
            raise frame.FrameError("shared cache smaller than its header says")
        data = torch.frombuffer(seg.buf, dtype=getattr(torch, dtype), count=count).view(cache_shape)
        _mapped[name] = (seg, data)
        if len(_mapped) > MAX_MAPPED_CACHES:
            _mapped.popitem(last=False)  # unmapped when its last tensor view goes
        return data


def _block_header(header: dict, shape: tuple[int, ...]) -> tuple[list[int], tuple[int, ...]]:
    """Validated (block ids, cache shape) of a header that names blocks of a remote cache."""
    ids, cache_shape = header.get("block_ids"), header.get("cache_shape")
    if not (isinstance(cache_shape, list) and len(cache_shape) == 6
            and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in cache_shape)):
        raise frame.FrameError("header lacks the remote cache's shape")
    blocks, bs = cache_shape[2], cache_shape[3]
    if (tuple(cache_shape[:2]) != shape[:2] or tuple(cache_shape[4:]) != shape[3:]
            or not isinstance(ids, list) or len(ids) != -(-shape[2] // bs)
            or not all(isinstance(b, int) and 0 <= b < blocks for b in ids)):
        raise frame.FrameError("header's block ids do not fit its cache")
    return ids, tuple(cache_shape)


def _gather_shared(header: dict, shape: tuple[int, ...], dtype: str):
    name = header.get("shm_name")
    if not isinstance(name, str):
        raise frame.FrameError("shm header lacks the shared cache's name")
    ids, cache_shape = _block_header(header, shape)
    bs = cache_shape[3]
    data = _map_cache(name, cache_shape, dtype)
    per_token = shape[0] * shape[1] * shape[3] * shape[4] * frame.DTYPES[dtype]
    buf = POOL.take(len(ids) * bs * per_token)
    return gather_blocks(data, ids, shape[2], buf.view(getattr(torch, dtype))), buf


def release(params: dict) -> None:
    """Tell the prefill side it may free the request's blocks (best effort)."""
    try:
        with _connect(params) as sock:
            sock.sendall(frame.encode({"op": "release", "request_id": params["remote_request_id"]}))
            frame.read(sock)
    except (OSError, frame.FrameError):
        pass  # the lease frees them anyway
