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
class GPU:
    name: str
    memory_gb: float
    hbm_gbps: float  # memory bandwidth, GB/s
    bf16_tflops: float  # dense tensor throughput (no sparsity)
    fabric: str  # the link between two of them in one host: a LINKS key
    source: str
    fp8_tflops: float | None = None  # dense FP8 tensor throughput; None: no FP8 tensor cores

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
    GPU("l40s", 48, 864, 362, "pcie4", "NVIDIA L40S datasheet (PCIe 4, no NVLink)", 733),
    GPU("a10g", 24, 600, 70, "pcie4", "NVIDIA A10 datasheet (125 TFLOP/s) scaled to the "
        "A10G's lower clocks: an estimate (PCIe 4, no NVLink)"),
    GPU("a100-40gb", 40, 1555, 312, "nvlink", "NVIDIA A100 datasheet (SXM, NVLink 3)"),
    GPU("a100-80gb", 80, 2039, 312, "nvlink", "NVIDIA A100 datasheet (SXM, NVLink 3)"),
    GPU("h100-pcie", 80, 2000, 756, "pcie5", "NVIDIA H100 datasheet (PCIe card)", 1513),
    GPU("h100-sxm", 80, 3350, 989, "nvlink", "NVIDIA H100 datasheet (SXM, NVLink 4)", 1979),
    GPU("h200", 141, 4800, 989, "nvlink", "NVIDIA H200 datasheet (SXM, NVLink 4)", 1979),
    GPU("b200", 180, 8000, 2250, "nvlink", "NVIDIA HGX B200 figures (NVLink 5)", 4500),
    GPU("mi300x", 192, 5300, 1307, "nvlink", "AMD Instinct MI300X datasheet (Infinity "
        "Fabric, listed as nvlink-class)", 2615),
)}


def gpu(name: str) -> GPU:
    """A GPU by name, case-insensitive; ValueError listing the known ones."""
    g = GPUS.get(name.lower())
    if g is None:
        raise ValueError(f"--gpu {name!r}: expected one of {', '.join(GPUS)}")
    return g


def link(spec: str | None, p2p: bool, on: GPU) -> Link:
    """The KV link: a name in LINKS, a rate ('25GBps', '100Gbps'), or the GPUs' own fabric
    when none is given. Without P2P, a path between GPUs (PCIe or NVLink) stages through
    the host; RDMA and TCP links do not use it."""
    name = (spec or on.fabric).lower()
    if name in LINKS:
        lk = LINKS[name]
    else:
        try:
            rate = parse_link(spec)  # as given: B is bytes, b bits
        except ValueError:
            raise ValueError(f"--link {spec!r}: expected one of {', '.join(LINKS)} or a rate "
                             "such as 25GBps or 100Gbps") from None
        lk = Link(spec or name, rate / 1e9, 0.01, 1.0, f"given: {spec}")
    if not p2p and (name.startswith("pcie") or name == "nvlink"):
        return HOST_STAGED
    return lk
