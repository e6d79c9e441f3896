"""How much streaming one client core carries, and how true its times stay, ours against
aiperf's, on one server whose timing is known (benchmarks/stream_ruler.py).

The ruler runs on its own core, the client on another (aiperf's processes all on that one
core too). For rising rates (Poisson, OUTPUT events per request every ITL ms) it prints,
for each client: SSE events per second delivered, events per client CPU-second, the
client's busy share of its core, and its timing error against the ruler's own record of
each request (TTFT p50/p99, per-gap ITL p99, as |client - truth|) and send lateness p99.
aiperf's CPU per event is marginal: two runs at each rate, of N and 2N requests, so its
start-up (imports, tokenizer, dataset) is not charged to its events.

Then the two ratios (ours/aiperf) at the highest rate both ran: events per client core,
and p99 TTFT error. Goals: >= 1.5x the events per core at equal or better error; our
error p99 < 1 ms up to the rate where our client is 70% busy.

Usage: python benchmarks/client_capacity.py [--seconds 4] [--rates 50,100,200,400]
       (aiperf from .tools/aiperf: bash .ci/tools installs it; --no-aiperf skips it)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import numpy as np

from advisor.measure.client import Client
from advisor.measure.records import Endpoint
from workloads.arrivals import Arrivals
from workloads.lengths import LengthDist
from workloads.spec import SyntheticSpec, synthesize

ROOT = Path(__file__).resolve().parents[1]
AIPERF = ROOT / ".tools" / "aiperf" / "bin" / "aiperf"
TTFT_MS, ITL_MS, OUTPUT, PROMPT = 10.0, 5.0, 40, 16


def truth(url: str, reset: bool = False) -> dict:
    with urllib.request.urlopen(url + ("/reset" if reset else "/truth"), timeout=30) as r:
        return json.load(r)


def errors(pairs: list[tuple[float, float, list[float], list[float]]]) -> dict:
    """Timing error from (client TTFT, true TTFT, client gaps, true gaps) in s."""
    ttft = np.abs([c - t for c, t, _, _ in pairs]) * 1000
    gaps = [np.abs(np.asarray(cg[:len(tg)]) - np.asarray(tg[:len(cg)])) for _, _, cg, tg in pairs]
    itl = np.concatenate(gaps) * 1000 if gaps else np.zeros(1)
    return {"ttft_p50": float(np.median(ttft)), "ttft_p99": float(np.percentile(ttft, 99)),
            "itl_p99": float(np.percentile(itl, 99))}


def ours(url: str, rate: float, seconds: float) -> dict:
    spec = SyntheticSpec(input=LengthDist("fixed", PROMPT), output=LengthDist("fixed", OUTPUT),
                         arrivals=Arrivals("poisson", rate), num_prompts=int(rate * seconds))
    truth(url, reset=True)
    run = asyncio.run(Client(Endpoint(url, "ruler", timeout_s=60)).run(synthesize(spec, 0)))
    told = truth(url)
    pairs = []
    for r in run.records:
        t = told.get(r.conversation_id)
        if r.ok and t and t["writes"]:
            pairs.append((r.chunks[0] - r.sent, t["writes"][0] - t["arrived"],
                          list(np.diff(r.chunks)), list(np.diff(t["writes"]))))
    events = sum(len(r.chunks) for r in run.records)
    late = np.array(run.send_lateness()) * 1000
    return {"events": events, "events_s": events / run.duration, "cpu_s": run.cpu_s,
            "busy": run.cpu_s / run.duration, "failed": sum(not r.ok for r in run.records),
            "late_p99": float(np.percentile(late, 99)), **errors(pairs)}


def aiperf_run(url: str, rate: float, count: int, tok: Path, out: Path, core: int) -> tuple:
    """(CPU seconds of aiperf's whole process tree, its records) for one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cmd = [str(AIPERF), "profile", "-m", "ruler", "--url", url, "--endpoint-type",
           "completions", "--streaming", "--tokenizer", str(tok), "--request-rate", str(rate),
           "--request-count", str(count), "--prompt-input-tokens-mean", str(PROMPT),
           "--prompt-input-tokens-stddev", "0", "--prompt-output-tokens-mean", str(OUTPUT),
           "--prompt-output-tokens-stddev", "0", "--use-legacy-max-tokens",
           "--output-artifact-dir", str(out), "--ui-type", "none", "--random-seed", "0"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         cwd=out.parent)
    os.sched_setaffinity(p.pid, {core})  # before it starts its workers, which inherit it
    said, _ = p.communicate(timeout=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"aiperf failed: {said[-3000:]}")
    rows = [json.loads(line) for line in (out / "profile_export.jsonl").read_text().splitlines()
            if line.strip()]
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return cpu, rows


