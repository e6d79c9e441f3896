"""Step times priced from measured kernels: aiconfigurator-core's tables of vLLM's GEMMs,
fused MoE, attention and custom all-reduce, per GPU and vLLM version (read from the
installed package's files, never copied here).

`TableStep` sums one step's kernels layer by layer: the linear layers and the MoE at the
step's token count (interpolated between the tables' counts), attention by what it reads
and computes, the TP ranks' all-reduces; MoE at DP attention + EP adds an all-to-all priced
over the fabric. A GPU without tables (advisor.plan.hardware.GPU.tables) is priced from a
covered one's tables, each kernel slowed as its class (compute- or bandwidth-bound on
that GPU) is (advisor.plan.hardware.Slowdown), or by the roofline."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from advisor.plan.hardware import GPUS, Slowdown
from advisor.plan.steptime import STEP_OVERHEAD_MS, Step, Work
from advisor.probe.shapes import ModelShape

PACKAGE = "aiconfigurator_core"
# token counts a step's linear and MoE kernels are priced at (the MoE tables' own grid)
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
DISTRIBUTION = "power_law_1.01"  # aiconfigurator's default expert load: skewed routing


@dataclass(frozen=True)
class Tables:
    """One GPU's vLLM kernel tables (aiconfigurator-core's), each the newest version."""

    system: str
    versions: dict[str, str]
    gemm: Any  # pandas DataFrames (pandas costs ~0.5 s to import: loaded on first use)
    moe: Any
    context: Any
    generation: Any
    allreduce: Any

    @property
    def source(self) -> str:
        v = sorted(set(self.versions.values()))
        return f"aiconfigurator-core {_core_version()} tables: {self.system}, vLLM {'/'.join(v)}"


def _core_version() -> str:
    from importlib.metadata import version

    return version("aiconfigurator-core")


def data_dir(system: str) -> Path | None:
    """Where aiconfigurator-core keeps `system`'s measured tables; None when the package or
    the system is missing."""
    try:
        root = resources.files(PACKAGE) / "systems" / "data" / system
    except ModuleNotFoundError:
        return None
    return Path(str(root)) if root.is_dir() else None


def _newest(root: Path, op: str, name: str) -> tuple[Path, str] | None:
    """The newest vLLM version's file `name` of op `op`, with its version."""
    d = root / op / "vllm"
    if not d.is_dir():
        return None
    found = [(tuple(int(p) for p in v.name.split(".") if p.isdigit()), v) for v in d.iterdir()
             if (v / name).is_file()]
    if not found:
        return None
    _, v = max(found)
    return v / name, v.name


@cache
def tables(system: str) -> Tables | None:
    """`system`'s vLLM tables (GEMM, MoE, attention, all-reduce), or None where any is
    missing."""
    import pandas as pd

    root = data_dir(system)
    if root is None:
        return None
    want = {"gemm": ("gemm", "gemm_perf.parquet"), "moe": ("moe", "moe_perf.parquet"),
            "context": ("attention", "context_attention_perf.parquet"),
            "generation": ("attention", "generation_attention_perf.parquet"),
            "allreduce": ("comm", "custom_allreduce_perf.parquet")}
    frames, versions = {}, {}
    for key, (op, name) in want.items():
        hit = _newest(root, op, name)
        if hit is None:
            return None
        frames[key] = pd.read_parquet(hit[0])
        versions[key] = hit[1]
    return Tables(system, versions, **frames)


def _log_interp(x: float, xs: Sequence[float], ys: Sequence[float],
                lx: list[float] | None = None) -> float:
    """ys at x, linear in log x between the points, the end slope past the ends (latency
    per token beyond the table's largest count: proportional); `lx`: log of each of xs,
    where the caller keeps them."""
    if x >= xs[-1]:
        return float(ys[-1]) * x / xs[-1]
    if x <= xs[0]:
        return float(ys[0])
    i = bisect.bisect_right(xs, x) - 1
    lo, hi = (lx[i], lx[i + 1]) if lx else (math.log(xs[i]), math.log(xs[i + 1]))
    f = (math.log(x) - lo) / (hi - lo)
    return float(ys[i] + f * (ys[i + 1] - ys[i]))


