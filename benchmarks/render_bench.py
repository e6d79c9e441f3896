"""Front-end CPU: render-server throughput, and streaming derender cost per chunk as outputs grow.

1. Render over HTTP: a render server pinned to one core, driven by a client on the other
   core(s) with requests in flight, each a distinct ~9k-token chat prompt: requests/s, and
   the server's CPU over the run (<= 1 core). The guide's vLLM render server: 73 req/s on a
   little over one core; goal >= 150. The bundled tokenizer (512 tokens) packs fewer
   characters into a token than Qwen's, so a second run uses ~36k characters, about what
   9k Qwen2.5 tokens of English span.
2. Streaming derender: CPU per chunk (one token each, reasoning and a tool call in the
   output) at 1k, 8k and 32k generated tokens, and the 32k / 1k ratio (goal <= 2; a
   replay-the-history derender grows with n).

Usage: python benchmarks/render_bench.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time

import aiohttp

from advisor.measure.client import WORDS
from advisor.measure.prom import parse_frontend, scrape_text
from engine.render.derender import StreamState, derender_chunk
from engine.render.tokenizer import TextTokenizer
from engine.serve.launch import serve_module

RENDER = "/v1/chat/completions/render"


def chat_body(tokenizer: TextTokenizer, seed: int, tokens: int = 0, chars: int = 0) -> dict:
    """A 6-message chat of random common words, of about `tokens` tokens or `chars` characters."""
    rng = random.Random(seed)
    words: list[str] = []
    while len(tokenizer.encode(" ".join(words))) < tokens or len(" ".join(words)) < chars:
        words += rng.choices(WORDS, k=500)
    n = len(words) // 6
    return {
        "model": "small",
        "max_tokens": 256,
        "messages": [
            {
                "role": "user" if i % 2 == 0 else "assistant",
                "content": " ".join(words[i * n : (i + 1) * n]),
            }
            for i in range(6)
        ],
    }


def server_cpu_s(url: str) -> float:
    return parse_frontend(scrape_text([url + "/metrics"])).process_s


async def drive(url: str, bodies: list[bytes], seconds: float, in_flight: int) -> tuple[int, int]:
    """Post bodies round-robin from `in_flight` workers for `seconds`: (done, prompt tokens)."""
    deadline, done, tokens = time.monotonic() + seconds, 0, 0
    async with aiohttp.ClientSession() as session:

        async def worker(k: int) -> None:
            nonlocal done, tokens
            while time.monotonic() < deadline:
                body = bodies[(done + k) % len(bodies)]
                async with session.post(
                    url + RENDER, data=body, headers={"Content-Type": "application/json"}
                ) as resp:
                    out = await resp.json()
                    assert resp.status == 200, out
                done, tokens = done + 1, len(out["token_ids"])

        await asyncio.gather(*(worker(k) for k in range(in_flight)))
    return done, tokens


def render_throughput(
    tokenizer: TextTokenizer, seconds: float, **size
) -> tuple[float, float, int, int]:
    """(requests/s, server cores used, prompt tokens, prompt characters) over HTTP."""
    bodies = [chat_body(tokenizer, seed, **size) for seed in range(24)]
    chars = sum(len(m["content"]) for m in bodies[0]["messages"])
    raw = [json.dumps(b).encode() for b in bodies]
    cores = sorted(os.sched_getaffinity(0))
    with serve_module("engine.serve.render_server", ["--model", "small"], cores=cores[:1]) as url:
        os.sched_setaffinity(0, cores[1:] or cores)
        asyncio.run(drive(url, raw, 1.0, 4))  # warm-up
        cpu0, t0 = server_cpu_s(url), time.monotonic()
        done, tokens = asyncio.run(drive(url, raw, seconds, 4))
        wall = time.monotonic() - t0
        used = (server_cpu_s(url) - cpu0) / wall
    os.sched_setaffinity(0, cores)
    return done / wall, used, tokens, chars


def derender_cost_us(
    tokenizer: TextTokenizer, output_ids: list[int], total: int, window: int = 500
) -> float:
    """Mean CPU microseconds per one-token chunk over the last `window` chunks of `total`."""
    ids = (output_ids * (total // len(output_ids) + 1))[:total]
    state = StreamState.start("bench")
    for t in ids[: total - window]:
        _, state = derender_chunk(tokenizer, state, "bench", [t], finished=False)
        state = StreamState.from_json(json.loads(json.dumps(state.to_json())))
    start = time.process_time()
    for t in ids[total - window :]:
        _, state = derender_chunk(tokenizer, state, "bench", [t], finished=False)
        state = StreamState.from_json(json.loads(json.dumps(state.to_json())))
    return (time.process_time() - start) / window * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seconds", type=float, default=5.0, help="length of the render run")
    args = ap.parse_args()
    tok = TextTokenizer.load()
    for size in ({"tokens": 9000}, {"chars": 36000}):
        rate, used, n, chars = render_throughput(tok, args.seconds, **size)
        print(
            f"render over HTTP: {n}-token chat prompts ({chars} characters), {rate:.0f} req/s "
            f"with the server on one core ({used:.2f} cores busy): {rate / 150:.2f} of the "
            f"150 req/s goal (vLLM per the guide: 73)"
        )
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:1])
    text = (
        "<think>"
        + "let me think about this " * 20
        + "</think>"
        + "the answer is " * 10
        + '<tool_call>{"name": "lookup", "arguments": {"q": "x"}}</tool_call>'
    )
    out_ids = tok.encode(text)
    costs = {n: derender_cost_us(tok, out_ids, n) for n in (1000, 8000, 32000)}
    print(
        "streaming derender, CPU per one-token chunk: "
        + ", ".join(f"{n // 1000}k tokens {c:.1f} us" for n, c in costs.items())
        + f"; 32k / 1k = {costs[32000] / costs[1000]:.2f} (goal <= 2)"
    )


if __name__ == "__main__":
    main()