def theirs(url: str, rate: float, seconds: float, tok: Path, work: Path, core: int) -> dict:
    n = int(rate * seconds)
    truth(url, reset=True)
    cpu1, _ = aiperf_run(url, rate, n, tok, work / f"a-{rate:g}-1", core)
    truth(url, reset=True)
    cpu2, rows = aiperf_run(url, rate, 2 * n, tok, work / f"a-{rate:g}-2", core)
    told = truth(url)
    pairs, events, first, last = [], 0, [], []
    for row in rows:
        m, meta = row.get("metrics") or {}, row["metadata"]
        t = told.get(meta.get("x_request_id"))
        gaps = (m.get("inter_chunk_latency") or {}).get("value") or []
        if "error" in row or not t or not t["writes"] or "time_to_first_token" not in m:
            continue
        events += 1 + len(gaps)
        first.append(meta["request_start_ns"])
        last.append(meta["request_end_ns"])
        pairs.append((m["time_to_first_token"]["value"] / 1000, t["writes"][0] - t["arrived"],
                      [g / 1000 for g in gaps], list(np.diff(t["writes"]))))
    span = (max(last) - min(first)) / 1e9 if first else 1.0
    per_event = (cpu2 - cpu1) / max(1, events / 2)  # the second run's extra n requests
    return {"events": events, "events_s": events / span, "cpu_s": per_event * events,
            "busy": per_event * events / span, "failed": 2 * n - len(pairs),
            "late_p99": float("nan"), **errors(pairs)}


def row(who: str, rate: float, r: dict) -> str:
    return (f"{who:6} {rate:6g} {r['events_s']:9.0f} {r['events'] / r['cpu_s']:11.0f} "
            f"{r['busy']:5.0%} {r['ttft_p50']:8.2f} {r['ttft_p99']:8.2f} {r['itl_p99']:8.2f} "
            f"{r['late_p99']:8.2f} {r['failed']:6d}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=4.0, help="length of each rate's run")
    ap.add_argument("--rates", default="50,100,200,400", help="req/s, comma-separated")
    ap.add_argument("--port", type=int, default=8300)
    ap.add_argument("--no-aiperf", action="store_true", help="measure ours alone")
    a = ap.parse_args()
    rates = [float(r) for r in a.rates.split(",")]
    cores = sorted(os.sched_getaffinity(0))
    client_core, server_core = cores[0], cores[-1]
    url = f"http://127.0.0.1:{a.port}"
    ruler = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("stream_ruler.py")), "--port",
         str(a.port), "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--kernel-stamps"],
        stdout=subprocess.PIPE, text=True)
    os.sched_setaffinity(ruler.pid, {server_core})
    work = Path(tempfile.mkdtemp(prefix="client-capacity-"))
    try:
        ruler.stdout.readline()
        os.sched_setaffinity(0, {client_core})
        tok = work / "tokenizer"
        tok.mkdir()
        shutil.copy(ROOT / "engine" / "render" / "data" / "tokenizer.json", tok)
        (tok / "tokenizer_config.json").write_text('{"tokenizer_class": '
                                                   '"PreTrainedTokenizerFast"}')
        use_aiperf = not a.no_aiperf and AIPERF.exists()
        print(f"ruler: first event {TTFT_MS:g} ms after arrival, then every {ITL_MS:g} ms, "
              f"{OUTPUT} events per request; client on core {client_core}, ruler on core "
              f"{server_core}" + ("" if use_aiperf else "; aiperf not run"))
        print("client   rate  events/s  events/cpu-s  busy  ttft50ms ttft99ms  itl99ms  "
              "late99ms failed")
        both = {}
        for rate in rates:
            mine = ours(url, rate, a.seconds)
            print(row("ours", rate, mine), flush=True)
            if use_aiperf:
                other = theirs(url, rate, a.seconds, tok, work, client_core)
                print(row("aiperf", rate, other), flush=True)
                both[rate] = (mine, other)
        if both:
            rate = max(both)
            mine, other = both[rate]
            per_core = (mine["events"] / mine["cpu_s"]) / (other["events"] / other["cpu_s"])
            err = mine["ttft_p99"] / other["ttft_p99"] if other["ttft_p99"] else float("nan")
            print(f"at {rate:g} req/s: events per client core ours/aiperf {per_core:.2f}x "
                  f"(goal >= 1.5x); p99 TTFT error ours/aiperf {err:.2f} (goal <= 1)")
    finally:
        ruler.terminate()
        ruler.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
