"""Run directories someone hands over (issue 67, item 1), at the scale each was found: the
numbers in them are bounded where they are read, so `advisor deploy` and `advisor
recommend` answer each with one line naming the file and field (or a bounded result),
within seconds and a few tens of MB. Before: a front-end CPU of 1e15 ms per request grew
the render-server list to a MemoryError, placement names of 11-digit counts were
MemoryError tracebacks and collocated-5000 printed 5,000 GPU pods, a 60p60d on a 120-GPU
P2P matrix searched for minutes, and an unknown GPU vendor was a KeyError."""

import json
import time
import tracemalloc

import pytest

from advisor.decide.recommend import run_recommend
from advisor.deploy import llmd
from advisor.deploy.run import DeployOptions, run_deploy
from advisor.errors import UsageError
from advisor.rundata.bounds import MAX_RENDER_SERVERS
from advisor.rundata.evidence import (
    Calibration,
    Evidence,
    FrontendEvidence,
    PlacementEvidence,
    WorkloadEvidence,
)
from advisor.rundata.manifest import Manifest
from advisor.rundata.recommendation import Recommendation
from advisor.rundata.rundir import RunDir
from advisor.rundata.slo import Slo
from tests.adversarial.memory_cap import memory_cap  # noqa: F401  (a fixture)
from tests.cli import advisor, said

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("memory_cap")]
LIMIT_S, LIMIT_MB = 10.0, 300


def handed(tmp_path, action="disaggregate", **config):
    """A plan-like run directory as advisor writes it, to be tampered with."""
    r = RunDir(tmp_path / "run")
    r.write_manifest(Manifest.new(0, {"model": "qwen2.5-7b", "device": "cuda", **config}))
    r.write_evidence(Evidence(
        Slo.of(2000, 50), PlacementEvidence("collocated-2", 1.0),
        WorkloadEvidence(mean_prompt_tokens=2000, concurrency=2.0),
        disaggregated=PlacementEvidence("disagg-1p1d", 2.0),
        frontend=FrontendEvidence(cpu_ms_per_request=5.0),
        calibration=Calibration([500, 1000, 2000], [55, 80, 130], [1, 8], [20, 24], 0.05, 30.0)))
    r.write_recommendation(Recommendation(action, [], ["split-render-tier"], None, [], {}))
    return r


def tamper(r, name, change):
    path = r.path / name
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def bounded(fn):
    """`fn()`'s result or its UsageError, in bounded time and memory."""
    tracemalloc.start()
    start = time.monotonic()
    try:
        return fn()
    except UsageError as e:
        assert "\n" not in str(e)
        return e
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert time.monotonic() - start < LIMIT_S and peak < LIMIT_MB << 20, peak


def deploy(r, **opts):
    return bounded(lambda: run_deploy(str(r.path), DeployOptions(**opts)))


@pytest.mark.parametrize("ms", [1e15, 1e8])
def test_a_front_end_cpu_past_an_hour_a_request_is_refused(tmp_path, capsys, ms):
    r = handed(tmp_path)
    tamper(r, "evidence.json", lambda d: d["frontend"].update(cpu_ms_per_request=ms))
    e = deploy(r, format="k8s")
    assert isinstance(e, UsageError) and "frontend: cpu_ms_per_request must be 0 to" in str(e)


def test_render_servers_are_at_most_a_hosts_cores(tmp_path, capsys):
    r = handed(tmp_path)
    tamper(r, "evidence.json", lambda d: (d["frontend"].update(cpu_ms_per_request=3e6),
                                          d["disaggregated"].update(max_goodput_rps=1e6)))
    out = deploy(r, format="sh")
    [split] = [p for p in out.plans if p.placement == "render-split"]
    assert sum(c.role == "render" for c in split.commands) == MAX_RENDER_SERVERS
    assert any(f"at most {MAX_RENDER_SERVERS}" in n for n in split.notes)


@pytest.mark.parametrize("name", ["collocated-100000000000", "disagg-1p1d-tp10000000000-1",
                                  "disagg-100000000000p1d", "collocated-5000"])
