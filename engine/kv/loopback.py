"""Connectors measured on this host: a side channel over a random shared cache, pulled locally.

Used by `benchmarks/transfer_bench.py` and `advisor probe` so both time the
same code the servers run.
"""

from __future__ import annotations

import time

import torch

from engine.core.kv_payload import KVLayout
from engine.kv import connectors
from engine.kv.source import KVSource
from engine.model.kv_cache import KVCache

REQUEST = "probe"


def shared_source(layout: KVLayout, num_tokens: int, block_size: int = 16) -> KVSource:
    """A KVSource over a random shared-memory cache that holds one request of num_tokens.
    Close it with `source.close(); source.cache.close()`."""
    blocks = -(-num_tokens // block_size)
    cache = KVCache(layout.num_layers, blocks, block_size, layout.num_kv_heads, layout.head_dim,
                    getattr(torch, layout.dtype), torch.device("cpu"), shared=True)
    cache.data.normal_()
    held = (list(range(blocks)), [1] * num_tokens)
    return KVSource(lambda rid: held, lambda rid: None, cache, layout)


def pull_seconds(source: KVSource, mode: str, repeats: int = 3) -> float:
    """Best of `repeats` timed pulls over `mode` after one warmup (pools and mappings warm)."""
    params = source.transfer_params(REQUEST, [])
    best = float("inf")
    for i in range(repeats + 1):
        t = time.perf_counter()
        connectors.get(mode).pull(params, source.layout).close()
        if i:
            best = min(best, time.perf_counter() - t)
    return best
