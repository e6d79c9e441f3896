"""The shm connector: the decoder reads held blocks straight out of the prefiller's cache.

A prefiller started for shm keeps its KV cache in named shared memory; the header
names the segment and the blocks, and the decoder maps the segment (once, kept
LRU) and gathers the blocks into a pooled buffer: the transfer's one copy.
"""

from __future__ import annotations

import math
import socket
import threading
from collections import OrderedDict
from multiprocessing import resource_tracker, shared_memory
from typing import Any

import torch

from engine.core import deployment
from engine.core.config import DTYPE_BYTES
from engine.kv import frame
from engine.kv.connector import POOL, KVConnector
from engine.model.kv_cache import LOCAL_SEGMENTS, KVCache, gather_blocks

MAX_MAPPED_CACHES = 16
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
        # NOTE: the prefill side owns (and unlinks) the segment: this process's resource
        # tracker must not unlink it too when it exits
        if name not in LOCAL_SEGMENTS:
            resource_tracker.unregister(f"/{seg.name}", "shared_memory")
        count = math.prod(cache_shape)
        if count * DTYPE_BYTES[dtype] > seg.size:
            seg.close()
            raise frame.FrameError("shared cache smaller than its header says")
        data = torch.frombuffer(seg.buf, dtype=getattr(torch, dtype), count=count).view(cache_shape)
        _mapped[name] = (seg, data)
        if len(_mapped) > MAX_MAPPED_CACHES:
            _mapped.popitem(last=False)  # unmapped when its last tensor view goes
        return data


class ShmConnector(KVConnector):
    name = "shm"

    def describe(self, cache: KVCache, block_ids: list[int]) -> dict[str, Any]:
        if cache.shm_name is None:
            raise frame.FrameError("this prefill instance's KV cache is not in shared memory "
                                   "(start it with --connector shm)")
        return {"shm_name": cache.shm_name, "block_ids": block_ids,
                "cache_shape": list(cache.data.shape)}

    def receive(self, sock: socket.socket, header: dict[str, Any], shape: tuple[int, ...],
                dtype: str,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
        name = header.get("shm_name")
        if not isinstance(name, str):
            raise frame.FrameError("shm header lacks the shared cache's name")
        secret = deployment.current()
        if secret is not None and not name.startswith(deployment.segment_prefix(secret)):
            raise frame.FrameError("the shared cache named is not one of this deployment's")
        ids, cache_shape = frame.check_block_header(header, shape)
        data = _map_cache(name, cache_shape, dtype)
        per_token = shape[0] * shape[1] * shape[3] * shape[4] * DTYPE_BYTES[dtype]
        buf = POOL.take(len(ids) * cache_shape[3] * per_token)
        return gather_blocks(data, ids, shape[2], buf.view(getattr(torch, dtype))), buf


CONNECTOR = ShmConnector