def test_placement_names_with_counts_past_the_ceilings_are_refused(tmp_path, capsys, name):
    r = handed(tmp_path)
    side = "disaggregated" if name.startswith("disagg") else "collocated"
    tamper(r, "evidence.json", lambda d: d[side].update(placement=name))
    for verb in (lambda: run_deploy(str(r.path), DeployOptions(format="k8s")),
                 lambda: run_recommend(str(r.path))):
        e = bounded(verb)
        assert isinstance(e, UsageError) and f"{side}: placement {name!r}" in str(e)


def test_a_candidate_of_tp_1e10_and_a_3e6_node_plan_are_refused(tmp_path, capsys):
    r = handed(tmp_path)
    tamper(r, "manifest.json", lambda d: d.update(plan={
        "gpu": {"name": "h100"}, "link": {}, "candidates": [
            {"name": "collocated-1-tp8", "kind": "collocated", "tp": 10**10}]}))
    assert "plan.candidates[0]: tp must be 1 to 64" in str(deploy(r))
    tamper(r, "manifest.json", lambda d: (d.pop("plan"), d.update(simulated="plan"),
                                          d["config"].update(gpus=8, nodes=3_000_000)))
    assert "config: nodes must be 1 to" in str(deploy(r))
    tamper(r, "manifest.json", lambda d: d["config"].update(gpus="A" * 1000, nodes=1))
    assert "config.gpus must be an integer" in str(deploy(r))


@pytest.mark.parametrize("plan,needle", [
    ({"gpu": {"name": "x", "vendor": "acme"}, "link": {}, "candidates": []},
     "plan.gpu.vendor 'acme' is none of"),
    ({"gpu": {"name": "x"}, "link": {}, "candidates": "x"}, "plan.candidates must be a list"),
    ({"gpu": {"name": "x"}, "link": {}, "candidates": [], "vllm": "0.1; rm -rf /"},
     "no version as vLLM writes one")])
def test_a_plans_hostile_parts_are_one_line(tmp_path, capsys, plan, needle):
    r = handed(tmp_path)
    tamper(r, "manifest.json", lambda d: d.update(plan=plan))
    assert needle in str(deploy(r, format="k8s"))


def test_an_engine_version_is_no_image_tag_as_written(tmp_path, capsys):
    r = handed(tmp_path)
    tamper(r, "manifest.json", lambda d: d.update(engine={
        "name": "vllm", "distribution": "vllm", "version": "latest\nimage: evil",
        "python": "p", "model_dir": "m"}))
    assert "engine.version 'latest\\nimage: evil' is no version" in str(deploy(r, format="k8s"))


@pytest.mark.parametrize("per_token", [1e-320, 1e-200])
def test_a_prefill_line_of_almost_no_cost_gives_a_bounded_threshold(tmp_path, per_token):
    ev = Evidence(Slo.of(2000, 50), PlacementEvidence("collocated-2", 1.0),
                  WorkloadEvidence(mean_prompt_tokens=2000, concurrency=2.0),
                  calibration=Calibration([500], [55], [1], [20], per_token, 30.0))
    assert llmd.threshold(ev).tokens == llmd.MAX_THRESHOLD


@pytest.mark.parametrize("gpus,shape", [(32, "16p16d"), (120, "60p60d")])
def test_placing_a_large_pd_on_a_p2p_matrix_is_bounded_by_total_work(tmp_path, capsys, gpus,
                                                                      shape):
    r = handed(tmp_path)
    status = [["X" if i == j else ("OK" if (i + j) % 3 else "NS") for j in range(gpus)]
              for i in range(gpus)]
    p2p = {"source": "given", "gpus": [f"GPU{i}" for i in range(gpus)], "status": status,
           "used": [], "p2p_pairs": [], "placed": "unknown"}
    tamper(r, "evidence.json", lambda d: (d.update(p2p=p2p),
                                          d["disaggregated"].update(placement=f"disagg-{shape}")))
    out = deploy(r, format="sh")
    assert not isinstance(out, UsageError) and any(p.placement.startswith("disagg")
                                                   for p in out.plans)


@pytest.mark.integration
def test_the_cli_says_one_line(tmp_path):
    r = handed(tmp_path)
    tamper(r, "evidence.json", lambda d: d["collocated"].update(placement="collocated-5000"))
    out = advisor("deploy", str(r.path), "--format", "k8s", timeout=60)
    assert out.returncode == 2 and len(said(out.stderr)) == 1, out.stderr
    assert "collocated-5000" in out.stderr and "Traceback" not in out.stderr