LOG_TOKENS = [math.log(t) for t in TOKENS]


def _nearest(values: Sequence[float], want: float) -> float:
    return min(values, key=lambda v: abs(math.log(v) - math.log(max(want, 1))))


def gemm_ms(t: Tables, m: int, n: int, k: int, dtype: str) -> float:
    """One GEMM of m x k by k x n: the table's fastest kernel at the nearest measured
    (n, k), scaled by n x k, interpolated in m."""
    nn, kk, ms, lat = _gemm_curve(t.system, dtype, n, k)
    return _log_interp(m, ms, lat) * (n * k) / (nn * kk)


@cache
def _gemm_curve(system: str, dtype: str, n: int, k: int) -> tuple[int, int, list[Any], list[Any]]:
    """(the nearest measured n and k, their m, their fastest latency at each m)."""
    t = tables(system)
    assert t is not None
    g = t.gemm[t.gemm.gemm_dtype == dtype]
    if g.empty:
        raise LookupError(f"{t.system}: no {dtype} GEMMs in its tables")
    nn, kk = _nearest(g.n.unique(), n), _nearest(g.k.unique(), k)
    rows = g[(g.n == nn) & (g.k == kk)].groupby("m").latency.min().sort_index()
    return int(nn), int(kk), rows.index.to_list(), rows.to_list()


def moe_ms(t: Tables, tokens: int, shape: ModelShape, ep: int, dtype: str) -> float:
    """One MoE layer's experts for `tokens` tokens with experts spread over `ep` ranks: the
    fastest kernel at the nearest measured (hidden, intermediate), experts and top-k
    matched where measured, scaled by hidden x intermediate."""
    m = t.moe[t.moe.moe_dtype == dtype]
    if m.empty:
        raise LookupError(f"{t.system}: no {dtype} MoE kernels in its tables")
    m = m[m.distribution == DISTRIBUTION] if (m.distribution == DISTRIBUTION).any() else m
    for col, want in (("num_experts", shape.experts), ("topk", shape.experts_per_token)):
        m = m[m[col] == _nearest(m[col].unique(), want)]
    ep_rows = m[(m.moe_tp_size == 1)]
    ep_near = _nearest(ep_rows.moe_ep_size.unique(), ep)
    m = ep_rows[ep_rows.moe_ep_size == ep_near]
    h = _nearest(m.hidden_size.unique(), shape.hidden)
    i = _nearest(m[m.hidden_size == h].inter_size.unique(), shape.intermediate)
    rows = m[(m.hidden_size == h) & (m.inter_size == i)].groupby("num_tokens").latency.min()
    scale = shape.hidden * shape.intermediate / (h * i) * ep_near / ep
    return _log_interp(tokens, rows.index.to_list(), rows.to_list()) * scale


def allreduce_ms(t: Tables, elements: int, ranks: int) -> float:
    """vLLM's custom all-reduce (graph-captured) of `elements` bf16 values over `ranks`."""
    a = t.allreduce[(t.allreduce.backend == "vllm_graph")] if "backend" in t.allreduce \
        else t.allreduce
    a = a[a.num_gpus == _nearest(a.num_gpus.unique(), ranks)]
    rows = a.groupby("message_size").latency.min()
    return _log_interp(max(elements, 1), rows.index.to_list(), rows.to_list())


@dataclass(frozen=True)
class Attention:
    """Per layer: a fixed cost for each kind of work in the step, ms per prefill pair
    (compute) and ms per KV token a decode reads (memory)."""

    prefill_fixed: float
    per_pair: float
    decode_fixed: float
    per_kv_token: float


