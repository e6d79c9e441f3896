"""`dtype="auto"`: the precision that is fast on this hardware, decided by measuring.

CUDA: bfloat16 where the GPU supports it, else float16. CPU: bfloat16 only where it is
really fast here (native BF16 / AMX), else float32. Flags alone mislead (torch on an
AVX2-only CPU runs bf16 matmuls at ~1 GFLOP/s against ~62 in float32), so a small
matmul is timed in each dtype on one thread, in alternating rounds, ~60 ms in all, once
per process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

AUTO = "auto"
_SHAPE = (256, 512, 512)  # m, k, n: big enough to run the kernels, small enough for ~1 ms
# each dtype's rate is the best of ROUNDS alternating measurements, so that a slow burst
# of the host landing on one dtype's window alone cannot turn the choice
ROUNDS = 3


@dataclass(frozen=True)
class DtypeChoice:
    """The dtype to run in and why; `gflops` holds the measured matmul rate per dtype (CPU)."""

    dtype: str
    reason: str
    gflops: dict[str, float]


def matmul_gflops(dtype: str, seconds: float = 0.01) -> float:
    """Single-thread matmul rate in `dtype` on the CPU, GFLOP/s."""
    import torch  # here, not above: a sweep of deployments by URL never loads torch

    m, k, n = _SHAPE
    a, b = torch.randn(m, k).to(getattr(torch, dtype)), torch.randn(k, n).to(getattr(torch, dtype))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a @ b  # first call: kernel selection and allocation
        start, count = time.perf_counter(), 0
        while (elapsed := time.perf_counter() - start) < seconds:
            a @ b
            count += 1
    finally:
        torch.set_num_threads(threads)
    return 2 * m * k * n * count / elapsed / 1e9


def best_rates(dtypes: tuple[str, ...], rate: Callable[[str], float] = matmul_gflops,
               rounds: int = ROUNDS) -> dict[str, float]:
    """Each of `dtypes`' best `rate` over `rounds` rounds, each round every dtype once."""
    rates = dict.fromkeys(dtypes, 0.0)
    for _ in range(rounds):
        for d in dtypes:
            rates[d] = max(rates[d], rate(d))
    return rates


def choose_cpu(rate: Callable[[str], float]) -> DtypeChoice:
    """bfloat16 when its measured matmul rate (`best_rates`) is at least float32's, else
    float32."""
    rates = best_rates(("float32", "bfloat16"), rate)
    fast = rates["bfloat16"] >= rates["float32"]
    verdict = "native BF16: bfloat16 is" if fast else "no native BF16: bfloat16 is only"
    reason = (f"{verdict} {rates['bfloat16'] / rates['float32']:.2g}x float32's matmul rate "
              f"({rates['bfloat16']:.0f} vs {rates['float32']:.0f} GFLOP/s on one thread)")
    return DtypeChoice("bfloat16" if fast else "float32", reason, rates)


@cache
def _cpu_choice() -> DtypeChoice:
    return choose_cpu(matmul_gflops)


def resolve(dtype: str, device: str = "cpu") -> DtypeChoice:
    """The dtype to run in: `dtype` itself unless it is "auto"."""
    if dtype != AUTO:
        return DtypeChoice(dtype, "asked for", {})
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return DtypeChoice("bfloat16", "the GPU supports bfloat16", {})
        return DtypeChoice("float16", "the GPU lacks bfloat16", {})
    return _cpu_choice()
