"""Connectors measured on this host: a side channel over a random shared cache, pulled
locally, and the cuda connector's copies between GPUs. `benchmarks/transfer_bench.py` and
`advisor probe` time the same code the servers run.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from engine.core.kv_layout import KVLayout
from engine.kv import connectors
from engine.kv.buffers import BufferPool
from engine.kv.connectors import cuda
from engine.kv.source import KVSource
from engine.model.kv_cache import KVCache

REQUEST = "probe"
# A 7B-class layout (28 layers x 4 KV heads x 128 x bf16 = 56 KiB/token), as KV moves in practice
PROBE_LAYOUT = KVLayout(num_layers=28, num_kv_heads=4, head_dim=128, dtype="bfloat16")


def shared_source(layout: KVLayout, num_tokens: int, block_size: int = 16,
                  device: torch.device = torch.device("cpu")) -> KVSource:
    """A KVSource over a random cache that holds one request of num_tokens: in shared
    memory on the CPU, in the GPU's memory on one. Close it with `source.close();
    source.cache.close()`."""
    blocks = -(-num_tokens // block_size)
    cache = KVCache(layout.num_layers, blocks, block_size, layout.num_kv_heads, layout.head_dim,
                    getattr(torch, layout.dtype), device, shared=device.type == "cpu")
    cache.data.normal_()
    held = (list(range(blocks)), [1] * num_tokens)
    return KVSource(lambda rid: held, lambda rid: None, cache, layout)


def pull_seconds(source: KVSource, mode: str, repeats: int = 3,
                 device: torch.device = torch.device("cpu")) -> float:
    """Best of `repeats` timed pulls over `mode` onto `device` after one warmup (pools and
    mappings warm)."""
    params = source.transfer_params(REQUEST, [])
    best = float("inf")
    for i in range(repeats + 1):
        t = time.perf_counter()
        pulled = connectors.get(mode).pull(params, source.layout, device)
        _synchronize(device)
        pulled.close()
        if i:
            best = min(best, time.perf_counter() - t)
    return best


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def connector_against_copy(device: torch.device, nbytes: int = 256 << 20,
                           repeats: int = 3) -> dict[str, Any]:
    """The connector the servers use on `device` (cuda on a GPU, shm on the CPU) pulling one
    request's KV of about `nbytes`, against a raw torch copy of the same bytes on `device`:
    the connector's GB/s, the copy's, and their ratio."""
    mode = "cuda" if device.type == "cuda" else "shm"
    tokens = max(1, nbytes // PROBE_LAYOUT.bytes_per_token)
    moved = tokens * PROBE_LAYOUT.bytes_per_token
    source = shared_source(PROBE_LAYOUT, tokens, device=device)
    try:
        pulled = pull_seconds(source, mode, repeats, device)
    finally:
        source.close()
        source.cache.close()
    src = torch.empty(moved // 2, dtype=torch.bfloat16, device=device)  # [bytes / 2]
    dst = torch.empty_like(src)
    best = float("inf")
    for i in range(repeats + 1):
        t = time.perf_counter()
        dst.copy_(src)
        _synchronize(device)
        if i:
            best = min(best, time.perf_counter() - t)
    return {"connector": mode, "bytes": moved, "connector_gbps": moved / pulled / 1e9,
            "copy_gbps": moved / best / 1e9, "ratio": best / pulled}


def host_links(nbytes: int = 64 << 20) -> dict[str, dict[str, Any]]:
    """shm and tcp pull throughput on this host for a payload of about `nbytes`."""
    tokens = max(1, nbytes // PROBE_LAYOUT.bytes_per_token)
    moved = tokens * PROBE_LAYOUT.bytes_per_token
    source = shared_source(PROBE_LAYOUT, tokens)
    try:
        out = {}
        for mode in ("shm", "tcp"):
            s = pull_seconds(source, mode)
            out[mode] = {"gbps": moved / s / 1e9, "ms": s * 1000, "bytes": moved}
        return out
    finally:
        source.close()
        source.cache.close()


def copy_gbps(src: torch.device, dst: torch.device, how: str, nbytes: int,
              repeats: int = 3, pool: BufferPool | None = None) -> float:
    """GB/s of the cuda connector's copy from `src` to `dst` along `how` (peer / staged)."""
    kv = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=src)
    best = float("inf")
    for i in range(repeats + 1):
        t = time.perf_counter()
        cuda.move(kv, dst, how, pool)
        if i:
            best = min(best, time.perf_counter() - t)
    return nbytes / best / 1e9


def gpu_links(n: int, nbytes: int = 256 << 20) -> list[dict[str, Any]]:
    """Every ordered GPU pair: peer-to-peer copy (where torch allows it) and host-staged copy."""
    out = []
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            src, dst = torch.device("cuda", i), torch.device("cuda", j)
            row = {"src": i, "dst": j, "route": cuda.route(src, dst),
                   "staged_gbps": copy_gbps(src, dst, "staged", nbytes)}
            row["peer_gbps"] = (
                copy_gbps(src, dst, "peer", nbytes) if row["route"] == "peer" else None
            )
            out.append(row)
    return out
