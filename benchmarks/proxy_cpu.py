"""What a P/D proxy costs by itself: `advisor proxy` and vLLM's toy proxy in front of the
same pair of scripted servers (advisor.testing.scripted_server: a first token after 20 ms,
the rest on an exact schedule), so that nothing but the proxies differs. Prints, per proxy,
the CPU it spent per relayed chunk under `--streams` concurrent streams, and the TTFT and ITL
it adds over the decoder reached directly (one stream at a time, the three paths in turn);
then ours over the toy's. Needs vLLM's Python for the toy proxy's FastAPI and httpx
(.tools/vllm, bash .ci/vllm) and ../shared/thirdparty/vllm/toy_proxy_server.py.

    PYTHONPATH=. .venv/bin/python benchmarks/proxy_cpu.py [--streams 20] [--rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import numpy as np

from advisor.engines.vllm.locate import find_vllm
from advisor.measure.ready import wait_ready
from engine.processes.children import free_port

TOY = Path(__file__).resolve().parents[2] / "shared" / "thirdparty" / "vllm" / "toy_proxy_server.py"
TTFT_MS, ITL_MS = 20, 3


def cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def stream(session: aiohttp.ClientSession, url: str, tokens: int) -> list[float]:
    """Arrival times (from the send) of each chunk of one completion stream."""
    t0, times = time.perf_counter(), []
    body = {"model": "m", "prompt": [1, 2, 3], "max_tokens": tokens, "stream": True}
    async with session.post(url + "/v1/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.content:
            if line.startswith(b"data: {"):
                times.append(time.perf_counter() - t0)
    return times


async def cpu_per_chunk(url: str, pid: int, streams: int, tokens: int) -> float:
    """The proxy's CPU microseconds per chunk relayed under `streams` concurrent streams."""
    async with aiohttp.ClientSession() as s:
        before = cpu_s(pid)
        done = await asyncio.gather(*(stream(s, url, tokens) for _ in range(streams)))
        return 1e6 * (cpu_s(pid) - before) / sum(map(len, done))


async def latencies(urls: dict[str, str], rounds: int, tokens: int
                    ) -> dict[str, tuple[list[float], list[float]]]:
    """Per path: TTFTs and ITLs (s), one stream at a time, the paths in turn."""
    out: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in urls}
    async with aiohttp.ClientSession() as s:
        for _ in range(rounds):
            for name, url in urls.items():
                times = await stream(s, url, tokens)
                out[name][0].append(times[0])
                out[name][1].extend(np.diff(times))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=100)
    a = ap.parse_args()
    prefill, decode, ours, toy = (free_port() for _ in range(4))
    procs = [subprocess.Popen([sys.executable, "-m", "advisor.testing.scripted_server", "--port",
                               str(p), "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for p in (prefill, decode)]
    pairs = ["--prefiller-hosts", "127.0.0.1", "--prefiller-ports", str(prefill),
             "--decoder-hosts", "127.0.0.1", "--decoder-ports", str(decode)]
    proxies = {
        "advisor proxy": subprocess.Popen([sys.executable, "-m", "advisor.cli", "proxy",
                                           "--prefill", f"http://127.0.0.1:{prefill}",
                                           "--decode", f"http://127.0.0.1:{decode}",
                                           "--port", str(ours)], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL),
        "vLLM toy proxy": subprocess.Popen([find_vllm().python, str(TOY), "--port", str(toy),
                                            *pairs], stderr=subprocess.DEVNULL,
                                           stdout=subprocess.DEVNULL)}
    procs += proxies.values()
    urls = {"direct": f"http://127.0.0.1:{decode}", "advisor proxy": f"http://127.0.0.1:{ours}",
            "vLLM toy proxy": f"http://127.0.0.1:{toy}"}
    try:
        for url in urls.values():
            wait_ready(url, None, timeout_s=60)
        asyncio.run(latencies(urls, 2, 10))  # connections and first-call costs
        cpu = {name: asyncio.run(cpu_per_chunk(urls[name], p.pid, a.streams, a.tokens))
               for name, p in proxies.items()}
        lat = asyncio.run(latencies(urls, a.rounds, a.tokens))
    finally:
        for p in procs:
            p.terminate()
    q = {name: {"ttft_p50": np.percentile(t, 50), "itl_p50": np.percentile(i, 50),
                "itl_p99": np.percentile(i, 99)} for name, (t, i) in lat.items()}
    print(f"scripted servers: first token {TTFT_MS} ms, then one every {ITL_MS} ms; "
          f"{a.streams} streams of {a.tokens} tokens for the CPU, {a.rounds} rounds one at a "
          "time for the latencies")
    print(f"{'path':16s} {'CPU us/chunk':>12s} {'TTFT p50':>9s} {'ITL p50':>8s} "
          f"{'ITL p99':>8s} (ms)")
    for name in urls:
        c = f"{cpu[name]:12.0f}" if name in cpu else f"{'':12s}"
        print(f"{name:16s} {c} {1e3 * q[name]['ttft_p50']:9.2f} {1e3 * q[name]['itl_p50']:8.3f} "
              f"{1e3 * q[name]['itl_p99']:8.3f}")
    print(f"CPU per chunk: ours/toy {cpu['advisor proxy'] / cpu['vLLM toy proxy']:.2f}x "
          "(goal < 1)")
    for key in ("ttft_p50", "itl_p99"):
        ours_add = q["advisor proxy"][key] - q["direct"][key]
        toy_add = q["vLLM toy proxy"][key] - q["direct"][key]
        print(f"added {key}: ours +{1e3 * ours_add:.3f} ms, toy +{1e3 * toy_add:.3f} ms")


if __name__ == "__main__":
    main()
