"""Engine throughput against this machine's own limits, measured in one run.

Prints, for a preset (default `small`) in the `auto` dtype (bfloat16 where it is fast
here, else float32) on one thread:
- prefill of a 2048-token prompt as a fraction of the time the same GEMMs take
  alone (the projections at their shapes in layer order, plus attention's QK^T and PV
  as batched matmuls at the causal half of their FLOPs); goal >= 0.7;
- decode tokens/s at batch 1, 8 and 32, each against its roofline measured in the same
  run: reading the KV once at this machine's single-thread read bandwidth (summing a
  buffer of the step's own bytes again and again), plus, at
  batch 1, reading the weights once, and at batch 8 and 32 the slower of that and the
  GEMM time of the step's projections and LM head at their batch, run in a step's order
  (so the weights come from wherever a step finds them) with the faster of torch's
  kernel and the packed one (`engine.model.linear`); goal >= 0.7 each. Batch 8 and 32
  also print the step against those GEMMs alone. At batch 1 it also
  prints how near those GEMVs alone come to the read limit, and the step to them: which
  of the kernels and the engine's own work stands between the step and its limit.

The host's speed drifts by tens of percent within a minute, so each figure and its limit
are measured in alternating rounds (ours, then the limit at once, ROUNDS times): each
round gives a ratio of two timings made in the same spell, and the figure is the median
of those ratios (their range beside it).

Usage: python benchmarks/engine_bench.py [--model small] [--tokens 2048] [--threads 1] [--dtype]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

import torch
from timing import best_of

from engine import SamplingParams
from engine.llm import LLM
from engine.model.linear import linear


def timed(fn: Callable[[], object], repeats: int = 1) -> float:
    """Seconds per call of fn() over `repeats` calls in a row."""
    t = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t) / repeats


def projections(llm: LLM, rows: int, dtype: torch.dtype, head: bool):
    """(input [rows, in], weight, packed weight or None) of every projection in a step's
    order, and the LM head's last when `head`."""
    model = llm.engine.runner.model
    inputs: dict[int, torch.Tensor] = {}
    weights = [(lin.weight, lin.packed) for layer in model.layers
               for lin in (layer.self_attn.qkv_proj, layer.self_attn.o_proj,
                           layer.mlp.gate_up_proj, layer.mlp.down_proj)]
    if head:
        lm = model.lm_head
        weights.append((model._head, model._head_packed) if lm is None
                       else (lm.weight, lm.packed))
    return [(inputs.setdefault(w.shape[1], torch.randn(rows, w.shape[1], dtype=dtype)), w, p)
            for w, p in weights]


def gemm_steps(llm: LLM, rows: int, dtype: torch.dtype, head: bool) -> list[Callable[[], None]]:
    """One function per kernel (torch's; the packed one where the weights have it) that
    runs a step's projections at `rows` rows in order."""
    items = projections(llm, rows, dtype, head)

    def run(packed: bool) -> None:
        for x, w, p in items:
            linear(x, w, None, p if packed else None)
    kinds = [False] + ([True] if items[0][2] is not None else [])
    return [lambda packed=packed: run(packed) for packed in kinds]


def attention_matmuls(llm: LLM, n: int, dtype: torch.dtype) -> Callable[[], None]:
    """A function that runs every layer's QK^T and PV of an `n`-token prompt as full
    batched matmuls."""
    cfg = llm.config
    h, hd = cfg.num_attention_heads, cfg.head_dim
    q = torch.randn(h, n, hd, dtype=dtype)
    k = torch.randn(h, hd, n, dtype=dtype)
    scores = torch.randn(h, n, n, dtype=dtype)
    v = torch.randn(h, n, hd, dtype=dtype)

    def run() -> None:
        for _ in range(cfg.num_hidden_layers):
            torch.matmul(q, k)  # [h, n, n]
            torch.matmul(scores, v)  # [h, n, hd]
    return run


