"""Whether this host's cores compute independently: one core's float32 GEMM rate alone and
while another core runs GEMMs too. Engines pinned to separate cores still share what the
cores share (SMT siblings' vector units, the last-level cache, the memory bandwidth), and
where they slow each other a P/D decoder steps slower while its prefiller prefills."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

M, K, N = 256, 1024, 1024  # a prefill-sized GEMM whose weight (4 MB) stays in cache
WINDOW_S = 0.3  # seconds of GEMMs per measurement
ROUNDS = 3  # alone / shared alternations (the host's speed drifts over seconds)
INDEPENDENT = 0.9  # from this ratio up, the cores count as computing independently

# numpy, not torch, in the contender: it imports ~20x faster and its BLAS runs the same
# FMA units (one thread, pinned to the other core before numpy starts any)
_CONTENDER = f"""
import os, sys
os.sched_setaffinity(0, {{int(sys.argv[1])}})
import numpy as np
a = np.ones(({M}, {K}), np.float32); w = np.ones(({K}, {N}), np.float32)
a @ w
print("ready", flush=True)
while True:
    a @ w
"""


@dataclass(frozen=True)
class CoreSharing:
    """One core's GEMM rate (GFLOP/s, medians) alone and while `other` computes too."""

    core: int
    other: int
    alone_gflops: float
    shared_gflops: float

    @property
    def ratio(self) -> float:
        return self.shared_gflops / self.alone_gflops if self.alone_gflops > 0 else 1.0

    @property
    def independent(self) -> bool:
        return self.ratio >= INDEPENDENT

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "independent": self.independent}

    def summary(self) -> str:
        said = (f"a float32 GEMM on core {self.core} runs at {self.alone_gflops:.0f} GFLOP/s "
                f"alone and {self.shared_gflops:.0f} while core {self.other} computes too "
                f"({self.ratio:.2f}x)")
        if self.independent:
            return said + ": the cores compute independently"
        return (said + ": engines on separate cores here slow each other whenever both "
                "compute (shared vector units, cache or memory), as separate GPUs would not")


def measure(rate: Callable[[], float], pause: Callable[[], None], resume: Callable[[], None],
            core: int, other: int, rounds: int = ROUNDS) -> CoreSharing:
    """Alternate `rate()` (GFLOP/s over a window) with the contender paused and running,
    `rounds` times each; the medians."""
    alone, shared = [], []
    for _ in range(rounds):
        pause()
        alone.append(rate())
        resume()
        shared.append(rate())
    pause()
    return CoreSharing(core, other, statistics.median(alone), statistics.median(shared))


def host_core_sharing(window_s: float = WINDOW_S, rounds: int = ROUNDS) -> CoreSharing | None:
    """This host's core sharing, measured on the first two cores this process may run on
    (torch's GEMM on one thread here, numpy's on the other); None with fewer than two, or
    where the contender could not start."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    import torch  # here, so that importing this module stays torch-free

    core, other = cores[0], cores[1]
    threads_vars = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    env = {**os.environ, **dict.fromkeys(threads_vars, "1")}
    before, threads = os.sched_getaffinity(0), torch.get_num_threads()
    proc = subprocess.Popen([sys.executable, "-c", _CONTENDER, str(other)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        os.sched_setaffinity(0, {core})
        torch.set_num_threads(1)
        a, w = torch.ones(M, K), torch.ones(K, N)
        a @ w
        assert proc.stdout is not None  # started with a pipe
        if proc.stdout.readline().strip() != "ready":  # blocks until its first GEMM
            return None  # it died before computing: there is nothing to compare with

        def rate() -> float:
            began, n = time.perf_counter(), 0
            while (took := time.perf_counter() - began) < window_s:
                a @ w
                n += 1
            return 2 * M * K * N * n / took / 1e9

        return measure(rate, lambda: proc.send_signal(signal.SIGSTOP),
                       lambda: proc.send_signal(signal.SIGCONT), core, other, rounds)
    finally:
        proc.kill()
        proc.wait()
        os.sched_setaffinity(0, before)
        torch.set_num_threads(threads)
