"""What every engine a verb starts offers (the `Engine` protocol), and what a started
placement hands back (`Started`): its front, its instances and their metrics, the key its
instances want, and what says why it is gone. The bundled engine (advisor.engines.bundled),
real vLLM (advisor.engines.vllm.engine) and a deployment given by URL or command
(advisor.engines.given) implement it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from advisor.engines.placement import Placement
from advisor.engines.topologies import TopologySpec
from advisor.probe.p2p import P2PMatrix
from advisor.rundata.manifest import EngineRan


def still_running() -> None:
    """A deployment nothing here sees go (someone else's, or one the engine supervises)."""


@dataclass(frozen=True)
class Started:
    """A placement up and ready."""

    url: str  # its front: where requests go
    instances: tuple[str, ...] = ()  # each instance's URL (the model's first, in role order)
    metrics: tuple[str, ...] = ()  # the /metrics its counters are read from
    key: str | None = None  # the bearer token its instances (not its front) require
    gone: Callable[[], str | None] = still_running  # why it stopped, else None
    started_here: bool = True  # started by this process (first-call costs paid before a run)
    one: str | None = None  # the instance a calibration times (None: the front)

    @property
    def one_instance(self) -> str:
        """The URL a calibration times: one serving instance, else the front."""
        return self.one or self.url


class Engine(Protocol):
    """An engine as the verbs start it: the placements it offers for `--topologies` items
    on this machine, one of them started, and what a manifest records of what it ran."""

    def placements(self, specs: tuple[TopologySpec, ...], matrix: P2PMatrix | None = None
                   ) -> list[Placement]:
        """The placements for `specs` (P/D on GPUs on `matrix`'s P2P pairs); UsageError
        naming the item this engine cannot run."""
        ...

    def start(self, p: Placement, stack: contextlib.ExitStack, log_dir: Path) -> Started:
        """`p` started and ready until `stack` closes, its logs under `log_dir`."""
        ...

    def ran(self, placements: list[Placement]) -> EngineRan | None:
        """What the manifest records of the engine that ran `placements` (None: nothing
        beyond the manifest's own versions)."""
        ...
