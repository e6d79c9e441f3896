"""Bidirectional KV against plain P/D on multi-turn conversations, measured in one run.

Each conversation: a long first prompt, then turns that append the reply and new user
tokens; sent one turn at a time (unloaded), greedy, to a plain 1P1D deployment and to a
bidirectional one. Prints the median TTFT per turn of each, and at turn five:
  floor   = the TTFT when only turn 5's new tokens are computed and reuse costs nothing:
            turn 5's prompt with other new tokens, sent to plain P/D once its prefix
            cache holds the whole conversation (measured on it, same context length)
  saved   = what plain P/D spends recomputing what bidirectional reuses (the earlier
            reply): its turn-5 TTFT minus the floor
  gained  = plain P/D's turn-5 TTFT minus bidirectional's
Goal (issue: multi-turn, bidirectional): gained >= 0.5 x saved.

Plain P/D's prefiller keeps the earlier prompts in its prefix cache (one prefiller, so
every turn meets it): what it recomputes is the reply, so replies are chat-sized
(`--out 128`) by default.

Usage: python benchmarks/multiturn_bench.py [--model small] [--conversations 4]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import urllib.request

from engine.processes.launch import Topology, launch

TURNS, LATE = 6, 5


def ttft_and_ids(url: str, model: str, prompt: list[int], out: int, cid: str):
    """(TTFT in seconds, output token IDs) of one streamed completion."""
    body = {"model": model, "prompt": prompt, "max_tokens": out, "temperature": 0,
            "ignore_eos": True, "stream": True}
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json", "X-Conversation-Id": cid})
    start, first, ids = time.perf_counter(), None, []
    with urllib.request.urlopen(req, timeout=300) as r:
        for line in r:
            if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if chunk.get("choices"):
                first = first or time.perf_counter()
                ids += chunk["choices"][0].get("token_ids") or []
    return first - start, ids


def conversations(url: str, model: str, n: int, first_len: int, new_len: int, out: int,
                  tag: str) -> tuple[list[list[float]], list[list[int]]]:
    """(TTFT (s) per turn, per conversation; each conversation's turn-LATE prompt)."""
    rng = random.Random(0)
    result, late = [], []
    for c in range(n):
        prompt = [rng.randrange(3, 500) for _ in range(first_len)]
        ttfts = []
        for turn in range(1, TURNS + 1):
            if turn == LATE:
                late.append(prompt)
            t, ids = ttft_and_ids(url, model, prompt, out, f"{tag}-{c}")
            ttfts.append(t)
            prompt = prompt + ids + [rng.randrange(3, 500) for _ in range(new_len)]
        result.append(ttfts)
    return result, late


def floor_ttft(url: str, model: str, late: list[list[int]], new_len: int, out: int) -> float:
    """Median TTFT of each turn-LATE prompt with its new tokens replaced: the prefix cache
    holds everything before them, so only the new tokens are computed."""
    rng = random.Random(1)
    return statistics.median(
        ttft_and_ids(url, model, p[:-new_len] + [rng.randrange(3, 500) for _ in range(new_len)],
                     out, f"floor-{i}")[0]
        for i, p in enumerate(late))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="small")
    ap.add_argument("--conversations", type=int, default=4)
    ap.add_argument("--first", type=int, default=1500, help="first prompt's tokens")
    ap.add_argument("--new", type=int, default=100, help="new user tokens per turn")
    ap.add_argument("--out", type=int, default=128, help="reply tokens per turn")
    a = ap.parse_args()
    medians, floor = {}, None
    for name, bidi in (("plain P/D", False), ("bidirectional", True)):
        with launch(Topology(mode="disagg", model=a.model, bidirectional=bidi)) as d:
            conversations(d.url, a.model, 1, a.first, a.new, a.out, "warmup")
            runs, late = conversations(d.url, a.model, a.conversations, a.first, a.new, a.out,
                                       name)
            medians[name] = [statistics.median(r[k] for r in runs) for k in range(TURNS)]
            if not bidi:
                floor = floor_ttft(d.url, a.model, late, a.new, a.out)
    print(f"model {a.model}, first prompt {a.first} tokens, +{a.new} new and {a.out} reply "
          f"tokens per turn, {a.conversations} conversations, median TTFT (ms) by turn:")
    for name, ms in medians.items():
        print(f"  {name:>14}: " + "  ".join(f"{m * 1000:7.1f}" for m in ms))
    plain, bidi = medians["plain P/D"][LATE - 1], medians["bidirectional"][LATE - 1]
    saved, gained = plain - floor, plain - bidi
    print(f"turn {LATE}: plain {plain * 1000:.1f} ms, bidirectional {bidi * 1000:.1f} ms, "
          f"floor (only the new tokens computed) {floor * 1000:.1f} ms")
    print(f"recompute saved {saved * 1000:.1f} ms; TTFT gained {gained * 1000:.1f} ms: "
          f"ratio {gained / saved:.2f} (goal >= 0.5)")

if __name__ == "__main__":
    main()
