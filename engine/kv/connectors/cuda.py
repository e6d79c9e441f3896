"""The cuda connector: a decoder reads held blocks straight out of the prefill GPU's cache.

The prefill side describes its cache tensor once as a CUDA IPC handle (plain
JSON: integers and hex strings, never pickle). A decoder opens it (cached per
handle), gathers the request's blocks on the source GPU, and moves them to its
own device: peer-to-peer when `torch.cuda.can_device_access_peer` says so,
otherwise staged through pinned host memory. Both processes must see both GPUs
(the launcher leaves CUDA_VISIBLE_DEVICES unrestricted for this connector).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.multiprocessing.reductions import rebuild_cuda_tensor, reduce_tensor

from engine.kv import frame
from engine.kv.buffers import BufferPool
from engine.kv.connector import KVConnector
from engine.model.kv_cache import KVCache, gather_blocks

# Caches shared by this process, by handle: CUDA cannot open its own IPC handle.
LOCAL: dict[str, torch.Tensor] = {}
_opened: dict[str, torch.Tensor] = {}
_lock = threading.Lock()
_staging: list[BufferPool] = []  # the one pinned pool, made on first use
_HEX = ("handle", "ref_counter_handle", "event_handle")


def describe(args: tuple[Any, ...]) -> dict[str, Any]:
    """JSON-safe form of `reduce_tensor`'s rebuild arguments for a CUDA tensor."""
    (_cls, size, stride, offset, _storage_cls, dtype, device, handle, size_bytes, offset_bytes,
     _grad, rc_handle, rc_offset, ev_handle, ev_sync) = args
    desc = {"size": list(size), "stride": list(stride), "offset": offset,
            "dtype": str(dtype).removeprefix("torch."), "device": device,
            "handle": handle, "size_bytes": size_bytes, "offset_bytes": offset_bytes,
            "ref_counter_handle": rc_handle, "ref_counter_offset": rc_offset,
            "event_handle": ev_handle, "event_sync_required": ev_sync}
    for k in _HEX:
        desc[k] = desc[k].hex() if isinstance(desc[k], bytes) else desc[k]
    return desc


def rebuild_args(desc: dict[str, Any]) -> tuple[Any, ...]:
    """The inverse of describe(): arguments for `rebuild_cuda_tensor`."""
    raw = {k: bytes.fromhex(desc[k]) if isinstance(desc[k], str) else desc[k] for k in _HEX}
    return (torch.Tensor, torch.Size(desc["size"]), tuple(desc["stride"]), desc["offset"],
            torch.storage.TypedStorage, getattr(torch, desc["dtype"]), desc["device"],
            raw["handle"], desc["size_bytes"], desc["offset_bytes"], False,
            raw["ref_counter_handle"], desc["ref_counter_offset"], raw["event_handle"],
            desc["event_sync_required"])


def share_cache(data: torch.Tensor) -> dict[str, Any]:
    """Describe a CUDA cache tensor for other processes (call once; the cache must outlive it)."""
    _rebuild, args = reduce_tensor(data)
    desc = describe(args)
    LOCAL[desc["handle"]] = data
    return desc


def open_cache(desc: dict[str, Any]) -> torch.Tensor:
    """The tensor behind a description: this process's own, or opened over CUDA IPC (cached)."""
    key = desc["handle"]
    with _lock:
        if key in LOCAL:
            return LOCAL[key]
        if key not in _opened:
            _opened[key] = rebuild_cuda_tensor(*rebuild_args(desc))
        return _opened[key]


def route(src: torch.device, dst: torch.device,
          can_peer: Callable[[int, int], bool] | None = None) -> str:
    """How bytes get from `src` to `dst`: "same-device", "peer" or "staged" (through host)."""
    if src == dst:
        return "same-device"
    if src.type == dst.type == "cuda":
        can_peer = can_peer or torch.cuda.can_device_access_peer
        if can_peer(dst.index, src.index):
            return "peer"
    return "staged"


def move(kv: torch.Tensor, dst: torch.device, how: str,
         pool: BufferPool | None = None) -> torch.Tensor:
    """Copy a freshly gathered kv to `dst` along `how`.

    The staging buffer (pinned host memory) goes back to the pool once the copy
    is done; the result never aliases it. Synchronizes, so a transfer's end time
    is when the bytes are really there.
    """
    if how == "same-device":
        return kv
    if how == "peer":
        out = kv.to(dst)
    else:
        pool = pool or _pinned_pool()
        buf = pool.take(kv.numel() * kv.element_size())
        host = buf[:kv.numel() * kv.element_size()].view(kv.dtype).view(kv.shape)
        host.copy_(kv)
        out = host.to(dst, copy=True)
        pool.give(buf)
    if dst.type == "cuda":
        torch.cuda.synchronize(dst)
    return out


def _pinned_pool() -> BufferPool:
    with _lock:
        if not _staging:
            _staging.append(BufferPool(max_free_bytes=1 << 30,
                                       pin_memory=torch.cuda.is_available()))
        return _staging[0]


class CudaConnector(KVConnector):
    name = "cuda"

    def __init__(self) -> None:
        self._shared: dict[str, Any] | None = None  # this prefiller's cache, described once
        self._lock = threading.Lock()

    def describe(self, cache: KVCache, block_ids: list[int]) -> dict[str, Any]:
        if cache.data.device.type != "cuda":
            raise frame.FrameError("this prefill instance's KV cache is not on a GPU")
        with self._lock:
            if self._shared is None:
                self._shared = share_cache(cache.data)
        return {"cuda_cache": self._shared, "block_ids": block_ids,
                "cache_shape": list(cache.data.shape)}

    def receive(self, sock: socket.socket, header: dict[str, Any], shape: tuple[int, ...],
                dtype: str,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
        ids, cache_shape = frame.check_block_header(header, shape)
        data = open_cache(header.get("cuda_cache") or {})
        if tuple(data.shape) != cache_shape or str(data.dtype) != f"torch.{dtype}":
            raise frame.FrameError("the CUDA cache does not match its header")
        kv = gather_blocks(data, ids, shape[2])  # on the prefill GPU
        return move(kv, device, route(kv.device, device)), None


CONNECTOR = CudaConnector
