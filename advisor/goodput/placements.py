"""The placements a sweep compares: bundled-engine topologies or existing deployments."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from advisor.errors import UsageError
from advisor.probe.p2p import P2PMatrix
from advisor.probe.p2p_pairs import GpuPlacement, evidence, place
from advisor.rundata.evidence import P2PEvidence
from engine.api import Topology, load_model_config

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

    @property
    def flag(self) -> str:
        """The flag prefix that names this placement's deployment: --collocated / --disagg."""
        return f"--{self.kind}"


def counts(kind: str, shape: str) -> tuple[int, int] | None:
    """(prefillers, decoding engines) of a topology as --topologies writes it: collocated N
    is (0, N), disagg XpYd is (X, Y); None for anything else or a count below 1."""
    if kind == "collocated" and shape.isdigit() and int(shape) >= 1:
        return 0, int(shape)
    m = _DISAGG.match(shape) if kind == "disagg" else None
    if m and min(map(int, m.groups())) >= 1:
        return int(m.group(1)), int(m.group(2))
    return None


def parse_topologies(opts) -> list[Placement]:
    """From a SweepOptions: the URLs if given, else `--topologies`; collocated first (it
    leads the rate search). UsageError names the bad flag."""
    for kind in ("collocated", "disagg"):
        url, cmd, metrics = (getattr(opts, f"{kind}_{k}") for k in ("url", "cmd", "metrics"))
        if (cmd or metrics) and not url:
            what = "-cmd" if cmd else "-metrics"
            raise UsageError(f"--{kind}{what} needs --{kind}-url (where the deployment answers)")
    if opts.collocated_url or opts.disagg_url:
        if opts.link_emulation:
            raise UsageError("--link-emulation shapes the bundled engine's connector; it cannot "
                             "apply to --collocated-url / --disagg-url")
        return [Placement(f"{kind}-url", kind, url=getattr(opts, f"{kind}_url"),
                          metrics=tuple(getattr(opts, f"{kind}_metrics")),
                          cmd=getattr(opts, f"{kind}_cmd"))
                for kind in ("collocated", "disagg") if getattr(opts, f"{kind}_url")]
    try:  # a clear error for an unknown model, before anything starts
        load_model_config(opts.model)
    except ValueError as e:
        raise UsageError(f"--model: {e}") from None
    out = []
    for item in (t.strip() for t in opts.placements.split(",") if t.strip()):
        kind, _, shape = item.partition(":")
        if kind == "collocated" and (n := counts(kind, shape)):
            topo = Topology(mode="collocated", replicas=n[1], model=opts.model,
                            dtype=opts.dtype, device=opts.device)
            out.append(Placement(f"collocated-{shape}", kind, topo))
        elif kind == "render-split" and shape.isdigit() and int(shape) >= 1:
            topo = Topology(mode="render-split", replicas=int(shape), model=opts.model,
                            dtype=opts.dtype, device=opts.device)
            out.append(Placement(f"render-split-{shape}", kind, topo))
        elif kind in ("disagg", "disagg-bidi") and (n := counts("disagg", shape)):
            extra = ("--kv-link-emulation", opts.link_emulation) if opts.link_emulation else ()
            bidi = kind == "disagg-bidi"
            topo = Topology(mode="disagg", prefill=n[0], decode=n[1],
                            model=opts.model, connector=opts.connector, dtype=opts.dtype,
                            device=opts.device, extra_args=extra, bidirectional=bidi)
            out.append(Placement(f"{kind}-{shape}", "disagg", topo, emulated=opts.link_emulation,
                                 bidirectional=bidi))
        else:
            raise UsageError(f"--topologies item {item!r}: expected collocated:N, disagg:XpYd, "
                             "disagg-bidi:XpYd or render-split:N")
    if not out or len({(p.kind, p.bidirectional) for p in out}) != len(out):
        raise UsageError("--topologies: give at most one collocated, one disagg, one "
                         "disagg-bidi and one render-split placement")
    if any(p.kind == "render-split" for p in out) and not any(p.kind == "collocated" for p in out):
        raise UsageError("--topologies: render-split is judged against collocated: give both")
    for p in out:
        try:
            p.topology.validate()
        except ValueError as e:
            raise UsageError(f"--topologies {p.name.replace('-', ':', 1)}: {e}") from None
    return sorted(out, key=lambda p: p.kind != "collocated")


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
        try:
            placed = place(matrix, list(range(len(matrix.gpus))), t.prefill, t.decode)
        except ValueError as e:
            raise UsageError(f"--topologies {p.name.replace('-', ':', 1)}: {e}") from None
        out.append(replace(p, topology=replace(t, gpus=tuple(placed.gpus)), on_gpus=placed))
    return out


def p2p_evidence(placements: list[Placement], probe: dict, model: str | None,
                 prompt_tokens: float | None, dtype: str) -> P2PEvidence | None:
    """evidence.json's p2p: the matrix a sweep's manifest recorded, with the pairs its
    disaggregated placement used (unknown for a deployment at a URL); None without one."""
    if not probe.get("p2p"):
        return None
    dis = [p for p in placements if p.kind == "disagg"]
    dis.sort(key=lambda p: p.bidirectional)  # the plain P/D the advice compares first
    return evidence(P2PMatrix.from_json(probe["p2p"]), probe.get("p2p_source") or "nvidia-smi",
                    dis[0].on_gpus if dis else None, model, prompt_tokens,
                    dtype if dtype in ("float32", "bfloat16", "float16") else "bfloat16")
