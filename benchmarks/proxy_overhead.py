"""What a P/D proxy adds: `advisor proxy` and vLLM's toy proxy in front of the same real vLLM
1P1D pair (the mini preset, NIXL, started as the sweep starts it), against the path taken by
hand (the prefiller asked for one token with do_remote_decode, then the decoder given the
kv_transfer_params it returned, as the toy proxy does). One request at a time, the three
paths in turn (each first in turn, each prompt new: vLLM's prefix cache would serve a repeat),
so each sees the same host. Prints TTFT and ITL at p50 and p99 per path, what
each proxy adds over the hand path, and ours over the toy proxy's. Needs .tools/vllm
(bash .ci/vllm) and ../shared/thirdparty/vllm/toy_proxy_server.py.

    PYTHONPATH=. .venv/bin/python benchmarks/proxy_overhead.py [--requests 40]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import subprocess
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np

from advisor.engines.processes import started, stop_group
from advisor.engines.topologies import parse_topologies
from advisor.engines.vllm.locate import find_vllm
from advisor.engines.vllm.model_dir import model_dir
from advisor.engines.vllm.placements import placements
from advisor.engines.vllm.runtime import VllmSettings
from advisor.measure.ready import wait_ready
from engine.processes.children import free_port

MODEL = "mini"
TOY = Path(__file__).resolve().parents[2] / "shared" / "thirdparty" / "vllm" / "toy_proxy_server.py"
PROMPT_TOKENS, OUTPUT_TOKENS = 512, 32
HAND_PARAMS = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
               "remote_block_ids": None, "remote_host": None, "remote_port": None}


def body(prompt: list[int], **extra) -> dict:
    return {"model": MODEL, "prompt": prompt, "max_tokens": OUTPUT_TOKENS, "temperature": 0,
            "ignore_eos": True, "stream": True, **extra}


async def stream(session: aiohttp.ClientSession, url: str, payload: dict, t0: float
                 ) -> list[float]:
    """Arrival times (from t0) of each content chunk of a completion stream."""
    times = []
    async with session.post(url + "/v1/completions", json=payload) as r:
        r.raise_for_status()
        async for line in r.content:
            if line.startswith(b"data: {") and b'"text":""' not in line.replace(b" ", b""):
                times.append(time.perf_counter() - t0)
    return times


async def by_hand(session, prefill: str, decode: str, prompt: list[int]) -> list[float]:
    t0 = time.perf_counter()
    first = {**body(prompt), "stream": False, "max_tokens": 1, "kv_transfer_params": HAND_PARAMS}
    async with session.post(prefill + "/v1/completions", json=first) as r:
        r.raise_for_status()
        params = (await r.json())["kv_transfer_params"]
    return await stream(session, decode, body(prompt, kv_transfer_params=params), t0)


async def through(session, front: str, prompt: list[int]) -> list[float]:
    return await stream(session, front, body(prompt), time.perf_counter())


async def measure(paths: dict, n: int) -> dict[str, list[list[float]]]:
    rng = random.Random(0)
    out: dict[str, list[list[float]]] = {name: [] for name in paths}
    async with aiohttp.ClientSession() as session:
        names = list(paths)
        for i in range(n + 2):  # two rounds of warm-up, not kept
            for name in names[i % 3:] + names[:i % 3]:  # each path first in turn
                # a prompt of its own: vLLM's prefix cache would serve a repeat
                prompt = [rng.randrange(3, 512) for _ in range(PROMPT_TOKENS)]
                times = await paths[name](session, prompt)
                if i >= 2:
                    out[name].append(times)
    return out


def summary(runs: list[list[float]]) -> dict[str, float]:
    ttft = [t[0] * 1000 for t in runs]
    itl = [g * 1000 for t in runs for g in np.diff(t)]
    return {"ttft_p50": float(np.percentile(ttft, 50)), "ttft_p99": float(np.percentile(ttft, 99)),
            "itl_p50": float(np.percentile(itl, 50)), "itl_p99": float(np.percentile(itl, 99))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=40)
    args = ap.parse_args()
    install = find_vllm()
    with tempfile.TemporaryDirectory() as tmp:
        directory, dummy = model_dir(MODEL, "float32", Path(tmp))
        settings = VllmSettings(install, directory, MODEL, "float32", 2048, "cpu", dummy)
        [pd] = placements(parse_topologies("disagg:1p1d"), settings)
        prefill, decode = pd.instances
        port = free_port()
        with started(pd, Path(tmp), MODEL, None, 600):
            toy = subprocess.Popen(
                [install.python, str(TOY), "--port", str(port),
                 "--prefiller-hosts", "127.0.0.1", "--prefiller-ports", prefill.rsplit(":", 1)[1],
                 "--decoder-hosts", "127.0.0.1", "--decoder-ports", decode.rsplit(":", 1)[1]],
                start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                toy_url = f"http://127.0.0.1:{port}"
                wait_ready(toy_url, None, timeout_s=120)
                runs = asyncio.run(measure({
                    "by hand": lambda s, p: by_hand(s, prefill, decode, p),
                    "advisor proxy": lambda s, p: through(s, pd.url, p),
                    "vLLM toy proxy": lambda s, p: through(s, toy_url, p)}, args.requests))
            finally:
                stop_group(toy, grace_s=5)
    stats = {name: summary(r) for name, r in runs.items()}
    print(f"{args.requests} requests per path, one at a time ({PROMPT_TOKENS} tokens in, "
          f"{OUTPUT_TOKENS} out), vLLM {install.version} 1P1D over NIXL")
    print(f"{'path':16} {'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} {'ITL p99':>8}  (ms)")
    for name, s in stats.items():
        print(f"{name:16} {s['ttft_p50']:9.2f} {s['ttft_p99']:9.2f} {s['itl_p50']:8.2f} "
              f"{s['itl_p99']:8.2f}")
    hand = stats["by hand"]
    for key in ("ttft_p50", "ttft_p99", "itl_p50", "itl_p99"):
        ours = stats["advisor proxy"][key] - hand[key]
        toy = stats["vLLM toy proxy"][key] - hand[key]
        ratio = f"{ours / toy:.2f}x" if toy > 0 else "n/a (the toy proxy adds nothing)"
        print(f"added {key}: advisor proxy {ours:+.2f} ms, toy proxy {toy:+.2f} ms: ours/toy "
              f"{ratio} (goal < 1)")


if __name__ == "__main__":
    main()
