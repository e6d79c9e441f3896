"""Soak: mixed load on a supervised disaggregated deployment, with faults on a schedule.

Starts `advisor serve --mode disagg` (1 prefiller, 1 decoder, the proxy; `tiny` in
float32 by default), sends Poisson traffic of well-formed requests (completions and chat,
streaming and not) through the front, and meanwhile, in cycles of CYCLE_S:
- every 5 s, a batch of hostile bodies (100k '[', deep nesting, a 2^64 seed, bytes) and
  the requests of attacks.py (forged KV params, an instance port without its key, bodies
  past the model's limit and just under it, lists past their limits, odd conversation ids,
  tool-call arguments nested 5,000 deep);
- all along, 200 sockets trickling at the prefiller's KV side channel, 100 connections
  that never finish their headers at the front and 100 that trickle their bodies
  (attacks.py), reopened when closed;
- at 10% of a cycle, a herd of streams that never read, held 15 s;
- at 35%, the prefiller stopped (SIGSTOP) for 8 s (the decoder prefills meanwhile);
- at 60%, the decoder stopped for 8 s (the prefiller decodes meanwhile);
- once, at 85% of the first cycle, the decoder killed (SIGKILL), its port taken by a
  squatter for 10 s (attacks.py): `advisor serve` restarts it once the port is free.
With three cycles or more the first two are the warm-up. Then it waits for the KV pools to be full
again, stops the deployment and prints: requests sent / answered / 5xx (those in flight
on the decoder when it was stopped or killed counted apart: they end with an error event
at once or within ~5 s), the longest any request took while an upstream was stopped or
dead, leaked KV blocks, RSS and file descriptors per process (after warm-up to the end),
and what is left behind (processes, /dev/shm segments); what each attack got back.

Goals: 0 5xx to well-formed requests but those in flight on a decoder as it was stopped or
killed, every one served while the side channel is under siege; no request over 10 s on a
stopped or dead upstream; nothing but health checks to the squatter; 0 leaked blocks,
processes, segments; RSS growth under 10% after warm-up.

Usage: python benchmarks/soak.py [--seconds 600] [--ci (60 s)] [--rate 3] [--model tiny]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from attacks import Attacks, listening_ports

from advisor.measure.prom import kv_blocks_in_use
from engine.processes.children import free_port

HOSTILE = [b"[" * 100_000, b"{" * 5_000, b"\xff\xfe", b"",
           json.dumps({"prompt": [5, 6], "max_tokens": 2, "seed": 2**64}).encode(),
           json.dumps({"prompt": "x", "max_tokens": -1}).encode(),
           json.dumps({"messages": [{"role": "nobody"}]}).encode()]
HERD, HERD_S, STOP_S = 60, 15.0, 8.0
CYCLE_S = 120.0  # the faults repeat each cycle (one cycle when the run is shorter)
HERD_AT, STOP_P_AT, STOP_D_AT, KILL_AT = 0.1, 0.35, 0.6, 0.85  # fractions of a cycle


@dataclass
class Sent:
    start: float
    end: float = 0.0
    status: int = 0
    error: str | None = None
    fallback: str | None = None  # served around a down tier, not by P/D


@dataclass
class Soak:
    url: str
    rate: float
    sent: list[Sent] = field(default_factory=list)
    hostile: list[int] = field(default_factory=list)  # statuses
    events: list[tuple[str, float, float]] = field(default_factory=list)  # (fault, from, to)


def proc_children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def role_of(pid: int) -> tuple[str, str | None]:
    """(prefill | decode | front, its URL) from a child's command line."""
    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    args = [a.decode() for a in args]
    port = args[args.index("--port") + 1] if "--port" in args else None
    role = "front" if "engine.fronts.proxy" in args else args[args.index("--role") + 1]
    return role, f"http://127.0.0.1:{port}" if port else None


def children(serve: subprocess.Popen) -> dict[str, int]:
    """`advisor serve`'s children now, by role (a restarted decoder has a new pid)."""
    return {role_of(pid)[0]: pid for pid in proc_children(serve.pid)}


def sample(pid: int) -> tuple[float, int]:
    """(RSS in MB, open file descriptors) of a live process."""
    rss = re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text()).group(1)
    return int(rss) / 1024, len(os.listdir(f"/proc/{pid}/fd"))


async def one_request(s: Soak, session: aiohttp.ClientSession, rng: random.Random) -> None:
    chat, stream = rng.random() < 0.5, rng.random() < 0.6
    body: dict = {"max_tokens": rng.randint(16, 64), "temperature": 0, "ignore_eos": True,
                  "stream": stream}
    if chat:
        body["messages"] = [{"role": "user", "content": "word " * rng.randint(10, 100)}]
    else:
        body["prompt"] = [rng.randrange(3, 500) for _ in range(rng.randint(20, 200))]
    rec = Sent(time.monotonic())
    s.sent.append(rec)
    path = "/v1/chat/completions" if chat else "/v1/completions"
    try:
        async with session.post(s.url + path, json=body) as r:
            rec.status, rec.fallback = r.status, r.headers.get("X-Advisor-Fallback")
            text = (await r.read()).decode(errors="replace")
            if stream and r.status == 200 and ('"error"' in text or "[DONE]" not in text):
                rec.error = f"stream ended with an error event: {text[-300:]!r}"
    except (TimeoutError, aiohttp.ClientError) as e:
        rec.error = repr(e)
    rec.end = time.monotonic()


