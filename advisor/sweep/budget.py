"""The sweep's time budget: whether its second pass may start one more run. Before each,
the time spent, the run's span, the median overrun of earlier runs and (for a placement
not running) the longest start must stay within the limit; once one does not fit, none
starts after it, and the evidence says the budget ended the search (`note`)."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass
class TimeBudget:
    """`limit_s` seconds from now (None: no limit), on `clock`."""

    limit_s: float | None
    clock: Callable[[], float] = time.monotonic
    began: float = field(init=False)
    extras: list[float] = field(default_factory=list)  # each run's seconds beyond its span
    start_s: float = 0.0  # the longest a placement took to start
    spent: bool = False  # a second-pass run did not fit: none starts any more

    def __post_init__(self) -> None:
        self.began = self.clock()

    @property
    def extra_s(self) -> float:
        """What a run takes beyond its requests' span: the median of those measured."""
        return statistics.median(self.extras) if self.extras else 0.0

    def fits(self, span_s: float, live: bool) -> bool:
        """Whether a run sending its requests over `span_s` seconds would end within the
        limit (`live`: its placement is running; else a start comes first)."""
        if self.limit_s is not None and not self.spent:
            need = span_s + self.extra_s + (0.0 if live else self.start_s)
            self.spent = self.clock() - self.began + need > self.limit_s
        return not self.spent

    @contextlib.contextmanager
    def timing(self, span_s: float | None = None) -> Iterator[None]:
        """Time the block: a run over `span_s` seconds of requests, or (None) a start."""
        began = self.clock()
        yield
        took = self.clock() - began
        if span_s is None:
            self.start_s = max(self.start_s, took)
        else:
            self.extras.append(took - span_s)

    def note(self) -> str | None:
        """What the evidence says where the budget ended the search; None where it did not."""
        if not self.spent:
            return None
        return (f"the sweep's time budget ({self.limit_s:g} s, --time-budget; 0 for none) "
                "ran out before its search was done")
