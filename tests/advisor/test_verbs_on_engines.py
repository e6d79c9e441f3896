"""bench, serve and probe with --engine (advisor.verbs through advisor.engines). Their flags
are checked before anything starts, --engine by one parser on every verb. `advisor bench
--engine` starts the server (the bundled engine, or vLLM), measures it, records it and stops
it; `advisor probe --engine bundled` checks a 1P1D's transfers. The vLLM here is a stand-in
on PATH (its version answer is made up; its `vllm serve` runs the bundled engine on the same
preset), so the test needs no vLLM; the same path against real vLLM is the sweep's, tested
in tests/vllm."""

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from advisor.deploy.vllm import PROXY_OFFSET
from advisor.engines.vllm.runtime import ports_free
from advisor.measure.bench_options import BenchOptions
from advisor.measure.ready import wait_ready
from advisor.probe.options import ProbeOptions
from advisor.verbs.bench import bench
from advisor.verbs.probe import probe
from engine.processes.children import free_port
from tests.cli import advisor, advisor_here, said

pytestmark = pytest.mark.integration

STAND_IN = """\
import os, sys
args = sys.argv[1:]
assert args[0] == "serve", args
flags = dict(zip(args[2::2], args[3::2]))
os.execv({python!r}, [{python!r}, "-m", "engine.serve.server", "--model", "mini",
                      "--port", flags["--port"], "--host", flags["--host"],
                      "--dtype", flags["--dtype"], "--max-model-len", flags["--max-model-len"]])
"""


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """A `vllm` on PATH whose interpreter says it is vLLM 0.0.0+standin."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\n[ "$1" = "-c" ] && {{ echo vllm 0.0.0+standin; exit 0; }}\n'
                      f'exec {sys.executable} "$@"\n')
    vllm = bin_dir / "vllm"
    vllm.write_text(f"#!{python}\n" + STAND_IN.format(python=sys.executable))
    for f in (python, vllm):
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


@pytest.mark.parametrize("args,needle", [
    (("bench", "--engine", "sglang"), "--engine must be bundled or vllm"),
    (("sweep", "--engine", "sglang"), "--engine must be bundled or vllm"),
    (("serve", "--engine", "none"), "--engine must be bundled or vllm"),
    (("bench", "--engine", "vllm", "--base-url", "http://127.0.0.1:9"), "--engine starts"),
    (("probe", "--engine", "vllm", "--transfer-check", "http://127.0.0.1:9"), "--engine starts"),
    (("serve", "--engine", "vllm", "--mode", "render"), "--mode render: --engine vllm"),
    (("serve", "--engine", "vllm", "--model", "tiny"), "--model tiny: vLLM's CPU attention"),
    (("serve", "--engine", "vllm", "--port", "1100"), "--port 1100: --engine vllm")])
def test_flags_are_checked_before_anything_starts(args, needle):
    r = advisor_here(*args)
    assert r.returncode == 2 and needle in r.stderr + r.stdout


def test_the_first_case_through_the_users_way_in():
    r = advisor("bench", "--engine", "sglang", timeout=60)
    assert r.returncode == 2
    assert said(r.stderr) == ["advisor: error: --engine must be bundled or vllm, not 'sglang'"]


@pytest.mark.slow
def test_bench_starts_the_server_measures_records_and_stops_it(stand_in):
    out = stand_in / "bench"
    bench(BenchOptions(engine="vllm", num_prompts=4, random_input_len=32,
                       random_output_len=4, request_rate=8.0, result_dir=str(out),
                       ready_timeout=120))
    saved = json.loads((out / "result.json").read_text())
    assert (saved["completed"], saved["failed"]) == (4, 0)
    manifest = saved["manifest"]
    assert (manifest["engine"]["name"], manifest["engine"]["version"]) == ("vllm", "0.0.0+standin")
    [script] = manifest["engine"]["commands"].values()
    assert "vllm serve " in script and "--served-model-name mini" in script
    front = saved["base_url"]
    with pytest.raises(urllib.error.URLError):  # stopped with the measurement
        urllib.request.urlopen(front + "/health", timeout=2)


def test_bench_starts_the_bundled_engine_measures_and_stops_it(tmp_path):
    out = tmp_path / "bench"
    bench(BenchOptions(engine="bundled", model="tiny", num_prompts=4, random_input_len=16,
                       random_output_len=4, request_rate=8.0, result_dir=str(out),
                       ready_timeout=120))
    saved = json.loads((out / "result.json").read_text())
    assert (saved["completed"], saved["failed"]) == (4, 0)
    assert saved["model_id"] == "tiny" and "engine" not in saved["manifest"]
    with pytest.raises(urllib.error.URLError):  # stopped with the measurement
        urllib.request.urlopen(saved["base_url"] + "/health", timeout=2)


def test_probe_checks_the_transfers_of_a_bundled_pd_it_starts(capsys):
    probe(ProbeOptions(engine="bundled", model="tiny", check_prompts=2,
                       check_prompt_tokens=64, wakeup_idle_s=0, link_mb=1, as_json=True))
    check = json.loads(capsys.readouterr().out)["transfer_check"]
    assert (check["transfers"], check["failed_requests"]) == (2, 0), check


@pytest.mark.slow
def test_serve_puts_the_front_on_port_and_stops_everything_on_sigint(stand_in):
    port = free_port_above(PROXY_OFFSET + 1024)
    proc = subprocess.Popen([sys.executable, "-m", "advisor.cli", "serve", "--engine", "vllm",
                             "--replicas", "1", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_ready(f"http://127.0.0.1:{port}", None, timeout_s=120)
        instance = f"http://127.0.0.1:{port - PROXY_OFFSET}"
        body = json.dumps({"model": "mini", "prompt": [5, 6, 7], "max_tokens": 3}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            assert json.loads(r.read())["usage"]["completion_tokens"] == 3
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "stopped; all instances are down." in out
    for url in (f"http://127.0.0.1:{port}", instance):
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(url + "/health", timeout=2)


def free_port_above(low: int) -> int:
    """A port whose vLLM layout below it (from port - PROXY_OFFSET) is free too."""
    for _ in range(100):
        port = free_port()
        if port > low and ports_free([port, port - PROXY_OFFSET, port - PROXY_OFFSET + 400]):
            return port
    raise RuntimeError("no free port")