async def load(s: Soak, until: float) -> None:
    rng = random.Random(0)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        tasks = []
        while time.monotonic() < until:
            tasks.append(asyncio.create_task(one_request(s, session, rng)))
            await asyncio.sleep(rng.expovariate(s.rate))
        await asyncio.gather(*tasks)


async def hostile(s: Soak, until: float) -> None:
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < until:
            for body in HOSTILE:
                async with session.post(s.url + "/v1/completions", data=body) as r:
                    s.hostile.append(r.status)
            await asyncio.sleep(5)


async def herd(s: Soak) -> None:
    host, port = s.url.removeprefix("http://").split(":")
    body = json.dumps({"prompt": [5, 6, 7], "max_tokens": 200, "stream": True,
                       "ignore_eos": True}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json"
            f"\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    writers = []
    t0 = time.monotonic()
    for _ in range(HERD):
        _, w = await asyncio.open_connection(host, int(port))
        w.write(head + body)
        writers.append(w)
    await asyncio.sleep(HERD_S)  # nobody reads
    for w in writers:
        w.close()
    s.events.append(("reader herd", t0, time.monotonic()))


async def stop_for(s: Soak, serve: subprocess.Popen, role: str, seconds: float) -> None:
    """SIGSTOP the instance that has `role` now (a restarted decoder has a new pid)."""
    pid = children(serve)[role]
    os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    await asyncio.sleep(seconds)
    os.kill(pid, signal.SIGCONT)
    s.events.append((f"{role} stopped", t0, time.monotonic()))


async def at(t: float, coro) -> None:
    await asyncio.sleep(max(0.0, t - time.monotonic()))
    await coro


async def pools_full(urls: list[str], within_s: float = 45.0) -> dict[str, float]:
    """Blocks still in use per instance once idle (0 each when nothing leaked); waits out
    KV leases (30 s) for prefills whose decode leg never came."""
    deadline = time.monotonic() + within_s
    async with aiohttp.ClientSession() as session:
        while True:
            used = {}
            for u in urls:
                async with session.get(u + "/metrics") as r:
                    used[u] = kv_blocks_in_use(await r.text())
            if not any(used.values()) or time.monotonic() > deadline:
                return used
            await asyncio.sleep(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--ci", action="store_true", help="a 60 s run")
    ap.add_argument("--rate", type=float, default=3.0, help="well-formed requests per second")
    ap.add_argument("--model", default="tiny")
    a = ap.parse_args()
    seconds = 60.0 if a.ci else a.seconds
    shm_before = set(os.listdir("/dev/shm"))
    port = free_port()
    log = tempfile.TemporaryFile()  # noqa: SIM115  (open while serve runs; never a pipe)
    serve = subprocess.Popen([sys.executable, "-m", "advisor.cli", "serve", "--mode", "disagg",
                              "--model", a.model, "--dtype", "float32", "--port", str(port)],
                             stdout=log, stderr=log)
    serve.log = log
    try:
        report = asyncio.run(soak(serve, f"http://127.0.0.1:{port}", a.rate, seconds,
                                  a.model))
    finally:
        serve.send_signal(signal.SIGINT)
        try:
            serve.wait(30)
        except subprocess.TimeoutExpired:
            serve.kill()
    left = [pid for pid in report.pop("_pids") if Path(f"/proc/{pid}").exists()]
    report["processes left after stop"] = len(left)
    report["/dev/shm segments left"] = len(set(os.listdir("/dev/shm")) - shm_before)
    width = max(map(len, report))
    for k, v in report.items():
        print(f"{k:<{width}}  {v}")


async def soak(serve: subprocess.Popen, url: str, rate: float, seconds: float,
               model: str) -> dict:
    await wait_up(url, serve)
    kids = children(serve)
    urls = {role: role_of(pid)[1] for role, pid in kids.items()}
    s = Soak(url, rate)
    pre_port = int(urls["prefill"].rsplit(":", 1)[1])
    (side_port,) = listening_ports(kids["prefill"]) - {pre_port}
    attacks = Attacks(url, urls["prefill"], side_port, model)
    t0 = time.monotonic()
    until = t0 + seconds
    cycles = max(1, int(seconds // CYCLE_S))
    cycle = seconds / cycles
    kill_at = t0 + KILL_AT * cycle
    # NOTE: with three cycles or more the first two are the warm-up: the first has every
    # fault in it (the decoder prefilling, the prefiller decoding alone while the killed
    # decoder restarts, a herd), the second is the restarted decoder's own first cycle.
    # RSS growth after them is what the cycles add, not first uses.
    warm = t0 + (2 * cycle if cycles > 2 else min(10.0, 0.1 * seconds))
    base: dict = {}

    async def baseline():
        base.update({role: sample(pid) for role, pid in children(serve).items()})

    files = Path(tempfile.mkdtemp(prefix="soak-files-"))
    faults = [load(s, until), hostile(s, until), attacks.requests(until),
              attacks.sieges(until), attacks.parser(until), attacks.files(until, files),
              at(warm, baseline()),
              at(kill_at, kill_and_rebase(s, serve, kids["decode"], urls["decode"], base,
                                          attacks))]
    for c in range(cycles):
        start = t0 + c * cycle
        faults += [at(start + HERD_AT * cycle, herd(s)),
                   at(start + STOP_P_AT * cycle, stop_for(s, serve, "prefill", STOP_S)),
                   at(start + STOP_D_AT * cycle, stop_for(s, serve, "decode", STOP_S))]
    await asyncio.gather(*faults)
    kids_now = children(serve)
    end = {role: sample(pid) for role, pid in kids_now.items()}
    used = await pools_full([urls["prefill"], urls["decode"]])
    return {**summary(s, base, end, used, [*kids.values(), kids_now["decode"]]),
            **attacks.lines()}


async def kill_and_rebase(s: Soak, serve: subprocess.Popen, pid: int, url: str,
                          base: dict, attacks: Attacks) -> None:
    """SIGKILL the decoder, a squatter takes its port a while; once `advisor serve` has it
    back and it has served a while, its new process's sample becomes its warm-up
    baseline."""
    os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    await attacks.squat(int(url.rsplit(":", 1)[1]))
    async with aiohttp.ClientSession() as session:
        while True:
            await asyncio.sleep(0.5)
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(url + "/health") as r:
                    if r.status == 200:
                        break
    s.events.append(("decoder killed", t0, time.monotonic()))
    await asyncio.sleep(5)
    new = children(serve)["decode"]
    base["decode"] = sample(new)


async def wait_up(url: str, serve: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if serve.poll() is not None:
                serve.log.seek(0)
                raise SystemExit(f"advisor serve exited: {serve.log.read()[-2000:]!r}")
            try:
                async with session.get(url + "/health") as r:
                    if r.status == 200 and len(proc_children(serve.pid)) == 3:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.5)
    raise SystemExit("the deployment never came up")


def summary(s: Soak, base: dict, end: dict, used: dict, pids: list) -> dict:
    hits = [a for k, a, _ in s.events if k in ("decode stopped", "decoder killed")]
    killed = [r for r in s.sent if any(r.start <= t <= r.end for t in hits)]
    rest = [r for r in s.sent if r not in killed]
    bad = [r for r in rest if r.status >= 500 or r.error]
    windows = [(a, b) for k, a, b in s.events if k != "reader herd"]
    overlaps = [any(r.start <= b and r.end >= a for a, b in windows) for r in s.sent]
    during = [r.end - r.start for r, o in zip(s.sent, overlaps) if o]
    calm = [r for r, o in zip(s.sent, overlaps) if not o]
    out = {
        "requests sent (well-formed)": len(s.sent),
        "answered 200": sum(r.status == 200 and not r.error for r in s.sent),
        "5xx or failed, the rest": len(bad),
        "in flight on the decoder as it was stopped or killed (failed / all)":
            f"{sum(r.status >= 500 or bool(r.error) for r in killed)} / {len(killed)}",
        "hostile bodies sent / answered 5xx":
            f"{len(s.hostile)} / {sum(st >= 500 for st in s.hostile)}",
        "longest request during a stop or kill (s)": f"{max(during, default=0):.2f}",
        # NOTE: the side channel is under siege all along: a request outside the faults
        # served without a fallback had its KV pulled past the hostile sockets
        "outside faults: served by P/D / all":
            f"{sum(r.status == 200 and not (r.fallback or r.error) for r in calm)} / {len(calm)}",
        "KV blocks leaked (prefill, decode)": " / ".join(f"{v:g}" for v in used.values()),
    }
    for role, (rss0, fd0) in base.items():
        rss1, fd1 = end[role]
        note = " (the restarted one)" if role == "decode" else ""
        out[f"{role}: RSS MB warm-up -> end{note}"] = \
            f"{rss0:.0f} -> {rss1:.0f} ({(rss1 / rss0 - 1) * 100:+.1f}%), fds {fd0} -> {fd1}"
    for r in bad[:5]:
        print(f"failed: status {r.status} {r.error}", file=sys.stderr)
    out["_pids"] = pids
    return out


if __name__ == "__main__":
    main()
