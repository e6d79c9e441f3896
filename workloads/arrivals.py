"""Arrival processes: when each request (or session) starts, in seconds from t=0."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Arrivals:
    """`rate` requests/s (inf: all at once) under one process:

    - poisson: exponential gaps with mean 1/rate;
    - gamma: vLLM's --burstiness: shape = burstiness, mean gap 1/rate
      (burstiness 1 is Poisson; below 1 burstier, above 1 more regular);
    - constant: every 1/rate;
    - onoff: Poisson at rate/duty during `on_s` windows, silence for `off_s`
      after each (mean rate over a whole cycle stays `rate`).
    """

    kind: str = "poisson"  # poisson | gamma | constant | onoff
    rate: float = 1.0
    burstiness: float = 1.0
    on_s: float = 5.0
    off_s: float = 5.0

    def validate(self) -> None:
        if self.kind not in ("poisson", "gamma", "constant", "onoff"):
            raise ValueError(f"unknown arrival process {self.kind!r}")
        if not self.rate > 0:
            raise ValueError(f"request rate must be > 0 (or inf), not {self.rate}")
        if not self.burstiness > 0:
            raise ValueError(f"burstiness must be > 0, not {self.burstiness}")
        if self.kind == "onoff" and (self.on_s <= 0 or self.off_s < 0):
            raise ValueError("on/off windows need on_s > 0 and off_s >= 0")

    def gaps(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n inter-arrival gaps in seconds (the first is the wait before request 0)."""
        if math.isinf(self.rate):
            return np.zeros(n)
        mean = 1.0 / self.rate
        if self.kind == "poisson":
            return rng.exponential(mean, n)
        if self.kind == "gamma":
            return rng.gamma(self.burstiness, mean / self.burstiness, n)
        if self.kind == "constant":
            return np.full(n, mean)
        duty = self.on_s / (self.on_s + self.off_s)
        # time spent "on" before each arrival, the first at the start of a window
        on_times = np.concatenate([[0.0], np.cumsum(rng.exponential(mean * duty, n - 1))])
        wall = on_times + np.floor(on_times / self.on_s) * self.off_s
        return np.diff(wall, prepend=0.0)

    def times(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n start times, the first at 0."""
        g = self.gaps(n, rng)
        return np.concatenate([[0.0], np.cumsum(g[1:])]) if n else g
