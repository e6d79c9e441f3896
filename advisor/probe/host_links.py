"""Measured links for KV-sized payloads, through the engine's own connectors."""

from __future__ import annotations

import time

import torch

from engine.core.kv_payload import KVLayout
from engine.kv.buffers import BufferPool
from engine.kv.connectors import cuda
from engine.kv.loopback import pull_seconds, shared_source

# A 7B-class layout (28 layers x 4 KV heads x 128 x bf16 = 56 KiB/token), as KV moves in practice
PROBE_LAYOUT = KVLayout(num_layers=28, num_kv_heads=4, head_dim=128, dtype="bfloat16")


def host_links(nbytes: int = 64 << 20) -> dict[str, dict]:
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


def gpu_links(n: int, nbytes: int = 256 << 20) -> list[dict]:
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
