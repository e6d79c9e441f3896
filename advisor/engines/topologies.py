"""`--topologies`, parsed once into typed items: the shapes an engine started here is asked
for (advisor.engines.started turns each into a placement)."""

from __future__ import annotations

from dataclasses import dataclass

from advisor.engines.placement import counts
from advisor.errors import UsageError

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
