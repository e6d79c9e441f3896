"""A placement: what a sweep, bench, serve or probe starts or measures (a bundled-engine
topology, vLLM's instances behind a front, or a deployment at a URL), and each P/D on GPUs
put on pairs with P2P."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from advisor.errors import UsageError
from advisor.probe.p2p import P2PMatrix
from advisor.probe.p2p_pairs import GpuPlacement, place
from engine.api import Topology

_DISAGG = re.compile(r"^(\d+)p(\d+)d$")


@dataclass(frozen=True)
class Placement:
    name: str  # directory name: collocated-2, disagg-1p1d, collocated-url, ...
    kind: str  # collocated | disagg | render-split
    topology: Topology | None = None  # bundled engine
    url: str | None = None  # a deployment's front (someone else's, or started by `cmd`)
    emulated: str | None = None  # link emulation on its KV transfers
    metrics: tuple[str, ...] = ()  # its instances' /metrics, as given
    cmd: str | None = None  # a shell command that starts the deployment at `url`
    bidirectional: bool = False  # P/D whose prefillers reuse a conversation's earlier turns
    on_gpus: GpuPlacement | None = None  # bundled P/D on CUDA: its instances' GPUs
    instances: tuple[str, ...] = ()  # a started deployment's instances, each waited for

    @property
    def flag(self) -> str:
        """The flag prefix that names this placement's deployment: --collocated / --disagg."""
        return f"--{self.kind}"


def counts(kind: str, shape: str) -> tuple[int, int] | None:
    """(prefillers, decoding engines) of a placement's shape as its name writes it:
    collocated N is (0, N), disagg XpYd is (X, Y); None for anything else or a count below
    1."""
    if kind == "collocated" and shape.isdigit() and int(shape) >= 1:
        return 0, int(shape)
    m = _DISAGG.match(shape) if kind == "disagg" else None
    if m and min(map(int, m.groups())) >= 1:
        return int(m.group(1)), int(m.group(2))
    return None


def on_p2p(placements: list[Placement], matrix: P2PMatrix | None) -> list[Placement]:
    """The placements with each bundled P/D on CUDA put on the GPUs whose pairs have P2P
    (advisor.probe.p2p_pairs.place); the rest as they are. UsageError where the matrix has
    too few GPUs for one."""
    if matrix is None:
        return placements
    out = []
    for p in placements:
        t = p.topology
        if t is None or t.mode != "disagg" or not t.device.startswith("cuda"):
            out.append(p)
            continue
        placed = on_pairs(matrix, t.prefill, t.decode, p.name.replace('-', ':', 1))
        out.append(replace(p, topology=replace(t, gpus=tuple(placed.gpus)), on_gpus=placed))
    return out


def on_pairs(matrix: P2PMatrix, prefill: int, decode: int, item: str) -> GpuPlacement:
    """`prefill` + `decode` instances on the matrix's GPUs, each P->D pair with P2P where it
    can (advisor.probe.p2p_pairs.place); UsageError naming the --topologies `item` where
    the matrix has too few GPUs."""
    try:
        return place(matrix, list(range(len(matrix.gpus))), prefill, decode)
    except ValueError as e:
        raise UsageError(f"--topologies {item}: {e}") from None
