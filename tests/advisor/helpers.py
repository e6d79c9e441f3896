"""A scripted server (known timing) in its own process, and a workload builder."""

import contextlib
import json
import urllib.request

from engine.launch import serve_module
from workloads.arrivals import Arrivals
from workloads.lengths import LengthDist
from workloads.spec import SyntheticSpec, synthesize


@contextlib.contextmanager
def scripted(ttft_ms=50, itl_ms=10, fail_every=0):
    with serve_module("engine.scripted_server", ["--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms),
                                                 "--fail-every", str(fail_every)]) as url:
        yield url


def received(url: str) -> list[dict]:
    """What the scripted server got: [{"body", "timing": {"arrived", "writes"}}]."""
    with urllib.request.urlopen(url + "/debug/requests") as r:
        return json.load(r)


def workload(n=20, out=5, rate=50.0, inp=10, turns=1, seed=0):
    return synthesize(SyntheticSpec(input=LengthDist("fixed", inp), output=LengthDist("fixed", out),
                                    arrivals=Arrivals("poisson", rate), num_prompts=n, turns=turns),
                      seed)
