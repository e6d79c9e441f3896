"""The placements a plan compares on a set of GPUs, and each one as a simulated system.

Collocated: data-parallel replicas of one TP size (an MoE's experts over each replica's
ranks: TP + EP at DP 1), and for an MoE each size also as one DP-attention + EP instance
(`-dp`). Disaggregated: every xPyD split, each tier at its own TP (equal for a hybrid SSM
model, as vLLM requires), using every GPU. TP sizes are powers of two from the smallest
the model fits at. Step times: measured kernels where aiconfigurator-core has them
(advisor.plan.kernels), else the roofline.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.plan import kernels
from advisor.plan.hardware import GPU, tp_fabric
from advisor.plan.steptime import RooflineStep
from advisor.plan.system import EngineSpec, StepModel, System
from advisor.probe.links import LINKS, Link
from advisor.probe.p2p_pairs import place
from advisor.probe.shapes import ModelShape, kv_dtype_for

MEMORY_USE = 0.9  # vLLM's default gpu_memory_utilization
MIN_KV_SHARE = 0.1  # of an instance's usable memory, left for KV at the least
ACTIVATIONS_GB = 2.0  # per GPU: activations, CUDA graphs and the allocator's slack


@dataclass(frozen=True)
class Candidate:
    # collocated-N or disagg-XpYd as the sweep names placements, at the smallest TP; other
    # TPs named after: collocated-N-tpT, disagg-XpYd-tpA-B (prefill's A, decode's B)
    name: str
    kind: str  # collocated | disagg
    tp: int  # collocated replicas', or the prefill tier's
    replicas: int = 0  # collocated
    prefill: int = 0  # disagg
    decode: int = 0
    decode_tp: int = 0  # disagg: the decode tier's TP (0: as `tp`)
    layout: str = "tp"  # collocated: tp (TP, + EP for an MoE) or dp (DP attention + EP)

    @property
    def dtp(self) -> int:
        """The decode instances' TP (collocated: the replicas')."""
        return self.decode_tp or self.tp

    @property
    def gpus(self) -> int:
        return self.tp * self.replicas if self.kind == "collocated" \
            else self.tp * self.prefill + self.dtp * self.decode

    @property
    def tp_text(self) -> str:
        if self.layout == "dp":
            return f"DP {self.tp} + EP"
        return f"TP {self.tp}" if self.tp == self.dtp else f"TP {self.tp} P, {self.dtp} D"


def kv_tokens(shape: ModelShape, g: GPU, tp: int, dtype: str = "bfloat16",
              kv_dtype: str | None = None) -> int:
    """KV capacity of one instance of `tp` GPUs: what the weights (in `dtype`) leave of the
    memory, in `kv_dtype` (default: advisor.probe.shapes.kv_dtype_for)."""
    usable = tp * (g.memory_gb * MEMORY_USE - ACTIVATIONS_GB) * 1e9
    return int((usable - shape.weight_bytes(dtype))
               / shape.kv_bytes_per_token(kv_dtype or kv_dtype_for(dtype)))


def min_tp(shape: ModelShape, g: GPU, gpus: int, dtype: str = "bfloat16") -> int:
    """The smallest power-of-two TP within `gpus` the model fits at. ValueError saying how
    much memory is missing when it fits nowhere."""
    tp = 1
    while tp <= gpus:
        usable = tp * (g.memory_gb * MEMORY_USE - ACTIVATIONS_GB) * 1e9
        if shape.weight_bytes(dtype) <= usable * (1 - MIN_KV_SHARE):
            return tp
        tp *= 2
    need = shape.weight_bytes(dtype) / (1 - MIN_KV_SHARE) / 1e9
    have = gpus * (g.memory_gb * MEMORY_USE - ACTIVATIONS_GB)
    raise ValueError(f"{shape.name} needs about {need:.0f} GB for its weights ({dtype}) and "
                     f"some KV; {gpus} x {g.name} give {have:.0f} GB usable: {need - have:.0f} "
                     "GB missing")


def candidates(shape: ModelShape, g: GPU, gpus: int, dtype: str = "bfloat16",
               per_node: int | None = None) -> list[Candidate]:
    """Every placement of `shape` on `gpus` GPUs, each once: collocated at each TP size,
    then each xPyD split at each pair of TP sizes (prefill's, decode's) using every GPU.
    An instance's TP stays within a node of `per_node` GPUs (default: all on one)."""
    node = per_node or gpus
    low = min_tp(shape, g, node, dtype)
    sizes = [low << k for k in range(gpus.bit_length()) if low << k <= node]
    out = [Candidate(f"collocated-{gpus // t}" + (f"-tp{t}" if t != low else ""),
                     "collocated", t, replicas=gpus // t) for t in sizes]
    if shape.experts:
        out += [Candidate(f"collocated-{gpus // t}-dp{t}", "collocated", t,
                          replicas=gpus // t, layout="dp") for t in sizes if t > 1]
    for a in sizes:
        for b in sizes:
            if shape.kind == "hybrid" and a != b:
                continue
            for x in range(1, gpus // a + 1):
                y, left = divmod(gpus - x * a, b)
                if y >= 1 and not left:
                    tag = f"-tp{a}-{b}" if (a, b) != (low, low) else ""
                    out.append(Candidate(f"disagg-{x}p{y}d{tag}", "disagg", a, prefill=x,
                                         decode=y, decode_tp=b if b != a else 0))
    return out


def crossing(c: Candidate, per_node: int) -> float:
    """The share of a P/D's prefiller-decoder pairs on different nodes of `per_node` GPUs,
    its instances placed in order, prefillers first (0 for collocated)."""
    if c.kind != "disagg":
        return 0.0
    placed = place(None, list(range(c.gpus)), c.prefill, c.decode, c.tp, c.dtp)
    return sum(p[0] // per_node != d[0] // per_node for p in placed.prefill
               for d in placed.decode) / (c.prefill * c.decode)


def engine_defaults(g: GPU) -> tuple[int, int]:
    """vLLM's defaults for an online server: (max_num_batched_tokens, max_num_seqs), larger
    on GPUs of 70 GB or more."""
    return (8192, 1024) if g.memory_gb >= 70 else (2048, 256)


def system(c: Candidate, shape: ModelShape, g: GPU, kv_link: Link, dtype: str = "bfloat16",
           max_batched_tokens: int | None = None, chunked: bool = True,
           kv_dtype: str | None = None, prefill_batched_tokens: int | None = None) -> System:
    """Candidate `c` as a simulated system (roofline step times on `g`), weights in
    `dtype`, KV in `kv_dtype` (default: kv_dtype_for): what P/D moves is in the KV's. Each
    step's token budget `max_batched_tokens` (default: vLLM's for `g`), a P/D prefill
    tier's `prefill_batched_tokens` where given (deployments often give it its own)."""
    tokens, seqs = engine_defaults(g)
    kv = kv_dtype or kv_dtype_for(dtype)

    def engine(tp: int, layout: str = "tp", budget: int | None = None) -> EngineSpec:
        return EngineSpec(step_model(shape, g, tp, dtype, kv, layout),
                          kv_tokens(shape, g, tp, dtype, kv),
                          budget or max_batched_tokens or tokens, seqs, chunked)

    if c.kind == "collocated":
        return System(decode=(engine(c.tp, c.layout),) * c.replicas)
    return System(decode=(engine(c.dtp),) * c.decode,
                  prefill=(engine(c.tp, budget=prefill_batched_tokens),) * c.prefill,
                  link=kv_link, kv_bytes=lambda t: shape.kv_bytes(t, kv))


def step_model(shape: ModelShape, g: GPU, tp: int, dtype: str, kv: str,
               layout: str = "tp") -> StepModel:
    """One instance's step times: measured kernels where aiconfigurator-core has tables for
    `g` (or for the GPU it is priced from) and `shape`'s layers, else the roofline."""
    fabric = tp_fabric(g, tp)
    system = g.tables or (g.slowdown.reference if g.slowdown else None)
    found = kernels.tables(system) if system and kernels.covers(shape) else None
    if found is None:
        return RooflineStep(shape, g, tp, fabric, dtype, kv, layout)
    comm = 1.0
    if g.slowdown is not None and fabric is not None:  # the reference's NVLink 4 against it
        comm = max(1.0, LINKS["nvlink"].gbps / fabric.gbps)
    return kernels.TableStep(shape, found, tp, dtype, kv, layout,
                             fabric.gbps if fabric else 0.0, g.slowdown, comm)
