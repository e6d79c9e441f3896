"""What the simulator is given: the requests, each engine's limits and step model, and the
placement around them (advisor.plan.simulate runs it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from advisor.plan.steptime import Step, Work
from advisor.probe.links import Link


class StepModel(Protocol):
    """A step's time: convex in the context at a fixed batch (a line, or the larger of
    lines), which the simulator's runs of decode steps rely on."""

    def ms(self, s: Step) -> Work: ...

    @property
    def source(self) -> str:
        """What priced it, said beside every prediction."""
        ...


@dataclass(frozen=True)
class SimRequest:
    arrival: float  # seconds from t=0
    prompt: int
    output: int


@dataclass(frozen=True)
class EngineSpec:
    step: StepModel
    kv_tokens: int  # KV capacity
    max_batched_tokens: int = 2048
    max_num_seqs: int = 256
    chunked_prefill: bool = True
    # each step's time times a lognormal factor of median 1 and this sigma for a decode
    # step (0: exact; less for longer steps, see _Sim._jittered): a machine's own noise
    # (OS, other processes), fitted where there is a measurement
    jitter: float = 0.0
    block_size: int = 16  # KV is held in blocks of this many tokens


@dataclass(frozen=True)
class System:
    """Collocated: `prefill` empty, `decode` the replicas. P/D: both tiers and the link."""

    decode: tuple[EngineSpec, ...]
    prefill: tuple[EngineSpec, ...] = ()
    link: Link | None = None
    kv_bytes: Callable[[int], int] | None = None  # prompt tokens -> bytes moved (P/D)
    front_ms: float = 1.0  # client -> engine, per request (HTTP, parsing)
    proxy_ms: float = 1.0  # the P/D proxy's extra hop, per request
    # (idle seconds, extra ms, extra per ms of the step) points, idle growing: what an
    # engine's first step after it idled that long costs beyond its step model (empty:
    # nothing); Calibration.wake_curve
    wake: tuple[tuple[float, float, float], ...] = ()
    # each step lasts (1 + contention x n) times its model's time when it starts while n
    # other engines step: instances sharing one host's cores and memory slow each other
    contention: float = 0.0
