"""A deployment the sweep starts is measured only once every instance is up, not when its
front first answers (a front answers before the instances behind it have loaded: vLLM takes
about a minute), and an instance that dies while loading ends the wait at once."""

import sys
import time
import urllib.request

import pytest

from advisor.errors import UsageError
from advisor.goodput.placements import Placement
from advisor.sweep.deployments import started
from engine.processes.children import free_port

pytestmark = pytest.mark.integration
LOAD_S = 3.0  # the instance's load time, here


def test_the_sweep_waits_for_an_instance_that_loads_after_its_front_answers(tmp_path):
    front, instance = free_port(), free_port()
    server = f"{sys.executable} -m advisor.testing.scripted_server --ttft-ms 5 --itl-ms 1"
    cmd = f"sh -c 'sleep {LOAD_S}; exec {server} --port {instance}' & {server} --port {front}"
    p = Placement("disagg-1p1d", "disagg", url=f"http://127.0.0.1:{front}", cmd=cmd,
                  instances=(f"http://127.0.0.1:{instance}",))
    t0 = time.monotonic()
    with started(p, tmp_path, None, None, 60):
        waited = time.monotonic() - t0
        with urllib.request.urlopen(p.instances[0] + "/health", timeout=5) as r:
            assert r.status == 200
    assert waited >= LOAD_S


def test_an_instance_that_dies_while_loading_ends_the_wait_naming_the_log(tmp_path):
    front, instance = free_port(), free_port()
    server = f"{sys.executable} -m advisor.testing.scripted_server --ttft-ms 5 --itl-ms 1"
    cmd = f"sh -c 'sleep 2; exit 3' & {server} --port {front}"
    p = Placement("collocated-1", "collocated", url=f"http://127.0.0.1:{front}", cmd=cmd,
                  instances=(f"http://127.0.0.1:{instance}",))
    t0 = time.monotonic()
    gone = r"a process of collocated-1 exited before .*collocated-1\.log"
    with pytest.raises(UsageError, match=gone), started(p, tmp_path, None, None, 60):
        pass
    assert time.monotonic() - t0 < 20
