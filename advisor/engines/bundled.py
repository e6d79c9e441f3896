"""The bundled engine as the verbs start it: each --topologies item as an engine
`Topology` (its own checks naming the item), P/D on CUDA put on GPU pairs with P2P, and
started by the engine's launcher, which waits for every instance."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from advisor.engines.engine import Started
from advisor.engines.placement import Placement, on_p2p
from advisor.engines.topologies import TopologySpec
from advisor.errors import UsageError
from advisor.probe.p2p import P2PMatrix
from advisor.rundata.manifest import EngineRan
from engine.api import Deployment, Topology, launch


@dataclass(frozen=True)
class BundledEngine:
    """What every bundled-engine placement of a verb shares."""

    model: str
    dtype: str
    device: str
    connector: str = "shm"
    link_emulation: str | None = None

    def placements(self, specs: tuple[TopologySpec, ...], matrix: P2PMatrix | None = None
                   ) -> list[Placement]:
        """The placements for `specs`, each P/D on CUDA on `matrix`'s P2P pairs;
        UsageError naming the item whose topology the engine refuses."""
        return on_p2p([self._placement(s) for s in specs], matrix)

    def _placement(self, s: TopologySpec) -> Placement:
        if s.kind in ("disagg", "disagg-bidi"):
            extra = ("--kv-link-emulation", self.link_emulation) if self.link_emulation else ()
            bidi = s.kind == "disagg-bidi"
            topo = Topology(mode="disagg", prefill=s.prefill, decode=s.decode, model=self.model,
                            connector=self.connector, dtype=self.dtype, device=self.device,
                            extra_args=extra, bidirectional=bidi)
            p = Placement(s.name, "disagg", topo, emulated=self.link_emulation,
                          bidirectional=bidi)
        else:
            topo = Topology(mode=s.kind, replicas=s.decode, model=self.model, dtype=self.dtype,
                            device=self.device)
            p = Placement(s.name, s.kind, topo)
        try:
            topo.validate()
        except ValueError as e:
            raise UsageError(f"--topologies {s.kind}:{s.shape}: {e}") from None
        return p

    def start(self, p: Placement, stack: contextlib.ExitStack, log_dir: Path) -> Started:
        """`p`'s topology launched (its children log to the console) until `stack` closes."""
        assert p.topology is not None  # every bundled placement has one
        dep = stack.enter_context(launch(p.topology))
        instances = tuple(u for us in dep.instance_urls.values() for u in us)
        return Started(dep.url, instances, tuple(u + "/metrics" for u in instances),
                       dep.instance_key, one=(dep.instance_urls.get("both") or [dep.url])[0])

    def ran(self, placements: list[Placement]) -> EngineRan | None:
        """Nothing beyond the manifest's own versions: the bundled engine is this project."""
        return None


@contextlib.contextmanager
def serving(topology: Topology) -> Iterator[Deployment]:
    """A topology `advisor serve` built from its own flags (a render tier, the front end's
    parsers, a key, a port), launched; its children supervised by the caller."""
    with launch(topology) as dep:
        yield dep
