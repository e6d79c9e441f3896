"""Token-length distributions for prompts and outputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class LengthDist:
    """One of: fixed `mean`; uniform over [mean*(1-range_ratio), mean*(1+range_ratio)]
    (vLLM's --random-range-ratio); lognormal with this mean and `sigma`, clipped
    to [low, high]; or empirical, drawn from `values`."""

    kind: str = "fixed"  # fixed | uniform | lognormal | empirical
    mean: int = 128
    range_ratio: float = 0.0
    sigma: float = 0.5
    low: int = 1
    high: int | None = None
    values: tuple[int, ...] = ()

    def validate(self, name: str) -> None:
        """Raise ValueError naming `name` when the distribution cannot be sampled."""
        if self.kind not in ("fixed", "uniform", "lognormal", "empirical"):
            raise ValueError(f"{name}: unknown length distribution {self.kind!r}")
        if self.kind == "empirical":
            if not self.values or min(self.values) < 1:
                raise ValueError(f"{name}: empirical lengths must be a non-empty list of ints >= 1")
            return
        if self.mean < 1:
            raise ValueError(f"{name}: mean length must be >= 1, not {self.mean}")
        if not 0.0 <= self.range_ratio < 1.0:
            raise ValueError(f"{name}: range ratio must be in [0, 1), not {self.range_ratio}")
        if self.sigma <= 0:
            raise ValueError(f"{name}: sigma must be > 0")

    def scaled(self, factor: float) -> LengthDist:
        """The same shape with lengths multiplied by `factor` (at least 1 token)."""
        def s(n: float) -> int:
            return max(1, round(n * factor))

        return LengthDist(self.kind, s(self.mean), self.range_ratio, self.sigma, s(self.low),
                          None if self.high is None else s(self.high),
                          tuple(s(v) for v in self.values))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray[Any, np.dtype[np.int64]]:
        """n lengths as int64, each >= 1."""
        if self.kind == "fixed":
            out = np.full(n, self.mean)
        elif self.kind == "uniform":
            lo = int(np.floor(self.mean * (1 - self.range_ratio)))
            hi = int(np.ceil(self.mean * (1 + self.range_ratio)))
            out = rng.integers(lo, hi + 1, size=n)
        elif self.kind == "lognormal":
            mu = np.log(self.mean) - self.sigma ** 2 / 2  # so that E[X] = mean
            out = np.rint(rng.lognormal(mu, self.sigma, size=n))
        else:
            out = rng.choice(np.asarray(self.values), size=n)
        high = self.high if self.high is not None else np.iinfo(np.int64).max
        lengths: np.ndarray[Any, np.dtype[np.int64]] = np.clip(
            out, max(1, self.low), high).astype(np.int64)
        return lengths
