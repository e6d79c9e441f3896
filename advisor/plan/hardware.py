"""Hardware the planner can predict for: GPUs by their datasheet figures, each with where
its figures come from, and the KV link between them (advisor.probe.links).

Datasheet peaks are never reached: the step-time model (advisor.plan.steptime) applies one
efficiency to memory bandwidth and one to tensor throughput, the same for every GPU. They
are not fitted to any measurement the planner is validated against.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.probe.links import HOST_STAGED, LINKS, Link
from engine.api import parse_link


@dataclass(frozen=True)
class Slowdown:
    """A GPU without kernel tables priced as `reference`'s tables (aiconfigurator-core's
    system name) with each kernel's time times `compute` where it is compute-bound on the
    reference and `memory` where it is bandwidth-bound: the ratio of what the two GPUs
    reach of their peaks, from published measurements (`source`)."""

    reference: str
    compute: float
    memory: float
    source: str


# FLOP/s reached: H200 0.93 x 989 against MI300X 0.45 x 1307 (the same ratio in FP8);
# bandwidth: aiconfigurator's own 0.8 of the H200's 4.8 TB/s against 0.81 of 5.3 TB/s
MI300X_FROM_H200 = Slowdown(
    "h200_sxm", (0.93 * 989) / (0.45 * 1307), (0.8 * 4800) / (0.81 * 5300),
    "MI300X reaching ~45% of its peak FLOP/s and ~81% of its 5.3 TB/s against NVIDIA's up to "
    "93% (aiweekly.co/alerts/amd-mi300x-hits-only-45-of-peak-flops-in-practice, summarising "
    "peer-reviewed measurements); the H200's bandwidth at aiconfigurator's 0.8 of 4.8 TB/s")


@dataclass(frozen=True)
class GPU:
    name: str
    memory_gb: float
    hbm_gbps: float  # memory bandwidth, GB/s
    bf16_tflops: float  # dense tensor throughput (no sparsity)
    fabric: str  # the link between two of them in one host: a LINKS key
    source: str
    fp8_tflops: float | None = None  # dense FP8 tensor throughput; None: no FP8 tensor cores
    tables: str | None = None  # aiconfigurator-core's system with vLLM kernel tables for it
    slowdown: Slowdown | None = None  # else priced from another's tables (advisor.plan.kernels)
    # a full mesh of point-to-point links (GB/s, one direction, each): a TP group of t
    # GPUs has t - 1 of them per GPU; 0: a switched fabric, the same rate at any size
    peer_gbps: float = 0.0
    vendor: str = "nvidia"

    def tflops(self, weights: str) -> float:
        """Dense tensor throughput for weights in `weights` (fp8 on FP8 tensor cores, W8A8;
        int4 dequantized to bf16, W4A16; else bf16). ValueError for FP8 without them."""
        if weights != "fp8":
            return self.bf16_tflops
        if self.fp8_tflops is None:
            raise ValueError(f"--weights fp8: the {self.name} has no FP8 tensor cores "
                             f"({self.source}); plan it in bf16 or int4")
        return self.fp8_tflops


# FP8 figures: each datasheet's dense FP8 (half its with-sparsity figure)
GPUS = {g.name: g for g in (
    GPU("l40s", 48, 864, 362, "pcie4", "NVIDIA L40S datasheet (PCIe 4, no NVLink)", 733,
        "l40s"),
    GPU("a10g", 24, 600, 70, "pcie4", "NVIDIA A10 datasheet (125 TFLOP/s) scaled to the "
        "A10G's lower clocks: an estimate (PCIe 4, no NVLink)"),
    GPU("a100-40gb", 40, 1555, 312, "nvlink", "NVIDIA A100 datasheet (SXM, NVLink 3)",
        tables="a100_sxm"),
    GPU("a100-80gb", 80, 2039, 312, "nvlink", "NVIDIA A100 datasheet (SXM, NVLink 3)",
        tables="a100_sxm"),
    GPU("h100-pcie", 80, 2000, 756, "pcie5", "NVIDIA H100 datasheet (PCIe card)", 1513),
    GPU("h100-sxm", 80, 3350, 989, "nvlink", "NVIDIA H100 datasheet (SXM, NVLink 4)", 1979,
        "h100_sxm"),
    GPU("h200", 141, 4800, 989, "nvlink", "NVIDIA H200 datasheet (SXM, NVLink 4)", 1979,
        "h200_sxm"),
    GPU("b200", 180, 8000, 2250, "nvlink", "NVIDIA HGX B200 figures (NVLink 5)", 4500,
        "b200_sxm"),
    GPU("mi300x", 192, 5300, 1307, "infinity-fabric", "AMD Instinct MI300X datasheet (7 "
        "Infinity Fabric links of 64 GB/s per direction, a full mesh of 8)", 2615,
        slowdown=MI300X_FROM_H200, peer_gbps=64, vendor="amd"),
)}


def gpu(name: str) -> GPU:
    """A GPU by name, case-insensitive; ValueError listing the known ones."""
    g = GPUS.get(name.lower())
    if g is None:
        raise ValueError(f"--gpu {name!r}: expected one of {', '.join(GPUS)}")
    return g


def tp_fabric(g: GPU, tp: int) -> Link | None:
    """What a TP group of `tp` of them exchanges over: their own fabric, on a full mesh the
    t - 1 links each GPU has to the group's others (None: one GPU, or no such fabric)."""
    base = LINKS.get(g.fabric)
    if tp < 2 or base is None or not g.peer_gbps:
        return base
    nominal = g.peer_gbps * (tp - 1)
    return Link(f"{g.fabric} x{tp - 1}", 0.8 * nominal, base.latency_ms, base.overhead_ms,
                f"{tp - 1} links of {g.peer_gbps:g} GB/s each: {nominal:g} GB/s nominal, "
                "~80% reached")


def link(spec: str | None, p2p: bool, on: GPU) -> Link:
    """The KV link: a name in LINKS, a rate ('25GBps', '100Gbps'), or the GPUs' own fabric
    when none is given. Without P2P, a path between GPUs (PCIe or NVLink) stages through
    the host; RDMA and TCP links do not use it."""
    name = (spec or on.fabric).lower()
    if name in LINKS:
        lk = LINKS[name]
    else:
        try:
            rate = parse_link(spec or name)  # as given: B is bytes, b bits
        except ValueError:
            raise ValueError(f"--link {spec!r}: expected one of {', '.join(LINKS)} or a rate "
                             "such as 25GBps or 100Gbps") from None
        lk = Link(spec or name, rate / 1e9, 0.01, 1.0, f"given: {spec}")
    if not p2p and (name.startswith("pcie") or name in ("nvlink", "infinity-fabric")):
        return HOST_STAGED
    return lk
