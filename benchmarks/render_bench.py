"""Front-end CPU: render-server throughput, and streaming derender cost per chunk as outputs grow.

1. Render over HTTP: a render server pinned to one core, driven by a client on the other
   core(s) with requests in flight, each a distinct chat prompt of ~36k characters of
   English words (what ~9k Qwen2.5 tokens span): requests/s on that core, tokens/s, and
   the server's CPU over the run (<= 1 core). The guide's vLLM render server: 73 req/s on
   a little over one core; goal >= 150. Run for a preset with the realistic tokenizer
   (`qwen2.5-7b`: 32k-token BPE, scripts/make_tokenizer.py) and for `small` (512 tokens,
   ~2.5x the tokens for the same text); then `--workers N` on all N cores (the client
   shares them), against one worker (goal >= 1.7x at 2).
2. Streaming derender on the realistic tokenizer: CPU per chunk (one token each,
   reasoning and a tool call in the output) at 1k, 8k and 32k generated tokens, and the
   32k / 1k ratio (goal <= 2; a replay-the-history derender grows with n).

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
from benchmarks.timing import best_of
from engine.core.config import load_model_config
from engine.processes.launch import serve_module
from engine.render.derender import StreamState, derender_chunk
from engine.render.parsing import StreamParser
from engine.render.tokenizer import TextTokenizer

RENDER = "/v1/chat/completions/render"


def chat_body(tokenizer: TextTokenizer, seed: int, tokens: int = 0, chars: int = 0,
              model: str = "small") -> dict:
    """A 6-message chat of random common words, of about `tokens` tokens or `chars` characters."""
    rng = random.Random(seed)
    words: list[str] = []
    while len(tokenizer.encode(" ".join(words))) < tokens or len(" ".join(words)) < chars:
        words += rng.choices(WORDS, k=500)
    n = len(words) // 6
    return {
        "model": model,
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


async def drive(url: str, bodies: list[bytes], seconds: float, in_flight: int) -> int:
    """Post bodies round-robin over `in_flight` keep-alive connections for `seconds`; the
    number answered. The client shares the cores: plain HTTP/1.1 on asyncio streams, with
    each request's bytes built beforehand and its answer read, not parsed, takes less of
    them than an HTTP library (a checked answer comes from `prompt_tokens`)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    head = f"POST {RENDER} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
    requests = [(head + f"Content-Length: {len(b)}\r\n\r\n").encode() + b for b in bodies]
    deadline, done = time.monotonic() + seconds, 0

    async def worker(k: int) -> None:
        nonlocal done
        reader, writer = await asyncio.open_connection(host, int(port))
        while time.monotonic() < deadline:
            writer.write(requests[(done + k) % len(requests)])
            status = await reader.readuntil(b"\r\n")
            assert b" 200 " in status, status
            headers = (await reader.readuntil(b"\r\n\r\n")).lower()
            length = int(headers.split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            done += 1
        writer.close()

    await asyncio.gather(*(worker(k) for k in range(in_flight)))
    return done


async def prompt_tokens(url: str, body: bytes) -> int:
    """The prompt's token count in the render server's answer to `body`."""
    async with aiohttp.ClientSession() as session, session.post(url + RENDER, data=body,
                            headers={"Content-Type": "application/json"}) as resp:
        answer = await resp.read()
        assert resp.status == 200, answer[:500]
    return len(json.loads(answer)["token_ids"])


def tokenizer_of(model: str) -> TextTokenizer:
    """The tokenizer the servers use for a preset (by its vocabulary)."""
    return TextTokenizer.load(vocab_size=load_model_config(model).vocab_size)


def render_throughput(model: str, seconds: float, workers: int = 1,
                      **size) -> tuple[float, float, int, int]:
    """(requests/s, server cores used, prompt tokens, prompt characters) over HTTP from a
    render server of `workers` processes. One worker is pinned to a core of its own, the
    client to the others; several share all cores with the client."""
    bodies = [chat_body(tokenizer_of(model), seed, model=model, **size) for seed in range(24)]
    chars = sum(len(m["content"]) for m in bodies[0]["messages"])
    raw = [json.dumps(b).encode() for b in bodies]
    cores = sorted(os.sched_getaffinity(0))
    mine = cores[:1] if workers == 1 else cores
    # NOTE: SO_REUSEPORT spreads connections, not requests: 8 per worker leave none idle
    in_flight = 8 * workers
    with serve_module("engine.fronts.render_server", ["--model", model, "--workers", str(workers)],
                      cores=mine) as url:
        os.sched_setaffinity(0, cores[1:] if workers == 1 and len(cores) > 1 else cores)
        tokens = asyncio.run(prompt_tokens(url, raw[0]))  # the prompt `chars` counts
        asyncio.run(drive(url, raw, 1.0, in_flight))  # warm-up
        cpu0, t0 = server_cpu_s(url), time.monotonic()
        done = asyncio.run(drive(url, raw, seconds, in_flight))
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
    one = {}
    for model in ("qwen2.5-7b", "small"):
        rate, used, n, chars = render_throughput(model, args.seconds, chars=36000)
        one[model] = rate
        print(
            f"render over HTTP ({model}'s tokenizer): {n}-token chat prompts ({chars} "
            f"characters, {chars / n:.2f} per token), {rate:.0f} req/s on one core "
            f"({used:.2f} cores busy), {rate * n / 1000:.0f}k tokens/s: {rate / 150:.2f} of "
            f"the 150 req/s goal (vLLM per the guide: 73)"
        )
    # the guide's prompt is ~9k Qwen tokens of prose; these common words pack denser
    rate, _, n, chars = render_throughput("qwen2.5-7b", args.seconds, tokens=9000)
    print(f"render over HTTP (qwen2.5-7b's tokenizer) at ~9k tokens: {n}-token chat prompts "
          f"({chars} characters), {rate:.0f} req/s on one core: {rate / 150:.2f} of the goal")
    workers = len(os.sched_getaffinity(0))
    if workers > 1:
        rate, used, _, _ = render_throughput("qwen2.5-7b", args.seconds, workers, chars=36000)
        print(
            f"render over HTTP, --workers {workers} on {workers} cores shared with the client: "
            f"{rate:.0f} req/s ({used:.2f} cores busy), {rate / one['qwen2.5-7b']:.2f}x one "
            f"worker (goal >= 1.7 at 2)"
        )
    tok = tokenizer_of("qwen2.5-7b")
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
    parse = {n: tool_calls_s(n) for n in (10000, 20000)}
    print(f"one piece of 10k tool calls parsed in {parse[10000]:.3f} s, of 20k in "
          f"{parse[20000]:.3f} s: 20k / 10k = {parse[20000] / parse[10000]:.2f} (goal <= 2.5: "
          "linear)")


def tool_calls_s(n: int) -> float:
    """Seconds the streaming parser takes over one piece of `n` tool calls (the fastest of 3)."""
    text = '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>\n' * n

    def parse() -> None:
        parser = StreamParser.make()
        assert len(parser.feed(text).tool_calls) == n

    return best_of(parse, repeats=3, warmup=False)


if __name__ == "__main__":
    main()