def attention(t: Tables, shape: ModelShape, heads_per_rank: int, kv_heads_per_rank: int,
              kv_dtype: str) -> Attention:
    """From the context table (one sequence, its longest measured prompt: the compute
    slope) and the generation table (its largest batch x context: the read slope)."""
    kv = "fp8" if kv_dtype == "fp8" else "bfloat16"

    def pick(frame: Any) -> tuple[Any, float]:
        f = frame[(frame.kv_cache_dtype == kv) & (frame.window_size == 0)]
        for col, want in (("num_heads", heads_per_rank), ("num_key_value_heads",
                                                          kv_heads_per_rank),
                          ("head_dim", shape.head_dim)):
            f = f[f[col] == _nearest(f[col].unique(), want)]
        scale = heads_per_rank * shape.head_dim / (f.num_heads.iloc[0] * f.head_dim.iloc[0])
        return f, scale

    c, cs = pick(t.context)
    c = c[c.batch_size == 1].groupby("isl").latency.min().sort_index()
    top = int(c.index[-1])
    g, gs = pick(t.generation)
    g = g.groupby(["batch_size", "step"]).latency.min()
    (b, s), lat = max(g.items(), key=lambda kv_: kv_[0][0] * kv_[0][1])
    return Attention(float(c.iloc[0]) * cs, float(c.iloc[-1]) * cs / (top * (top + 1) / 2),
                     float(g.min()) * gs, float(lat) * gs / (b * s))


def _weights_dtype(t: Tables, weights: str, kind: str) -> str:
    """The tables' dtype for weights in `weights`: fp8 as block-scaled where measured (the
    published FP8 checkpoints), 4-bit experts as MXFP4 or int4 weight-only."""
    frame = t.gemm.gemm_dtype if kind == "gemm" else t.moe.moe_dtype
    have = set(frame.unique())
    wants = {"fp8": ("fp8_block", "fp8"), "int4": ("w4a16_mxfp4", "int4_wo", "bfloat16"),
             }.get(weights, ("bfloat16",))
    if kind == "gemm" and weights == "int4":
        wants = ("bfloat16",)  # W4A16 models keep attention in bf16
    return next((w for w in wants if w in have), "bfloat16")


def covers(shape: ModelShape) -> bool:
    """Whether the tables can price `shape`: grouped-query attention with its MLP sizes
    known (MLA and hybrid SSM layers go to the roofline)."""
    return shape.kind == "gqa" and shape.intermediate > 0


