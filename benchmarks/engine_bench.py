"""Engine throughput against this machine's own limits, measured in one run.

Prints, for a preset (default `small`) in the `auto` dtype (bfloat16 where it is fast
here, else float32) on one thread:
- prefill of a 2048-token prompt as a fraction of the time the same GEMMs take
  alone (the projections at their shapes, plus attention's QK^T and PV as
  batched matmuls at the causal half of their FLOPs); goal >= 0.7;
- decode tokens/s at batch 1, 8 and 32, each against its roofline measured in the same
  run: batch 1 against reading the weights and the KV once per step at this machine's
  single-thread read bandwidth; batch 8 and 32 against the slower of that and the GEMM
  time of the step's projections and LM head at their batch; goal >= 0.7 each.

The host's speed drifts by tens of percent within a minute, so each figure and its limit
are measured in alternating rounds (ours, then the limit, ROUNDS times) and compared best
against best, so that a slow spell is less likely to fall on one side of a ratio only.

Usage: python benchmarks/engine_bench.py [--model small] [--tokens 2048] [--threads 1] [--dtype]
"""

from __future__ import annotations

import argparse
import random
import time

import torch
from timing import best_of

from engine import LLM, SamplingParams


def gemm_baseline_s(llm: LLM, n: int, dtype: torch.dtype) -> tuple[float, float]:
    """Seconds for the prefill's projection GEMMs alone, and for attention's matmuls alone."""
    model = llm.engine.runner.model
    cfg = llm.config
    x_cache: dict[int, torch.Tensor] = {}
    proj = 0.0
    for layer in model.layers:
        for lin in (layer.self_attn.qkv_proj, layer.self_attn.o_proj,
                    layer.mlp.gate_up_proj, layer.mlp.down_proj):
            w = lin.weight
            x = x_cache.setdefault(w.shape[1], torch.randn(n, w.shape[1], dtype=dtype))
            proj += best_of(lambda x=x, w=w: torch.nn.functional.linear(x, w))
    h, hd = cfg.num_attention_heads, cfg.head_dim
    q = torch.randn(h, n, hd, dtype=dtype)
    k = torch.randn(h, hd, n, dtype=dtype)
    scores = torch.randn(h, n, n, dtype=dtype)
    v = torch.randn(h, n, hd, dtype=dtype)
    # NOTE: causal attention needs half of each full matmul.
    attn = 0.5 * (best_of(lambda: q @ k) + best_of(lambda: scores @ v)) * cfg.num_hidden_layers
    return proj, attn


def read_gbps(nbytes: int = 256 << 20) -> float:
    """Single-thread streaming read bandwidth (GB/s): summing a buffer larger than the caches."""
    x = torch.ones(nbytes // 4, dtype=torch.float32)
    return nbytes / best_of(lambda: x.sum()) / 1e9


def weight_bytes(llm: LLM) -> int:
    """Bytes a decode step reads of the weights: every parameter once (tied ones once)."""
    return sum(p.numel() * p.element_size() for p in llm.engine.runner.model.parameters())


def step_gemm_s(llm: LLM, batch: int, dtype: torch.dtype) -> float:
    """The GEMM time of one decode step at `batch`: the projections and the LM head."""
    proj, _ = gemm_baseline_s(llm, batch, dtype)
    cfg = llm.config
    x = torch.randn(batch, cfg.hidden_size, dtype=dtype)
    head = torch.randn(cfg.vocab_size, cfg.hidden_size, dtype=dtype)
    return proj + best_of(lambda: torch.nn.functional.linear(x, head))


ROUNDS = 5  # alternating measurements of each figure and of its limit
PROMPT, WINDOW = 128, 12  # decode: ROUNDS windows of WINDOW steps after PROMPT-token prompts


def prefill_rounds(llm: LLM, n: int, dtype: torch.dtype) -> tuple[float, float, float]:
    """Best seconds of a prefill of `n` tokens, and of its GEMMs alone (projections,
    attention matmuls), over alternating rounds."""
    rng = random.Random(0)
    vocab = llm.config.vocab_size
    params = SamplingParams(max_tokens=1, temperature=0.0)
    prompts = [[rng.randrange(3, vocab) for _ in range(n)] for _ in range(ROUNDS + 1)]
    llm.generate([prompts[-1]], params)  # warm-up
    pre, proj, attn = [], [], []
    for prompt in prompts[:ROUNDS]:
        t = time.perf_counter()
        llm.generate([prompt], params)
        pre.append(time.perf_counter() - t)
        p, a = gemm_baseline_s(llm, n, dtype)
        proj.append(p)
        attn.append(a)
    return min(pre), min(proj), min(attn)


def decode_rounds(llm: LLM, batch: int, limit_s) -> tuple[float, tuple[float, str]]:
    """Best tokens/s of `batch` running requests over a WINDOW-step window, and the
    lowest of `limit_s(kv_tokens)` ((seconds per step, what bounds it)) measured between
    the windows."""
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
    rates, limits = [], []
    for r in range(ROUNDS):
        t = time.perf_counter()
        tokens = sum(len(eng.step()) for _ in range(WINDOW))
        rates.append(tokens / (time.perf_counter() - t))
        limits.append(limit_s(batch * (PROMPT + (r + 0.5) * WINDOW)))
    while eng.has_unfinished():
        eng.step()
    return max(rates), min(limits)


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
    pre, proj, attn = prefill_rounds(llm, args.tokens, dtype)
    print(f"model {args.model}, {ran}, {args.threads} thread(s); best of {ROUNDS} alternating "
          "rounds each")
    print(f"prefill {args.tokens} tokens: {pre * 1000:.0f} ms ({args.tokens / pre:.0f} tok/s)")
    print(
        f"  same GEMMs alone: projections {proj * 1000:.0f} ms + attention matmuls "
        f"{attn * 1000:.0f} ms"
    )
    print(
        f"  prefill vs GEMM limit: {(proj + attn) / pre:.2f} (goal >= 0.70); "
        f"projections only: {proj / pre:.2f}"
    )
    weights = weight_bytes(llm)
    kv_per_token = llm.engine.runner.layout.bytes_per_token
    bws: list[float] = []

    def limit_s(batch: int, kv_tokens: float) -> tuple[float, str]:
        """One step's limit: reading the weights and KV once, or (batch > 1) the step's
        GEMMs, whichever is slower."""
        bws.append(read_gbps())
        read = (weights + kv_tokens * kv_per_token) / (bws[-1] * 1e9)
        gemm = step_gemm_s(llm, batch, dtype) if batch > 1 else 0.0
        return (read, "weight + KV read") if read >= gemm else (gemm, "GEMMs")

    for b in (1, 8, 32):
        rate, (step_s, bound) = decode_rounds(llm, b, lambda kv, b=b: limit_s(b, kv))
        if b == 1:
            print(f"read bandwidth (one thread): {max(bws):.1f} GB/s; weights "
                  f"{weights / 1e6:.0f} MB")
        limit = b / step_s
        print(f"decode batch {b:>2}: {rate:7.1f} tok/s = {rate / limit:.2f} of its limit "
              f"({limit:.0f} tok/s, {bound}) (goal >= 0.70)")


if __name__ == "__main__":
    main()
