"""What a front remembers per conversation, bounded in time and in bytes: clients choose
conversation IDs (and how many), so nothing kept for them may grow with their number."""

from __future__ import annotations

import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


# what an entry holds besides its key and value, in memory: its slot in the ordered dict
# (index, entry and link, with the table's slack) and the (expiry, cost, value) tuple with
# its float and int; measured with tracemalloc at ~210 bytes, counted with room to spare
ENTRY_BYTES = 280


class Recent(Generic[V]):
    """key -> value, the least recently put first out: an entry lives `ttl_s` seconds from
    its last put, and entries cost `cost(key, value)` bytes (the memory of what is kept:
    sys.getsizeof of the objects an entry alone holds) plus ENTRY_BYTES, of which
    `max_bytes` in all."""

    def __init__(self, ttl_s: float, max_bytes: int,
                 cost: Callable[[str, V], int] = lambda key, value: sys.getsizeof(key),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s, self.max_bytes, self._cost, self._clock = ttl_s, max_bytes, cost, clock
        self._items: OrderedDict[str, tuple[float, int, V]] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def get(self, key: str) -> V | None:
        """The value of `key` while it lives, else None."""
        self._expire()
        item = self._items.get(key)
        return None if item is None else item[2]

    def put(self, key: str, value: V) -> None:
        """Remember `value` for `key` from now (the most recent); a value costing more than
        `max_bytes` alone is not kept."""
        self.pop(key)
        cost = self._cost(key, value) + ENTRY_BYTES
        if cost > self.max_bytes:
            return
        self._items[key] = (self._clock() + self.ttl_s, cost, value)
        self.bytes += cost
        while self.bytes > self.max_bytes:
            self._drop_oldest()
        self._expire()

    def pop(self, key: str) -> V | None:
        """Forget `key`; its value while it lived, else None."""
        item = self._items.pop(key, None)
        if item is None:
            return None
        self.bytes -= item[1]
        return item[2] if item[0] > self._clock() else None

    def _expire(self) -> None:
        # NOTE: every entry lives the same ttl_s from its last put, and a put moves it
        # last, so the first entry is always the next to expire
        now = self._clock()
        while self._items and next(iter(self._items.values()))[0] <= now:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        _, (_, cost, _) = self._items.popitem(last=False)
        self.bytes -= cost
