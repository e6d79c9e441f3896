"""A deployment the sweep starts is measured only once every instance is up, not when its
front first answers (a front answers before the instances behind it have loaded: vLLM takes
about a minute), and an instance that dies while loading ends the wait at once."""

import sys
import time
import urllib.request

import pytest

from advisor.engines.placement import Placement
from advisor.engines.processes import started
from advisor.errors import UsageError
from engine.processes.children import free_port

pytestmark = pytest.mark.slow  # two deployments started and waited for, ~12 s
LOAD_S = 3.0  # the instance's load time, here


SERVER = f"{sys.executable} -m advisor.testing.scripted_server --ttft-ms 5 --itl-ms 1"


def _deployment(name: str, instance_cmd: str) -> Placement:
    """A front that answers at once beside one instance started by `instance_cmd` (PORT in
    it: the instance's port)."""
    front, instance = free_port(), free_port()
    cmd = f"{instance_cmd.replace('PORT', str(instance))} & {SERVER} --port {front}"
    return Placement(name, name.split("-", maxsplit=1)[0], url=f"http://127.0.0.1:{front}", cmd=cmd,
                     instances=(f"http://127.0.0.1:{instance}",))


def test_the_sweep_waits_for_an_instance_that_loads_after_its_front_answers(tmp_path):
    p = _deployment("disagg-1p1d", f"sh -c 'sleep {LOAD_S}; exec {SERVER} --port PORT'")
    t0 = time.monotonic()
    with started(p, tmp_path, None, None, 60):
        waited = time.monotonic() - t0
        with urllib.request.urlopen(p.instances[0] + "/health", timeout=5) as r:
            assert r.status == 200
    assert waited >= LOAD_S


def test_an_instance_that_dies_while_loading_ends_the_wait_naming_the_log(tmp_path):
    p = _deployment("collocated-1", "sh -c 'sleep 2; exit 3'")
    t0 = time.monotonic()
    gone = r"a process of collocated-1 exited before .*collocated-1\.log"
    with pytest.raises(UsageError, match=gone), started(p, tmp_path, None, None, 60):
        pass
    assert time.monotonic() - t0 < 20