def read_gbps(nbytes: int) -> float:
    """Single-thread streaming read bandwidth (GB/s): summing a buffer of `nbytes` again and
    again, as a decode step reads the same weights every step.

    NOTE: of the step's own size, not a fixed size meant to outgrow the caches: a 256 MB
    buffer read at 16.7-17 GB/s on a Xeon with a 480 MiB L3 (model 167, 2026-12-02) while
    `small`'s 132 MB of GEMVs streamed at 1.05-1.10x that, from wherever a step finds its
    weights; a limit that the kernels alone beat is no limit."""
    x = torch.ones(nbytes // 4, dtype=torch.float32)
    return nbytes / best_of(x.sum) / 1e9


def weight_bytes(llm: LLM) -> int:
    """Bytes a decode step reads of the weights: every parameter once (tied ones once)."""
    return sum(p.numel() * p.element_size() for p in llm.engine.runner.model.parameters())


ROUNDS = 5  # alternating measurements of each figure and of its limit
PROMPT, WINDOW = 128, 12  # decode: ROUNDS windows of WINDOW steps after PROMPT-token prompts


def prefill_rounds(llm: LLM, n: int, dtype: torch.dtype) -> list[tuple[float, float, float]]:
    """Per round: seconds of a prefill of `n` tokens, then of its GEMMs alone
    (projections, attention matmuls at half their full time: causal)."""
    rng = random.Random(0)
    vocab = llm.config.vocab_size
    params = SamplingParams(max_tokens=1, temperature=0.0)
    prompts = [[rng.randrange(3, vocab) for _ in range(n)] for _ in range(ROUNDS + 1)]
    proj = gemm_steps(llm, n, dtype, head=False)[0]  # prefill-sized: torch's kernel
    attn = attention_matmuls(llm, n, dtype)
    llm.generate([prompts[-1]], params)  # warm-up
    proj()
    attn()
    rounds = []
    for prompt in prompts[:ROUNDS]:
        pre = timed(lambda prompt=prompt: llm.generate([prompt], params))
        rounds.append((pre, timed(proj), 0.5 * timed(attn)))
    return rounds


def decode_rounds(llm: LLM, batch: int, limit_s) -> list[tuple[float, float, str, float]]:
    """Per round: seconds per step of `batch` running requests over a WINDOW-step
    window, then `limit_s(kv_tokens)` (seconds per step, what bounds it, the GEMMs' own
    seconds)."""
    rng = random.Random(batch)
    vocab = llm.config.vocab_size
    eng = llm.engine
    steps = ROUNDS * WINDOW
    params = SamplingParams(max_tokens=steps + 2, temperature=0.0, ignore_eos=True)
    for _ in range(batch):
        eng.add_request([rng.randrange(3, vocab) for _ in range(PROMPT)], params)
    while any(r.num_computed_tokens < len(r.prompt_token_ids) for r in eng.requests.values()):
        eng.step()  # prefill everything first; time decode steps only
    eng.step()
    rounds = []
    for r in range(ROUNDS):
        step_s = timed(eng.step, WINDOW)
        rounds.append((step_s, *limit_s(batch * (PROMPT + (r + 0.5) * WINDOW))))
    while eng.has_unfinished():
        eng.step()
    return rounds


def spread(ratios: list[float]) -> str:
    """The median of per-round ratios, with their range."""
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default="small")
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", default="auto", help="auto: bfloat16 where it is fast here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    llm = LLM(
        model=args.model,
        dtype=args.dtype,
        num_threads=args.threads,
        max_num_batched_tokens=max(4096, args.tokens),
        enable_prefix_caching=False,
    )
    ran = llm.engine.config.dtype
    dtype = getattr(torch, ran)
    rounds = prefill_rounds(llm, args.tokens, dtype)
    pre, proj, attn = (statistics.median(col) for col in zip(*rounds))
    print(f"model {args.model}, {ran}, {args.threads} thread(s); {ROUNDS} alternating rounds, "
          "median of the per-round ratios (range)")
    print(f"prefill {args.tokens} tokens: {pre * 1000:.0f} ms ({args.tokens / pre:.0f} tok/s)")
    print(
        f"  same GEMMs alone: projections {proj * 1000:.0f} ms + attention matmuls "
        f"{attn * 1000:.0f} ms"
    )
    print(
        f"  prefill vs GEMM limit: {spread([(p + a) / t for t, p, a in rounds])} "
        f"(goal >= 0.70); projections only: {spread([p / t for t, p, _ in rounds])}"
    )
    weights = weight_bytes(llm)
    kv_per_token = llm.engine.runner.layout.bytes_per_token
    bws: list[float] = []

    def limit_s(steps: list[Callable[[], None]], kv_tokens: float,
                batch: int) -> tuple[float, str, float]:
        """One step's limit: reading the KV once, plus reading the weights once or
        (batch > 1) the step's GEMMs with the faster kernel, whichever is slower; and
        those GEMMs' own time.

        NOTE: one thread runs the projections and decode attention one after the other,
        so the step's floor is the sum of theirs: attention's, at these sizes, is reading
        the KV (its FLOPs are a few percent of the projections'). Until 2026-12-02 the
        limit at batch 8 and 32 was the GEMMs alone, as if attention were free."""
        bws.append(read_gbps(weights + int(kv_tokens * kv_per_token)))
        kv_read = kv_tokens * kv_per_token / (bws[-1] * 1e9)
        weight_read = weights / (bws[-1] * 1e9)
        gemm = min(timed(step, WINDOW) for step in steps)
        if batch == 1 or weight_read >= gemm:
            return weight_read + kv_read, "weight + KV read", gemm
        return gemm + kv_read, "GEMMs + KV read", gemm

    for b in (1, 8, 32):
        steps = gemm_steps(llm, b, dtype, head=True)
        for step in steps:
            step()  # warm-up: oneDNN builds its kernel for this shape
        rounds = decode_rounds(llm, b, lambda kv, steps=steps, b=b: limit_s(steps, kv, b))
        if b == 1:
            print(f"read bandwidth (one thread): {statistics.median(bws):.1f} GB/s; weights "
                  f"{weights / 1e6:.0f} MB")
        step_s, limit = (statistics.median(col) for col in zip(*[r[:2] for r in rounds]))
        bounds = sorted({r[2] for r in rounds})
        print(f"decode batch {b:>2}: {b / step_s:7.1f} tok/s against {b / limit:.0f} "
              f"({' / '.join(bounds)}) = {spread([lim / s for s, lim, *_ in rounds])} "
              "of its limit (goal >= 0.70)")
        if b == 1:  # NOTE: where the kernels alone miss the read limit, so must the step
            print(f"  the step's GEMVs alone: {spread([lim / g for _, lim, _, g in rounds])} "
                  "of that limit; the step against them: "
                  f"{spread([g / s for s, _, _, g in rounds])}")
        else:
            print(f"  against its GEMMs alone (attention left out): "
                  f"{spread([g / s for s, _, _, g in rounds])}")


if __name__ == "__main__":
    main()
