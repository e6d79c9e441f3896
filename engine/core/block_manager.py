"""Paged KV block accounting: block tables, reference counts, prefix caching. No torch."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from engine.core.sequence import Request


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    block_hash: int | None = None
    token_ids: tuple[int, ...] | None = None  # stored on caching, compared on every hit


def chain_hash(prev_hash: int | None, token_ids: tuple[int, ...]) -> int:
    """Hash of a full block given the hash of the block before it."""
    return hash((prev_hash, token_ids))


class BlockManager:
    """Owns the pool of KV blocks.

    A block is in exactly one of two states: referenced by >= 1 request
    (ref_count > 0), or in the free queue. Free blocks keep their hash while
    they sit in the queue, so a later request can revive them; allocation takes
    the least-recently freed block first and forgets its hash then.
    """

    def __init__(self, num_blocks: int, block_size: int,
                 enable_prefix_caching: bool = True) -> None:
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_queue: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.cached: dict[int, int] = {}  # block hash -> block id
        self._hashes: dict[str, list[int]] = {}  # request id -> hashes of its cached full blocks

    # ---- queries -------------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    @property
    def num_cached_blocks(self) -> int:
        return len(self.cached)

    @property
    def usage(self) -> float:
        """Fraction of blocks held by requests (cached-but-free blocks count as free)."""
        return 1.0 - self.num_free_blocks / self.num_blocks

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def get_computed_blocks(self, token_ids: list[int]) -> list[int]:
        """Ids of cached blocks that hold a prefix of `token_ids`.

        At least one token is always left uncomputed, so the model runs on it and
        yields logits for the next sample.
        """
        if not self.enable_prefix_caching:
            return []
        hits: list[int] = []
        prev: int | None = None
        bs = self.block_size
        for i in range((len(token_ids) - 1) // bs):
            toks = tuple(token_ids[i * bs:(i + 1) * bs])
            h = chain_hash(prev, toks)
            block_id = self.cached.get(h)
            # NOTE: a hash hit is trusted only when the stored tokens match too
            if block_id is None or self.blocks[block_id].token_ids != toks:
                break
            hits.append(block_id)
            prev = h
        return hits

    # ---- mutations -----------------------------------------------------------------------
    def allocate(self, req: Request, num_new_tokens: int,
                 computed_blocks: Sequence[int] = ()) -> bool:
        """Give `req` blocks for `num_computed_tokens + num_new_tokens` tokens.

        `computed_blocks` (from get_computed_blocks, only for a request holding no
        blocks yet) are shared rather than allocated. Returns False, changing
        nothing, when the pool is short.
        """
        reviving = sum(1 for b in computed_blocks if self.blocks[b].ref_count == 0)
        have = len(req.block_ids) + len(computed_blocks)
        need = self.blocks_needed(req.num_computed_tokens + num_new_tokens) - have
        if max(need, 0) > self.num_free_blocks - reviving:
            return False
        for b in computed_blocks:
            self._touch(b)
        req.block_ids.extend(computed_blocks)
        for _ in range(need):
            req.block_ids.append(self._pop_free())
        return True

    def free(self, req: Request) -> None:
        """Drop `req`'s references; tail blocks go to the free queue first, so they are
        evicted first."""
        for b in reversed(req.block_ids):
            block = self.blocks[b]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_queue[b] = None
        req.block_ids = []
        self._hashes.pop(req.request_id, None)

    def cache_full_blocks(self, req: Request) -> None:
        """Register `req`'s blocks that are full of computed tokens in the prefix cache."""
        if not self.enable_prefix_caching:
            return
        hashes = self._hashes.setdefault(req.request_id, [])
        bs = self.block_size
        tokens = req.all_token_ids
        for i in range(len(hashes), req.num_computed_tokens // bs):
            toks = tuple(tokens[i * bs : (i + 1) * bs])
            h = chain_hash(hashes[-1] if hashes else None, toks)
            hashes.append(h)
            block = self.blocks[req.block_ids[i]]
            if block.block_hash is None and h not in self.cached:
                block.block_hash, block.token_ids = h, toks
                self.cached[h] = block.block_id

    # ---- internals -----------------------------------------------------------------------
    def _touch(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            del self.free_queue[block_id]
        block.ref_count += 1

    def _pop_free(self) -> int:
        block_id, _ = self.free_queue.popitem(last=False)
        block = self.blocks[block_id]
        if block.block_hash is not None:
            del self.cached[block.block_hash]
            block.block_hash = block.token_ids = None
        block.ref_count = 1
        return block_id
