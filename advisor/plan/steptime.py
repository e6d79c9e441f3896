"""How long one engine step takes: the batch's decode tokens and prefill chunks in, ms out.
`FittedStep` is fitted to a sweep's unloaded timings (advisor.sweep.calibrate);
`RooflineStep` comes from a GPU's datasheet (the slower of reading the weights and KV and
the step's FLOPs, each at a fixed efficiency). docs/design/planner.md gives both."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np

from advisor.plan.hardware import GPU
from advisor.probe.links import Link
from advisor.probe.shapes import ModelShape, kv_dtype_for
from advisor.rundata.evidence import Calibration

# one pair of efficiencies for every GPU, typical of serving engines, never fitted to a
# measurement the planner is checked against
BANDWIDTH_EFFICIENCY = 0.8
COMPUTE_EFFICIENCY = 0.6
STEP_OVERHEAD_MS = 1.5  # scheduling, sampling, launches per step (CUDA graphs on)


Work = float | np.ndarray  # one step's amount, or an array of them (a run of steps)


class Step(NamedTuple):
    """One step's work. `pairs` and `kv_read_tokens` may be arrays (a run of decode-only
    steps at once): every model's `ms` then gives an array.

    A named tuple, not a dataclass: the simulator builds one per step, and a frozen
    dataclass costs ~4x a tuple to make."""

    decodes: int = 0  # single-token queries
    prefill_tokens: int = 0
    pairs: Work = 0.0  # sum over query tokens of the context tokens each attends to
    kv_read_tokens: Work = 0.0  # context tokens whose KV the step reads


def prefill_step(tokens: int, context_before: int = 0) -> Step:
    """A chunk of `tokens` prompt tokens after `context_before` cached ones."""
    return Step(prefill_tokens=tokens, pairs=tokens * (context_before + (tokens + 1) / 2),
                kv_read_tokens=context_before + tokens)


@dataclass(frozen=True)
class FittedStep:
    prefill_base_ms: float
    prefill_ms_per_token: float
    decode_base_ms: float
    decode_ms_per_token: float
    ms_per_pair: float
    source: str
    # ms beyond the decode line for a step of 0, 1, 2, ... rows (the last holds for more;
    # empty: none), keyed by rows, decodes and prompt tokens together: every matrix product
    # has a row per query token, so 2 decodes beside a 30-token chunk run 32 rows
    row_extra_ms: tuple[float, ...] = ()

    def ms(self, s: Step) -> Work:
        base = max(self.prefill_base_ms if s.prefill_tokens else 0.0,
                   self.decode_base_ms if s.decodes else 0.0)
        extra = self.row_extra_ms
        if extra:
            base += extra[min(s.decodes + s.prefill_tokens, len(extra) - 1)]
        return (base + self.prefill_ms_per_token * s.prefill_tokens
                + self.decode_ms_per_token * s.decodes + self.ms_per_pair * s.pairs)


def fit(cal: Calibration, decode_context: float = 28.0) -> FittedStep:
    """Fit to a calibration: its unloaded TTFTs give the prefill line and the attention
    term; its decode steps (at `decode_context` tokens of context: the calibration's 16-token
    prompts, halfway through its 24 steps) give the decode line. Coefficients >= 0."""
    from scipy.optimize import nnls  # 0.5 s to import; only a calibrated plan fits

    rows = [[1.0, t, prefill_step(t).pairs] for t in cal.prompt_tokens]
    if len(rows) >= 3:
        (a, b, c), _ = nnls(np.array(rows), np.array(cal.ttft_ms, dtype=float))
    else:  # too few lengths for the attention term: the calibration's own line
        a, b, c = cal.prefill_base_ms, cal.prefill_ms_per_token, 0.0
    y = np.array(cal.step_ms, dtype=float) - c * np.array(cal.batches) * decode_context
    # the line through the smallest and largest batch, with a batch between kept as
    # an extra over it: a least-squares line would move the fixed cost a prefill step shares
    ends = [0, len(cal.batches) - 1] if len(cal.batches) > 1 else [0]
    x = np.array([[1.0, cal.batches[i]] for i in ends])
    (d, e), _ = nnls(x, np.maximum(y[ends], 0.0))
    extra: tuple[float, ...] = ()
    if len(cal.batches) > 2:
        off = y - (d + e * np.array(cal.batches))  # [batches]: 0 at both ends
        extra = (0.0, *(float(v) for v in np.interp(range(1, max(cal.batches) + 1),
                                                     cal.batches, off)))
    return FittedStep(float(a), float(b), float(d), float(e), float(c),
                      f"fitted to the calibration on {cal.placement} ({cal.dtype})", extra)


@dataclass(frozen=True)
class RooflineStep:
    shape: ModelShape
    gpu: GPU
    tp: int = 1
    fabric: Link | None = None  # between the TP ranks
    dtype: str = "bfloat16"  # the weights' precision (fp8 computes on FP8 tensor cores)
    kv_dtype: str | None = None  # the KV cache's (None: advisor.probe.shapes.kv_dtype_for)
    layout: str = "tp"  # tp, or dp: data-parallel attention with expert parallelism (MoE)

    @property
    def source(self) -> str:
        peak = "fp8" if self.dtype == "fp8" else "bf16"
        return (f"roofline: {self.gpu.name} x{self.tp} ({self.gpu.source}), "
                f"{BANDWIDTH_EFFICIENCY:.0%} of bandwidth, {COMPUTE_EFFICIENCY:.0%} of "
                f"{peak} peak, {STEP_OVERHEAD_MS} ms per step")

    @cached_property
    def _per(self) -> tuple[float, ...]:
        """(s per weight byte, s per KV token read, s per SSM state read, s per token's
        FLOPs, s per attention pair): one rank's share at the assumed efficiencies."""
        sh, d, kv = self.shape, self.dtype, self.kv_dtype or kv_dtype_for(self.dtype)
        read = self.tp * self.gpu.hbm_gbps * 1e9 * BANDWIDTH_EFFICIENCY
        flop = self.tp * self.gpu.tflops(d) * 1e12 * COMPUTE_EFFICIENCY
        # attention runs in bf16 whatever the weights (vLLM's FP8 KV is dequantized)
        pair_flop = self.tp * self.gpu.bf16_tflops * 1e12 * COMPUTE_EFFICIENCY
        return (1 / read, sh.kv_bytes_per_token(kv) / read,
                sh.state_bytes(kv) / read, 2 * sh.active_params / flop,
                sh.attention_flops_per_pair() / pair_flop)

    def ms(self, s: Step) -> Work:
        per_byte, kv, state, token, pair = self._per
        tokens = s.decodes + s.prefill_tokens
        # an MoE's step reads only the experts its tokens touch (ModelShape's
        # weight_bytes_read)
        weights = self.shape.weight_bytes_read(tokens, self.dtype) * per_byte
        # a hybrid model reads each running request's SSM state once per step too
        states = s.decodes + (1 if s.prefill_tokens else 0)
        memory_s = weights + s.kv_read_tokens * kv + states * state
        compute_s = token * tokens + pair * s.pairs
        # floats for one step (numpy's scalar maximum costs ~10x a float's max)
        slower = np.maximum(memory_s, compute_s) if isinstance(memory_s, np.ndarray) \
            else max(memory_s, compute_s)
        return STEP_OVERHEAD_MS + 1000 * (slower + self._allreduce_s(tokens))

    def _allreduce_s(self, tokens: int) -> float:
        """The ranks' exchanges per layer over the tier's fabric. TP (an MoE's experts
        spread over the same ranks at data-parallel size 1, as vLLM runs TP + EP): two
        ring all-reduces of the step's activations (attention's, the MLP's or the
        experts'). DP attention + EP: each rank attends to its own requests; an
        all-to-all sends each token's activations to its k experts' ranks and back."""
        if self.tp == 1 or self.fabric is None:
            return 0.0
        sh = self.shape
        share = (self.tp - 1) / self.tp  # of the data that leaves a rank
        latency = self.fabric.latency_ms / 1000
        rate = self.fabric.gbps * 1e9
        if self.layout == "dp" and sh.experts:
            a2a = tokens * sh.experts_per_token * sh.hidden * 2 * share / self.tp
            return sh.layers * 2 * (latency + a2a / rate)
        ring = tokens * sh.hidden * 2 * 2 * share  # bf16 activations, reduce + gather
        return sh.layers * 2 * (latency + ring / rate)
