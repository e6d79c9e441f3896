"""The measuring client in several processes, for loads one event loop cannot keep up with.

Conversations are dealt round-robin, in start order, to N processes, each with its own
event loop and connection pool (a conversation's turns stay in one process: each turn is
built from the replies before it). One clock serves them all: time.monotonic() is the
host's CLOCK_MONOTONIC, the same in every process, so the parent sets the schedule's t=0
once every worker has started (and sent its warm-ups) and each sends its conversations at
t=0 + their start; the records merge as they are, as if one client had sent them.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing as mp
import os
import time
from collections.abc import Callable, MutableSequence
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import cast

from advisor.errors import UsageError
from advisor.measure.client import START_LEAD_S, Client
from advisor.measure.records import ClientRun, Endpoint, RequestRecord
from workloads.spec import Workload

READY_TIMEOUT_S = 120.0
POLL_S = 0.1


def default_workers(engines_here: bool) -> int:
    """As many client processes as the host's cores allow: 1 where they share at most two
    cores with each other or with engines on this host, else half the cores (up to 8)."""
    cores = len(os.sched_getaffinity(0))
    return 1 if engines_here or cores <= 2 else min(8, cores // 2)


def deal(workload: Workload, n: int) -> list[Workload]:
    """`workload`'s conversations dealt round-robin in start order to `n` workloads (fewer
    when there are fewer conversations), each keeping the schedule's times."""
    convs = sorted(workload.conversations, key=lambda c: c.start)
    return [replace(workload, conversations=convs[i::n]) for i in range(min(n, len(convs)))]


def run_workers(endpoint: Endpoint, workload: Workload, n: int, warmups: int = 0,
                max_concurrency: int | None = None,
                progress: Callable[[int], None] | None = None) -> ClientRun:
    """Send `workload` from `n` processes; one ClientRun of every record. A concurrency
    cap is divided among them (each takes its share, rounded up)."""
    parts = deal(workload, n)
    cap = math.ceil(max_concurrency / len(parts)) if max_concurrency else None
    ctx = mp.get_context("spawn")  # a forked child would inherit the parent's threads
    counts = ctx.Array("i", len(parts), lock=False)  # requests done, one slot per worker
    pipes, procs = [], []
    try:
        for i, part in enumerate(parts):
            ours, theirs = ctx.Pipe()
            proc = ctx.Process(target=_worker, name=f"client-{i}", daemon=True,
                               args=(endpoint, part, warmups if i == 0 else 0, cap, theirs,
                                     counts, i))
            proc.start()
            pipes.append(ours)
            procs.append(proc)
        for i, pipe in enumerate(pipes):
            if not _ready(pipe):
                raise UsageError(f"client worker {i} did not start within {READY_TIMEOUT_S:g} "
                                 f"s (exit code {procs[i].exitcode})")
        start = time.monotonic() + START_LEAD_S
        for pipe in pipes:
            pipe.send(start)
        runs: dict[int, ClientRun] = {}
        told = 0
        while len(runs) < len(pipes):
            for i, pipe in enumerate(pipes):
                if i not in runs and pipe.poll(POLL_S / len(pipes)):
                    runs[i] = pipe.recv()
            if progress is not None and (done := sum(counts)) > told:
                progress(done - told)
                told = done
            dead = [i for i, p in enumerate(procs) if i not in runs and not p.is_alive()
                    and not pipes[i].poll()]
            if dead:
                raise UsageError(f"client worker {dead[0]} ended without its records "
                                 f"(exit code {procs[dead[0]].exitcode})")
        return merge([runs[i] for i in range(len(pipes))], start)
    finally:
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _ready(pipe: Connection) -> bool:
    """Whether a worker said it is ready (False: silent, or gone before it could)."""
    try:
        return pipe.poll(READY_TIMEOUT_S) and pipe.recv() == "ready"
    except (EOFError, OSError):
        return False


def merge(runs: list[ClientRun], start: float) -> ClientRun:
    """One run from the workers' runs on one clock, CPU summed (`workers` says over how
    many processes)."""
    return ClientRun.of([r for run in runs for r in run.records], start,
                        sum(run.cpu_s for run in runs),
                        [lag for run in runs for lag in run.loop_lags], len(runs))


def _worker(endpoint: Endpoint, workload: Workload, warmups: int, cap: int | None,
            pipe: Connection, counts: MutableSequence[int], slot: int) -> None:
    def done(rec: RequestRecord) -> None:
        if not rec.warmup:
            counts[slot] += 1

    def clock() -> float:  # after the warm-ups: the parent's t=0, shared by every worker
        pipe.send("ready")
        return cast("float", pipe.recv())

    run = asyncio.run(Client(endpoint, cap, on_done=done).run(workload, warmups, clock))
    pipe.send(run)
