"""Timing helper shared by the benchmark scripts."""

import time


def best_of(fn, repeats: int = 3, warmup: bool = True) -> float:
    """Fastest of `repeats` timed calls of fn() in seconds (after one untimed call if `warmup`)."""
    if warmup:
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)
