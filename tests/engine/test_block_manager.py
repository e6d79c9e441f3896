"""Block accounting on plain Python: allocation, sharing, hash checks, LRU eviction."""

import subprocess
import sys

import engine.core.block_manager as bm_mod
from engine.core.block_manager import BlockManager
from engine.core.sequence import Request, SamplingParams


def req(rid, tokens):
    return Request(rid, list(tokens), SamplingParams())


def computed(bm, r):
    """Admit r like the scheduler does: share cached blocks, allocate the rest, compute all."""
    hits = bm.get_computed_blocks(r.all_token_ids)
    r.num_computed_tokens = len(hits) * bm.block_size
    assert bm.allocate(r, r.num_tokens - r.num_computed_tokens, hits)
    r.num_computed_tokens = r.num_tokens
    bm.cache_full_blocks(r)
    return hits


def test_scheduler_and_block_manager_import_no_torch():
    code = ("import sys, engine.core.scheduler, engine.core.block_manager; "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_allocation_is_all_or_nothing():
    bm = BlockManager(num_blocks=4, block_size=4)
    a = req("a", range(10))
    assert bm.allocate(a, 10)  # 3 blocks
    b = req("b", range(8))
    assert not bm.allocate(b, 8)
    assert b.block_ids == [] and bm.num_free_blocks == 1
    bm.free(a)
    assert bm.num_free_blocks == 4


def test_prefix_hits_share_blocks_and_leave_one_token():
    bm = BlockManager(num_blocks=10, block_size=4)
    a = req("a", range(12))
    computed(bm, a)
    assert bm.num_cached_blocks == 3
    b = req("b", [*list(range(8)), 99, 98])
    assert computed(bm, b) == a.block_ids[:2]
    assert bm.blocks[a.block_ids[0]].ref_count == 2
    same = req("c", range(12))
    assert len(bm.get_computed_blocks(same.all_token_ids)) == 2  # 12 tokens: last block recomputed
    for r in (a, b):
        bm.free(r)
    assert bm.num_free_blocks == 10 and bm.num_cached_blocks == 3  # b's partial block is not cached


def test_hash_collision_never_returns_wrong_blocks(monkeypatch):
    monkeypatch.setattr(bm_mod, "chain_hash", lambda prev, toks: 42)
    bm = BlockManager(num_blocks=6, block_size=4)
    computed(bm, req("a", [1, 2, 3, 4, 5]))
    assert bm.get_computed_blocks([9, 9, 9, 9, 5]) == []  # same hash, other tokens
    assert len(bm.get_computed_blocks([1, 2, 3, 4, 5])) == 1


def test_eviction_takes_least_recently_freed_and_tail_first():
    bm = BlockManager(num_blocks=4, block_size=2)
    a, b = req("a", [1, 2, 3, 4]), req("b", [5, 6, 7, 8])
    computed(bm, a)
    computed(bm, b)
    a_head, a_tail = a.block_ids
    bm.free(a)  # a's tail block is queued before its head
    bm.free(b)
    c = req("c", [0] * 2)
    assert bm.allocate(c, 2)
    assert c.block_ids == [a_tail]
    assert bm.get_computed_blocks([1, 2, 3, 4, 0]) == [a_head]  # a's head survives
    assert len(bm.get_computed_blocks([5, 6, 7, 8, 0])) == 2  # b untouched
    assert bm.num_cached_blocks == 3
