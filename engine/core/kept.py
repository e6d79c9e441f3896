"""A decoder's finished turns, kept for the next turn of their conversation (bidirectional
KV transfer): the prefiller of turn k+1 pulls the blocks of turn k's prompt and reply from
here and computes only what is new.

Kept KV is the first thing to go: under a lease (`ttl_s`, vLLM's 480 s by default), within
a budget of blocks (least recently used evicted first), and evicted whenever running or
waiting requests need the blocks (`make_room`). Keys are `conv:<conversation id>`, in the
same id space as the side channel's pulls. Engine thread, except `lend`/`reading` (any).
"""

from __future__ import annotations

from collections.abc import Callable

from engine.core.leases import KVLeases
from engine.core.sequence import Request

PREFIX = "conv:"


def key(conversation_id: str) -> str:
    return PREFIX + conversation_id


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading token IDs `a` and `b` share: what of one turn's KV the next turn's
    prompt can reuse (compared token by token, never assumed)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class KeptConversations:
    def __init__(self, ttl_s: float, max_blocks: int, free: Callable[[Request], None]) -> None:
        self.leases = KVLeases(ttl_s, free)
        self.max_blocks, self._free = max_blocks, free
        self.evicted_total = 0

    def keep(self, req: Request, conversation_id: str) -> bool:
        """Hold finished `req`'s blocks as its conversation's latest turn (the one before is
        released). False, freeing them, when they alone exceed the budget."""
        k = key(conversation_id)
        # NOTE: a previous turn being read (pulled) right now cannot be released; holding
        # the new one over it would leak its blocks, so that one stays and this one goes
        if (self.leases.get(k) is not None and not self.leases.release(k)) \
                or len(req.block_ids) > self.max_blocks:
            self._free(req)
            return False
        self.leases.hold(req, k)
        while self.leases.num_blocks() > self.max_blocks and self.evict_one():
            pass
        return True

    def evict_one(self) -> bool:
        """Release the least recently used conversation. False when none can go."""
        oldest = self.leases.oldest()
        if oldest is None or not self.leases.release(oldest):
            return False
        self.evicted_total += 1
        return True

    def make_room(self, free_blocks: Callable[[], int], wanted: int) -> None:
        """Evict until `free_blocks()` reaches `wanted` or nothing is kept: keeping a
        conversation never starves a request that runs now."""
        while free_blocks() < wanted and self.evict_one():
            pass
