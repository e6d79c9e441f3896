"""Front-end CPU: chat render throughput, and streaming derender cost per chunk as outputs grow.

1. Render (chat template + tokenization) of a ~9k-token chat prompt, in requests/s on one
   core (the guide's vLLM render server: 73 req/s on a little over one core; goal >= 150).
   This times the render function itself; HTTP is not included yet.
2. Streaming derender: CPU per chunk (one token each, reasoning and a tool call in the
   output) at 1k, 8k and 32k generated tokens, and the 32k / 1k ratio (goal <= 2; a
   replay-the-history derender grows with n).

Usage: python benchmarks/render_bench.py
"""

from __future__ import annotations

import json
import os
import time

from advisor.client import WORDS
from engine.render.derender import StreamState, derender_chunk
from engine.tokenizer import TextTokenizer


def chat_prompt(tokenizer: TextTokenizer, target_tokens: int) -> list[dict]:
    words, messages = [], []
    while len(tokenizer.encode(" ".join(words))) < target_tokens:
        words += WORDS
    text = " ".join(words)
    for i in range(6):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text[i::6]})
    return messages


def render_rate(tokenizer: TextTokenizer, messages: list[dict], seconds: float = 3.0) -> tuple[float, int]:
    n, start = 0, time.process_time()
    while time.process_time() - start < seconds:
        ids = tokenizer.encode(tokenizer.render_chat(messages))
        n += 1
    return n / (time.process_time() - start), len(ids)


def derender_cost_us(tokenizer: TextTokenizer, output_ids: list[int], total: int, window: int = 500) -> float:
    """Mean CPU microseconds per one-token chunk over the last `window` chunks of `total`."""
    ids = (output_ids * (total // len(output_ids) + 1))[:total]
    state = StreamState.start("bench")
    for t in ids[:total - window]:
        _, state = derender_chunk(tokenizer, state, "bench", [t], finished=False)
        state = StreamState.from_json(json.loads(json.dumps(state.to_json())))
    start = time.process_time()
    for t in ids[total - window:]:
        _, state = derender_chunk(tokenizer, state, "bench", [t], finished=False)
        state = StreamState.from_json(json.loads(json.dumps(state.to_json())))
    return (time.process_time() - start) / window * 1e6


def main() -> None:
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:1])
    tok = TextTokenizer.load()
    rate, n = render_rate(tok, chat_prompt(tok, 9000))
    print(f"render: {n}-token chat prompt, {rate:.0f} req/s on one core "
          f"({rate / 150:.2f} of the 150 req/s goal; vLLM per the guide: 73)")
    text = ("<think>" + "let me think about this " * 20 + "</think>" + "the answer is " * 10
            + '<tool_call>{"name": "lookup", "arguments": {"q": "x"}}</tool_call>')
    out_ids = tok.encode(text)
    costs = {n: derender_cost_us(tok, out_ids, n) for n in (1000, 8000, 32000)}
    print("streaming derender, CPU per one-token chunk: " +
          ", ".join(f"{n // 1000}k tokens {c:.1f} us" for n, c in costs.items()) +
          f"; 32k / 1k = {costs[32000] / costs[1000]:.2f} (goal <= 2)")


if __name__ == "__main__":
    main()
