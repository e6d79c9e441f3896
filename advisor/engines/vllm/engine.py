"""Real vLLM as the verbs start it (--engine vllm): its placements as the scripts
advisor.engines.vllm.placements plans, each run and waited for instance by instance, then
its front; what it ran (version, model directory, scripts) for the manifest."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from advisor.engines.engine import Started
from advisor.engines.given import start_at_url
from advisor.engines.placement import Placement
from advisor.engines.topologies import TopologySpec
from advisor.engines.vllm.placements import engine_ran, placements
from advisor.engines.vllm.runtime import VllmSettings
from advisor.probe.p2p import P2PMatrix
from advisor.rundata.manifest import EngineRan


@dataclass(frozen=True)
class VllmEngine:
    """vLLM serving `settings`' model, each instance given `ready_timeout` to start, its
    ports from `base_port` (None: a free range)."""

    settings: VllmSettings
    ready_timeout: float = 600.0
    base_port: int | None = None

    def placements(self, specs: tuple[TopologySpec, ...], matrix: P2PMatrix | None = None
                   ) -> list[Placement]:
        """The scripts for `specs`, P/D on GPUs on `matrix`'s P2P pairs."""
        return placements(specs, self.settings, self.base_port, matrix)

    def start(self, p: Placement, stack: contextlib.ExitStack, log_dir: Path) -> Started:
        """`p`'s script run until `stack` closes, its output in `log_dir/NAME.log`."""
        return start_at_url(p, stack, log_dir, self.settings.served, None, self.ready_timeout)

    def ran(self, placements: list[Placement]) -> EngineRan | None:
        """vLLM's version, the model directory and each placement's script as run."""
        return engine_ran(self.settings, placements)
