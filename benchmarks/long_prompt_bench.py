"""Long prompts at once: does the client's TTFT stay true when 64 requests each send a
128k-token prompt (~900 KB of JSON) together?

1. Against benchmarks/stream_ruler.py (the server records when each request's first bytes
   arrived and when it wrote each event): |client TTFT - the ruler's TTFT| per request,
   p50/p99/max, for the 64 sent at once, then for 128 arriving at 64 req/s with 200-token
   answers (~64 in flight). Goal: p99 < 2 ms.
2. Against the bundled engine (`tiny`, the longest prompt its 2048-token context allows):
   the client's mean TTFT beside the engine's own (vllm:time_to_first_token_seconds, whose
   clock starts once the request's handler runs, after the body arrived), so the difference
   is the upload and parsing of the body plus the client's own error.

Usage: python benchmarks/long_prompt_bench.py [--tokens 131072] [--requests 64]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from advisor.measure.client import Client
from advisor.measure.records import Endpoint
from benchmarks.client_capacity import truth
from engine.api import Topology, launch
from workloads.arrivals import Arrivals
from workloads.lengths import LengthDist
from workloads.spec import SyntheticSpec, synthesize

GOAL_MS = 2.0
TINY_CONTEXT, OUTPUT = 2048, 8


def at_once(tokens: int, requests: int, rate: float = 1e9, output: int = OUTPUT):
    """`requests` prompts of `tokens` token ids, `output` tokens each, Poisson at `rate`
    (by default all due at t=0: a burst)."""
    spec = SyntheticSpec(input=LengthDist("fixed", tokens), output=LengthDist("fixed", output),
                         arrivals=Arrivals("poisson", rate), num_prompts=requests)
    return synthesize(spec, 0)


def against_ruler(tokens: int, requests: int, port: int, rate: float = 1e9,
                  output: int = OUTPUT) -> None:
    cores = sorted(os.sched_getaffinity(0))
    ruler = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("stream_ruler.py")), "--port", str(port),
         "--ttft-ms", "10", "--itl-ms", "5", "--kernel-stamps"], stdout=subprocess.PIPE,
        text=True)
    os.sched_setaffinity(ruler.pid, {cores[-1]})
    url = f"http://127.0.0.1:{port}"
    try:
        ruler.stdout.readline()
        truth(url, reset=True)
        run = asyncio.run(Client(Endpoint(url, "ruler", timeout_s=120)).run(
            at_once(tokens, requests, rate, output)))
        told = truth(url)
    finally:
        ruler.terminate()
        ruler.wait()
    err = np.array([abs((r.chunks[0] - r.sent) - (t["writes"][0] - t["arrived"])) * 1000
                    for r in run.records if r.ok and (t := told.get(r.conversation_id))])
    ttft = np.array([(r.chunks[0] - r.sent) * 1000 for r in run.records if r.ok])
    how = "at once" if rate >= 1e9 else f"at {rate:g} req/s, {output} tokens out"
    busy = sum((r.end - r.sent) for r in run.records if r.sent) / run.duration
    print(f"ruler: {requests} x {tokens}-token prompts {how} ({busy:.0f} in flight on "
          f"average): {len(err)} ok, "
          f"{sum(not r.ok for r in run.records)} failed; client TTFT median {np.median(ttft):.1f} "
          f"ms; |error| p50 {np.median(err):.3f} ms, p99 {np.percentile(err, 99):.3f} ms, "
          f"max {err.max():.3f} ms (goal p99 < {GOAL_MS:g} ms: "
          f"{'held' if np.percentile(err, 99) < GOAL_MS else 'MISSED'})")


def _ttft_totals(urls: list[str], key: str | None) -> tuple[float, float]:
    total = count = 0.0
    for url in urls:
        req = urllib.request.Request(url.rstrip("/") + "/metrics", headers={
            "Authorization": f"Bearer {key}"} if key else {})
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode()
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == "vllm:time_to_first_token_seconds_sum":
                    total += s.value
                elif s.name == "vllm:time_to_first_token_seconds_count":
                    count += s.value
    return total, count


def against_engine(requests: int) -> None:
    tokens = TINY_CONTEXT - OUTPUT
    with launch(Topology(mode="collocated", replicas=1, model="tiny", dtype="float32")) as d:
        urls = [u for us in d.instance_urls.values() for u in us]
        before = _ttft_totals(urls, d.instance_key)
        run = asyncio.run(Client(Endpoint(d.url, "tiny", timeout_s=300)).run(
            at_once(tokens, requests)))
        after = _ttft_totals(urls, d.instance_key)
    ok = [r for r in run.records if r.ok]
    client = float(np.mean([(r.chunks[0] - r.sent) * 1000 for r in ok]))
    served = (after[0] - before[0]) / max(1.0, after[1] - before[1]) * 1000
    print(f"engine (tiny, {requests} x {tokens}-token prompts at once): {len(ok)} ok; mean "
          f"TTFT client {client:.1f} ms, engine's own {served:.1f} ms: the client's is "
          f"{client - served:+.1f} ms (the body's upload and parsing, before the engine's "
          "clock starts, and the client's error)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=128 * 1024)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--port", type=int, default=8301)
    a = ap.parse_args()
    against_ruler(a.tokens, a.requests, a.port)
    # the same concurrency spread over time: ~64 streams in flight, sent as they arrive
    against_ruler(a.tokens, 2 * a.requests, a.port, rate=a.requests, output=200)
    against_engine(a.requests)


if __name__ == "__main__":
    main()
