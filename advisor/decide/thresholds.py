"""The decision table's named thresholds (docs/concepts/decision-table.md)."""

from __future__ import annotations

from dataclasses import dataclass

from advisor.measure.transfer import SLOW_MS

# a stated ratio of two max goodputs: its interval's hi / lo below the rate grid's factor
RATIO_WIDTH = 2.0


@dataclass(frozen=True)
class Thresholds:
    """Named thresholds; every one can be overridden (`advisor recommend --threshold`)."""

    long_prompt_tokens: int = (
        2048  # the guide's case is ~8k; 2k already stalls decodes for 100s of ms
    )
    high_concurrency: float = 2.0  # requests in flight: prefills then overlap running decodes
    kv_slow_ms: float = SLOW_MS  # guide: "several hundred milliseconds ... fix the transfer first"
    kv_slow_ttft_share: float = 0.25  # or a quarter of the TTFT budget spent moving KV
    frontend_cpu_share: float = 0.10  # front-end CPU over the engine host's total CPU
    ttft_binding_ratio: float = 0.8  # p99 TTFT within 20% of its SLO: TTFT is what binds
    low_concurrency: float = 1.0  # under one request in flight: nothing to interfere with
    bursty_cv: float = 2.0  # coefficient of variation of inter-arrival gaps (Poisson = 1)
    goodput_margin: float = 0.10  # measured goodputs within 10% of each other are a tie
    late_turn_ttft_cut: float = 0.20  # bidirectional P/D must cut a late turn's TTFT this much
    host_slowed: float = 1.5  # the runs' decode steps over the calibrated ones: the host slowed
