"""How much slower this host runs a pass over model-sized memory right after a core idles.
At a sweep's lowest rates an instance idles between requests and every request pays it,
where a calibration run back to back does not; `advisor probe` measures it, so that such
latencies can be told from the engine's own."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

IDLE_S = 1.0  # asleep before each pass of the idle side
REPEATS = 3
READ_BYTES = 128 << 20  # about a small model's weights: what a decode step streams
NOTABLE = 1.5  # a ratio from which low-rate latencies are worth reading with it in mind


@dataclass(frozen=True)
class Wakeup:
    """Median ms of one pass back to back, and of one pass after `idle_s` asleep."""

    idle_s: float
    busy_ms: float
    after_idle_ms: float

    @property
    def ratio(self) -> float:
        return self.after_idle_ms / self.busy_ms if self.busy_ms > 0 else float("nan")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio}

    def summary(self) -> str:
        return (f"a {READ_BYTES >> 20} MB read takes {self.busy_ms:.1f} ms back to back and "
                f"{self.after_idle_ms:.1f} ms after {self.idle_s:g} s idle ({self.ratio:.1f}x)")


def measure(work: Callable[[], object], idle_s: float = IDLE_S, repeats: int = REPEATS,
            sleep: Callable[[float], None] = time.sleep,
            clock: Callable[[], float] = time.perf_counter) -> Wakeup:
    """Time `work` back to back, then each time after `idle_s` asleep (medians, ms)."""

    def timed() -> float:
        start = clock()
        work()
        return (clock() - start) * 1000

    timed()  # first touch: page faults, allocation
    busy = [timed() for _ in range(repeats)]
    idle = []
    for _ in range(repeats):
        sleep(idle_s)
        idle.append(timed())
    return Wakeup(idle_s, statistics.median(busy), statistics.median(idle))


def host_wakeup(idle_s: float = IDLE_S, repeats: int = REPEATS) -> Wakeup:
    """This host's wake-up penalty for a READ_BYTES float32 sum on one thread, as the
    engine runs."""
    import torch  # here, so that importing this module stays torch-free

    x = torch.ones(READ_BYTES // 4, dtype=torch.float32)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return measure(x.sum, idle_s, repeats)
    finally:
        torch.set_num_threads(threads)


def probe_wakeup(idle_s: float = IDLE_S) -> dict[str, Any] | None:
    """host_wakeup as JSON; None when `idle_s` is 0 (not measured)."""
    return host_wakeup(idle_s).to_json() if idle_s > 0 else None
