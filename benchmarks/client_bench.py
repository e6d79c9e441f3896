"""How punctually the open-loop client sends, and how fast one client core can go.

Against the scripted server (first token after 1 ms, 4 tokens), prints the p99
lateness of sends (dispatched - scheduled) at 200 req/s (goal: < 2 ms), then
doubles the rate until p99 lateness passes 2 ms and reports the largest rate
that kept it. The client runs pinned to one core, the server on the others.

Usage: python benchmarks/client_bench.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os

import numpy as np

from advisor.measure.client import Client
from advisor.measure.records import Endpoint
from engine.processes.launch import serve_module
from workloads.arrivals import Arrivals
from workloads.lengths import LengthDist
from workloads.spec import SyntheticSpec, synthesize

GOAL_MS = 2.0


def p99_lateness_ms(url: str, rate: float, seconds: float) -> tuple[float, int]:
    """(p99 lateness in ms, failed requests) of a Poisson run at `rate`."""
    spec = SyntheticSpec(
        input=LengthDist("fixed", 16),
        output=LengthDist("fixed", 4),
        arrivals=Arrivals("poisson", rate),
        num_prompts=max(50, int(rate * seconds)),
    )
    run = asyncio.run(Client(Endpoint(url, "scripted", timeout_s=30)).run(synthesize(spec, 0)))
    late = [r.dispatched - r.scheduled for r in run.records if r.dispatched]
    return float(np.percentile(late, 99)) * 1000, sum(not r.ok for r in run.records)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seconds", type=float, default=5.0, help="length of each rate's run")
    args = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    client_core, server_cores = cores[:1], cores[1:] or cores
    with serve_module(
        "advisor.testing.scripted_server", ["--ttft-ms", "1", "--itl-ms", "1"], cores=server_cores
    ) as url:
        os.sched_setaffinity(0, client_core)
        p99, failed = p99_lateness_ms(url, 200.0, args.seconds)
        print(
            f"200 req/s: p99 send lateness {p99:.2f} ms ({p99 / GOAL_MS:.2f} of the {GOAL_MS:g} ms "
            f"goal), {failed} failed"
        )
        rate, best = 200.0, 200.0 if p99 < GOAL_MS else None
        while p99 < GOAL_MS and rate < 10_000:
            rate *= 2
            p99, failed = p99_lateness_ms(url, rate, args.seconds)
            print(f"{rate:6.0f} req/s: p99 send lateness {p99:.2f} ms, {failed} failed")
            if p99 < GOAL_MS:
                best = rate
        print(
            f"largest rate one client core sustains with p99 lateness < {GOAL_MS:g} ms: "
            f"{best if best is not None else 'none'} req/s (doubling from 200)"
        )


if __name__ == "__main__":
    main()