@dataclass(frozen=True)
class TableStep:
    """A step's time from measured kernels. `layout`: tp (tensor parallel; an MoE's experts
    spread over the same ranks, expert parallel at data-parallel size 1, its outputs
    all-reduced as vLLM runs TP + EP) or dp (data-parallel attention, each rank its own
    requests, experts spread over every rank: tokens all-to-all to their experts' ranks
    and back)."""

    shape: ModelShape
    tables: Tables
    tp: int = 1
    dtype: str = "bfloat16"
    kv_dtype: str = "bfloat16"
    layout: str = "tp"
    fabric_gbps: float = 0.0  # per rank, one direction: the all-to-all's rate
    slow: Slowdown | None = None
    comm_scale: float = 1.0  # all-reduce times the reference's (a slower fabric)

    @property
    def source(self) -> str:
        base = self.tables.source
        if self.slow is not None:
            base += (f", each kernel {self.slow.compute:.2f}x where compute-bound and "
                     f"{self.slow.memory:.2f}x where bandwidth-bound there, by "
                     f"{self.slow.source}")
        return f"{base}; {STEP_OVERHEAD_MS} ms per step"

    def _prices(self) -> tuple[list[float], Attention]:
        """(ms of every layer's linear, MoE and all-reduce work at each of TOKENS, the
        attention coefficients), built once for every step model alike."""
        return _priced(self)

    def build(self) -> tuple[list[float], Attention]:
        """What `_prices` keeps: priced from the tables (~0.5 s: pandas lookups)."""
        sh, t = self.shape, self.tables
        ranks = self.tp
        attn_tp = 1 if self.layout == "dp" else ranks
        heads, kvh = max(1, sh.heads // attn_tp), max(1, sh.kv_heads // attn_tp)
        gd, md = _weights_dtype(t, self.dtype, "gemm"), _weights_dtype(t, self.dtype, "moe")
        ridge = self._ridge_rows()
        out = []
        for n in TOKENS:
            per_rank = max(1, n // ranks) if self.layout == "dp" else n
            ms = (gemm_ms(t, per_rank, (heads + 2 * kvh) * sh.head_dim, sh.hidden, gd)
                  + gemm_ms(t, per_rank, sh.hidden, heads * sh.head_dim, gd)) \
                * self._x(per_rank > ridge)
            if sh.experts:  # rows per expert: each token's k of E
                rows = n * sh.experts_per_token / sh.experts
                ms += moe_ms(t, n, sh, ranks, md) * self._x(rows > ridge)
            else:
                ms += (gemm_ms(t, n, 2 * sh.intermediate // ranks, sh.hidden, gd)
                       + gemm_ms(t, n, sh.hidden, sh.intermediate // ranks, gd)) \
                    * self._x(n > ridge)
            if ranks > 1 and self.layout == "tp":  # attention's and the MLP's
                ms += 2 * allreduce_ms(t, n * sh.hidden, ranks) * self.comm_scale
            elif ranks > 1:  # dispatch and combine: each token's hidden state to k ranks
                sent = per_rank * sh.experts_per_token * sh.hidden * 2 * (ranks - 1) / ranks
                ms += 2 * 1000 * sent / (self.fabric_gbps * 1e9)
            out.append(ms * sh.layers)
        a = attention(t, sh, heads, kvh, self.kv_dtype)
        prefill, decode = self._x(True) * sh.kv_layers, self._x(False) * sh.kv_layers
        a = Attention(a.prefill_fixed * prefill, a.per_pair * prefill,
                      a.decode_fixed * decode, a.per_kv_token * decode)
        if self.layout == "dp":  # ranks attend to their own requests side by side
            a = Attention(a.prefill_fixed, a.per_pair / ranks, a.decode_fixed,
                          a.per_kv_token / ranks)
        return out, a

    def _key(self) -> tuple[Any, ...]:  # the tables (data frames) by their system's name
        return (self.shape, self.tables.system, self.tp, self.dtype, self.kv_dtype,
                self.layout, self.fabric_gbps, self.slow, self.comm_scale)

    def __hash__(self) -> int:
        return hash(self._key())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TableStep) and self._key() == other._key()

    def _x(self, compute_bound: bool) -> float:
        """A kernel's time on this GPU against the tables' GPU."""
        if self.slow is None:
            return 1.0
        return self.slow.compute if compute_bound else self.slow.memory

    def _ridge_rows(self) -> float:
        """Rows above which a GEMM on the tables' GPU is compute-bound: its FLOP/s over
        its bandwidth, per byte of a weight, halved (2 FLOPs per weight per row)."""
        if self.slow is None:
            return math.inf
        ref = next(g for g in GPUS.values() if g.tables == self.slow.reference)
        per_weight = 1.0 if self.dtype == "fp8" else 2.0
        return ref.tflops(self.dtype) * 1e12 * per_weight / (2 * ref.hbm_gbps * 1e9)

    def ms(self, s: Step) -> Work:
        linear, a = self._prices()
        tokens = s.decodes + s.prefill_tokens
        fixed = (a.prefill_fixed if s.prefill_tokens else 0.0) \
            + (a.decode_fixed if s.decodes else 0.0)
        lin = _log_interp(tokens, TOKENS, linear, LOG_TOKENS) if tokens else 0.0
        return STEP_OVERHEAD_MS + lin + fixed + a.per_pair * s.pairs \
            + a.per_kv_token * s.kv_read_tokens


@cache
def _priced(step: TableStep) -> tuple[list[float], Attention]:
    return step.build()
