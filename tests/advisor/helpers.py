"""A scripted server (known timing) in its own process, and a workload builder."""

import contextlib
import json
import os
import urllib.request

from engine.processes.launch import serve_module
from workloads.arrivals import Arrivals
from workloads.lengths import LengthDist
from workloads.spec import SyntheticSpec, synthesize


@contextlib.contextmanager
def scripted(ttft_ms=50, itl_ms=10, fail_every=0, cores=None, wake_ms_per_s=0.0, stall_ms=0.0,
             max_model_len=0, lists_context=True):
    with serve_module(
        "advisor.testing.scripted_server",
        ["--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms), "--fail-every", str(fail_every),
         "--wake-ms-per-s", str(wake_ms_per_s), "--stall-ms", str(stall_ms),
         "--max-model-len", str(max_model_len),
         *([] if lists_context else ["--unlisted-context"])],
        cores=cores,
    ) as url:
        yield url


@contextlib.contextmanager
def pinned_apart():
    """Yield the server's cores with this process pinned to another one (as a measuring
    client should be: sharing cores adds scheduler delays to both sides), then restore."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        yield None
        return
    os.sched_setaffinity(0, cores[:1])
    try:
        yield cores[1:]
    finally:
        os.sched_setaffinity(0, cores)


def received(url: str) -> list[dict]:
    """What the scripted server got: [{"body", "timing": {"arrived", "writes"}}]."""
    with urllib.request.urlopen(url + "/debug/requests") as r:
        return json.load(r)


def workload(n=20, out=5, rate=50.0, inp=10, turns=1, seed=0):
    return synthesize(
        SyntheticSpec(
            input=LengthDist("fixed", inp),
            output=LengthDist("fixed", out),
            arrivals=Arrivals("poisson", rate),
            num_prompts=n,
            turns=turns,
        ),
        seed,
    )
