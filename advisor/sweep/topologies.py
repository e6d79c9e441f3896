"""`--topologies`, parsed once into typed items, and the placements a sweep measures built
from them (or from the deployment URLs, where given)."""

from __future__ import annotations

from dataclasses import dataclass

from advisor.errors import UsageError
from advisor.goodput.placements import Placement, counts
from engine.api import Topology

KINDS = ("collocated", "disagg", "disagg-bidi", "render-split")


@dataclass(frozen=True)
class TopologySpec:
    """One --topologies item: collocated:N, disagg:XpYd, disagg-bidi:XpYd, render-split:N."""

    kind: str  # one of KINDS
    prefill: int  # prefillers (0 but for P/D)
    decode: int  # engines that decode: a P/D's decoders, else the replicas

    @property
    def shape(self) -> str:
        """As --topologies writes it after the colon: N, or XpYd."""
        return f"{self.prefill}p{self.decode}d" if self.prefill else str(self.decode)

    @property
    def name(self) -> str:
        """The placement's (and its run directory's) name: collocated-2, disagg-1p1d, ..."""
        return f"{self.kind}-{self.shape}"


def parse_topologies(text: str) -> tuple[TopologySpec, ...]:
    """--topologies' items, collocated first (it leads the rate search); UsageError naming
    the flag for a malformed item or a kind given twice."""
    out = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        kind, _, shape = item.partition(":")
        # render-split N and disagg-bidi XpYd are shaped as collocated N and disagg XpYd
        n = counts({"render-split": "collocated", "disagg-bidi": "disagg"}.get(kind, kind), shape)
        if kind in KINDS and n is not None:
            out.append(TopologySpec(kind, *n))
        else:
            raise UsageError(f"--topologies item {item!r}: expected collocated:N, disagg:XpYd, "
                             "disagg-bidi:XpYd or render-split:N")
    if not out or len({s.kind for s in out}) != len(out):
        raise UsageError("--topologies: give at most one collocated, one disagg, one "
                         "disagg-bidi and one render-split placement")
    kinds = {s.kind for s in out}
    if "render-split" in kinds and "collocated" not in kinds:
        raise UsageError("--topologies: render-split is judged against collocated: give both")
    return tuple(sorted(out, key=lambda s: s.kind != "collocated"))


@dataclass(frozen=True)
class Deployment:
    """One placement measured at a URL: its front, its instances' /metrics, and the shell
    command that starts it (None: it is up already)."""

    kind: str  # collocated | disagg
    url: str
    metrics: tuple[str, ...] = ()
    cmd: str | None = None


@dataclass(frozen=True)
class EngineSettings:
    """What every bundled-engine placement of a sweep shares."""

    model: str
    dtype: str
    device: str
    connector: str
    link_emulation: str | None = None


def bundled(specs: tuple[TopologySpec, ...], engine: EngineSettings) -> list[Placement]:
    """The bundled engine's placements for `specs`; UsageError naming the item whose
    topology the engine refuses."""
    out = []
    for s in specs:
        if s.kind in ("disagg", "disagg-bidi"):
            extra = ("--kv-link-emulation", engine.link_emulation) if engine.link_emulation \
                else ()
            bidi = s.kind == "disagg-bidi"
            topo = Topology(mode="disagg", prefill=s.prefill, decode=s.decode, model=engine.model,
                            connector=engine.connector, dtype=engine.dtype, device=engine.device,
                            extra_args=extra, bidirectional=bidi)
            p = Placement(s.name, "disagg", topo, emulated=engine.link_emulation,
                          bidirectional=bidi)
        else:
            topo = Topology(mode=s.kind, replicas=s.decode, model=engine.model,
                            dtype=engine.dtype, device=engine.device)
            p = Placement(s.name, s.kind, topo)
        try:
            topo.validate()
        except ValueError as e:
            raise UsageError(f"--topologies {s.kind}:{s.shape}: {e}") from None
        out.append(p)
    return out


def at_urls(deployments: list[Deployment]) -> list[Placement]:
    """The placements of deployments measured at URLs, collocated first."""
    return [Placement(f"{d.kind}-url", d.kind, url=d.url, metrics=d.metrics, cmd=d.cmd)
            for d in sorted(deployments, key=lambda d: d.kind != "collocated")]
