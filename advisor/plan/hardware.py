"""Hardware the planner can predict for: GPUs by their datasheet figures, links by rate,
latency and per-transfer overhead, each with where its figures come from.

Datasheet peaks are never reached: the step-time model (advisor.plan.steptime) applies one
efficiency to memory bandwidth and one to tensor throughput, the same for every GPU. They
are not fitted to any measurement the planner is validated against.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.api import parse_link


@dataclass(frozen=True)
class GPU:
    name: str
    memory_gb: float
    hbm_gbps: float  # memory bandwidth, GB/s
    bf16_tflops: float  # dense tensor throughput (no sparsity)
    fabric: str  # the link between two of them in one host: a LINKS key
    source: str


GPUS = {g.name: g for g in (
    GPU("l40s", 48, 864, 362, "pcie4", "NVIDIA L40S datasheet (PCIe 4, no NVLink)"),
    GPU("a10g", 24, 600, 70, "pcie4", "NVIDIA A10 datasheet (125 TFLOP/s) scaled to the "
        "A10G's lower clocks: an estimate (PCIe 4, no NVLink)"),
    GPU("a100-40gb", 40, 1555, 312, "nvlink", "NVIDIA A100 datasheet (SXM, NVLink 3)"),
    GPU("a100-80gb", 80, 2039, 312, "nvlink", "NVIDIA A100 datasheet (SXM, NVLink 3)"),
    GPU("h100-pcie", 80, 2000, 756, "pcie5", "NVIDIA H100 datasheet (PCIe card)"),
    GPU("h100-sxm", 80, 3350, 989, "nvlink", "NVIDIA H100 datasheet (SXM, NVLink 4)"),
    GPU("h200", 141, 4800, 989, "nvlink", "NVIDIA H200 datasheet (SXM, NVLink 4)"),
    GPU("b200", 180, 8000, 2250, "nvlink", "NVIDIA HGX B200 figures (NVLink 5)"),
    GPU("mi300x", 192, 5300, 1307, "nvlink", "AMD Instinct MI300X datasheet (Infinity "
        "Fabric, listed as nvlink-class)"),
)}


@dataclass(frozen=True)
class Link:
    """A KV transfer over it lasts latency + overhead + bytes / rate; transfers into one
    decoder share it (one at a time)."""

    name: str
    gbps: float  # GB/s the transfer reaches, one direction
    latency_ms: float
    overhead_ms: float  # per transfer, beside the wire (registration, notification)
    source: str

    def seconds(self, nbytes: float) -> float:
        return (self.latency_ms + self.overhead_ms) / 1000 + nbytes / (self.gbps * 1e9)


# Peer-to-peer (or RDMA) rates: about 80% of the nominal, as copies reach.
LINKS = {k.name: k for k in (
    Link("pcie4", 25, 0.01, 1.0, "PCIe 4 x16: 32 GB/s nominal, ~25 GB/s reached by P2P copies"),
    Link("pcie5", 50, 0.01, 1.0, "PCIe 5 x16: 64 GB/s nominal, ~50 GB/s reached"),
    Link("nvlink", 300, 0.005, 0.5, "NVLink 4: 450 GB/s per direction nominal, ~300 reached"),
    Link("rdma-100g", 11, 0.005, 1.0, "100 Gb/s RDMA: 12.5 GB/s line rate"),
    Link("rdma-400g", 45, 0.005, 1.0, "400 Gb/s RDMA: 50 GB/s line rate"),
    Link("tcp-25g", 2.5, 0.05, 2.0, "25 Gb/s TCP: 3.1 GB/s line rate, ~80% reached"),
)}
# NOTE: without GPU peer-to-peer, KV is staged through the host: this is the effective
# rate the guide measured there (~470 MB in ~1.3 s, two L40S), the one figure of its case
# the planner takes.
HOST_STAGED = Link("host-staged", 0.470 / 1.3, 0.05, 0.0,
                   "host-staged NIXL path without P2P: the guide's ~1.3 s for ~470 MB")


def gpu(name: str) -> GPU:
    """A GPU by name, case-insensitive; ValueError listing the known ones."""
    g = GPUS.get(name.lower())
    if g is None:
        raise ValueError(f"--gpu {name!r}: expected one of {', '.join(GPUS)}")
    return g


def link(spec: str | None, p2p: bool, on: GPU) -> Link:
    """The KV link: a name in LINKS, a rate ('25GBps', '100Gbps'), or the GPUs' own fabric
    when none is given. Without P2P, a PCIe path between GPUs stages through the host."""
    name = (spec or on.fabric).lower()
    if name in LINKS:
        lk = LINKS[name]
    else:
        try:
            rate = parse_link(spec)  # NOTE: as given: B is bytes, b bits
        except ValueError:
            raise ValueError(f"--link {spec!r}: expected one of {', '.join(LINKS)} or a rate "
                             "such as 25GBps or 100Gbps") from None
        lk = Link(spec, rate / 1e9, 0.01, 1.0, f"given: {spec}")
    if not p2p and name.startswith("pcie"):
        return HOST_STAGED
    return lk
