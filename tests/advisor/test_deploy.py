"""`advisor deploy`: the commands checked against the flags and wiring vLLM's docs give, for
every action of the decision table in every format (the JSON inside --kv-transfer-config
and the YAML parsed, not matched as strings), on one host or several."""

import json
import shlex
from pathlib import Path

import pytest
import yaml

from advisor.deploy import kube
from advisor.deploy.advice import Where, parsers_for, section
from advisor.deploy.run import DeployOptions, run_deploy
from advisor.deploy.shell import as_shell
from advisor.deploy.vllm import MULTITURN_PROXY, TOY_PROXY, Site, disaggregated, render_split
from advisor.probe import p2p
from advisor.rundata.evidence import (
    Evidence,
    FrontendEvidence,
    PlacementEvidence,
    WorkloadEvidence,
)
from advisor.rundata.manifest import Manifest
from advisor.rundata.recommendation import Recommendation
from advisor.rundata.rundir import RunDir
from advisor.rundata.slo import Slo
from tests.cli import advisor, advisor_here

pytestmark = pytest.mark.unit

FIX = Path(__file__).parent / "fixtures"


def cfg(cmd) -> dict:
    return json.loads(cmd.argv[cmd.argv.index("--kv-transfer-config") + 1])


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_disaggregated_is_wired_as_vllms_docs_wire_it():
    plan = disaggregated("Qwen/Qwen2.5-7B-Instruct", [[0], [1], [2]], prefill=1, decode=2)
    pre, *decs, proxy = plan.commands
    assert pre.argv[:3] == ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]
    assert cfg(pre) == {"kv_connector": "NixlConnector", "kv_role": "kv_producer",
                        "kv_load_failure_policy": "fail"}
    assert all(cfg(d)["kv_role"] == "kv_consumer" for d in decs)
    envs = [c.env for c in (pre, *decs)]
    assert [e["VLLM_NIXL_SIDE_CHANNEL_PORT"] for e in envs] == ["5600", "5601", "5602"]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "1", "2"]
    # prefix caching at vLLM's default, as an operator runs it
    assert not any("prefix-caching" in a for c in (pre, *decs) for a in c.argv)
    a = proxy.argv
    assert a[:2] == ["python", TOY_PROXY] and flag(a, "--port") == "8192"
    assert a[a.index("--decoder-ports") + 1:] == ["8200", "8201"]
    assert flag(a, "--prefiller-ports") == "8100" and flag(a, "--prefiller-hosts") == "localhost"
    assert any("source tree" in n for n in plan.notes)


def test_bidirectional_turns_the_transfer_on_both_sides_behind_a_multi_turn_proxy():
    plan = disaggregated("m", [[0], [1]], 1, 1, bidirectional=True,
                         site=Site(ucx_devices=("mlx5_0:1", "mlx5_1:1")))
    pre, dec, proxy = plan.commands
    for c, role, dev in ((pre, "kv_producer", "mlx5_0:1"), (dec, "kv_consumer", "mlx5_1:1")):
        assert cfg(c)["kv_role"] == role  # explicit roles: kv_both is deprecated for NIXL
        assert cfg(c)["kv_connector_extra_config"] == {"bidirectional_kv_xfer": True}
        assert c.env["UCX_NET_DEVICES"] == dev
    assert proxy.argv[1] == MULTITURN_PROXY and plan.placement == "disaggregated-bidirectional"
    ours = disaggregated("m", [[0], [1]], 1, 1, bidirectional=True, proxy="advisor")
    a = ours.commands[-1].argv
    assert a[:2] == ["advisor", "proxy"] and "--bidirectional" in a
    assert flag(a, "--prefill") == "http://localhost:8100"
    assert flag(a, "--decode") == "http://localhost:8200"


def test_hosts_take_the_instances_in_turn_with_their_side_channel_hosts():
    plan = disaggregated("m", [[0], [0], [1], [1]], 2, 2, site=Site(hosts=("h1", "h2")))
    pre1, pre2, dec1, dec2, proxy = plan.commands
    assert [c.host for c in plan.commands] == ["h1", "h2", "h1", "h2", "h1"]
    assert [c.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] for c in (pre1, pre2, dec1, dec2)] == \
        ["h1", "h2", "h1", "h2"]
    # ports and side channels count per host
    assert [flag(c.argv, "--port") for c in (pre1, pre2, dec1, dec2)] == \
        ["8100", "8100", "8200", "8200"]
    assert [c.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] for c in (pre1, pre2, dec1, dec2)] == \
        ["5600", "5600", "5601", "5601"]
    a = proxy.argv
    assert a[a.index("--prefiller-hosts") + 1:a.index("--prefiller-ports")] == ["h1", "h2"]
    assert a[a.index("--decoder-hosts") + 1:a.index("--decoder-ports")] == ["h1", "h2"]
    script = as_shell(section(advice("disaggregate"), None, "disagg-2p2d", "qwen2.5-7b",
                              Where(site=Site(hosts=("h1", "h2"))), None, None))
    assert "# on h1:" in script and "# on h2:" in script


def test_render_split_runs_render_servers_tokens_only_engines_and_the_front():
    plan = render_split("Qwen/Qwen3-0.6B", [[0], [1]], frontend_cpu_ms=15.0, peak_rps=150.0,
                        parsers=parsers_for("qwen3-0.6b"))
    renders = [c for c in plan.commands if c.role == "render"]
    engines = [c for c in plan.commands if c.role == "engine"]
    (front,) = [c for c in plan.commands if c.role == "front"]
    assert len(renders) == 3  # 2.25 cores of front-end CPU: three servers of about one each
    assert all(c.argv[:4] == ["vllm", "launch", "render", "Qwen/Qwen3-0.6B"] for c in renders)
    assert all(flag(c.argv, "--reasoning-parser") == "qwen3" for c in renders)
    assert all(flag(c.argv, "--tool-call-parser") == "hermes" for c in renders)
    assert all("--tokens-only" in c.argv and "--reasoning-parser" not in c.argv
               for c in engines)
    a = front.argv
    assert a[:3] == ["python", "-m", "engine.fronts.render_front"]
    assert a[a.index("--render") + 1:a.index("--engine")] == [
        f"http://localhost:{flag(c.argv, '--port')}" for c in renders]
    assert a[a.index("--engine") + 1:] == [
        f"http://localhost:{flag(c.argv, '--port')}" for c in engines]


def test_parser_flags_come_from_the_models_family_or_its_config(tmp_path):
    assert parsers_for("llama-3.1-8b")[-1] == "llama3_json"
    assert parsers_for("Qwen/Qwen2.5-7B-Instruct")[-1] == "hermes"
    assert parsers_for("tiny") == ()
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    assert parsers_for(str(tmp_path))[:2] == ("--reasoning-parser", "qwen3")


def advice(action: str, secondary: tuple[str, ...] = ()) -> Recommendation:
    """A recommendation of `action` and nothing else, as `section` reads one."""
    return Recommendation(action, [], list(secondary), None, [], {})


# the decision table's seven rows and the action each gives
ROWS = {"itl_p99_misses_slo": "disaggregate",
        "long_prompts_high_concurrency": "disaggregate",
        "growing_context_loops": "disaggregate-bidirectional",
        "frontend_cpu_heavy": "split-render-tier",
        "ttft_binding": "measure-first",
        "kv_transfer_slow": "fix-transfer",
        "low_bursty_or_insensitive": "stay-collocated"}
RECOMMENDED = {"disaggregate": "disaggregated",
               "disaggregate-bidirectional": "disaggregated-bidirectional",
               "split-render-tier": "render-split", "measure-first": None,
               "fix-transfer": "collocated", "stay-collocated": "collocated"}


def run_dir(tmp_path, action: str, matrix: str | None = None) -> RunDir:
    """A finished run of 2 collocated replicas and 1P1D advising `action`."""
    run = RunDir(tmp_path / "run")
    run.write_manifest(Manifest.new(0, {"model": "qwen2.5-7b"}))
    ev = Evidence(Slo.of(2000, 50), PlacementEvidence("collocated-2", max_goodput_rps=1.0),
                  WorkloadEvidence(mean_prompt_tokens=2000, concurrency=2.0),
                  disaggregated=PlacementEvidence("disagg-1p1d", max_goodput_rps=2.0),
                  frontend=FrontendEvidence(cpu_ms_per_request=15.0))
    if matrix:
        from advisor.probe.p2p_pairs import evidence, place
        m = p2p.parse((FIX / matrix).read_text())
        ev = Evidence(**{**ev.__dict__, "p2p": evidence(m, matrix, place(m, [0, 1, 2, 3], 1, 1),
                                                       "qwen2.5-7b", 2000)})
    run.write_evidence(ev)
    run.write_recommendation(advice(action))
    return run


@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("fmt", ["sh", "json", "k8s", "llm-d"])
def test_every_action_in_every_format(tmp_path, capsys, row, fmt):
    action = ROWS[row]
    out = run_deploy(str(run_dir(tmp_path, action).path), DeployOptions(format=fmt))
    text = capsys.readouterr().out
    assert out.recommended == RECOMMENDED[action]
    placements = [p.placement for p in out.plans]
    assert placements[:2] == ["collocated", "disaggregated-bidirectional"
                              if action == "disaggregate-bidirectional" else "disaggregated"]
    assert ("render-split" in placements) == (action == "split-render-tier")
    commands = {c.role: c for p in out.plans for c in p.commands}
    if fmt == "sh":
        lines = [ln.removesuffix(" &") for ln in text.splitlines() if ln.startswith(("CUDA", "vllm",
                                                                                   "python"))]
        pre = next(shlex.split(ln) for ln in lines if "kv_producer" in ln)
        assert json.loads(flag(pre, "--kv-transfer-config")) == cfg(commands["prefill"])
    elif fmt == "json":
        data = json.loads(text)
        assert data["recommended"] == RECOMMENDED[action]
        (pd,) = [p for p in data["plans"] if p["placement"].startswith("disaggregated")]
        pre = next(c for c in pd["commands"] if c["role"] == "prefill")
        assert json.loads(flag(pre["argv"], "--kv-transfer-config")) == cfg(commands["prefill"])
    elif fmt == "k8s":
        assert "&id" not in text  # every value where it is used, no YAML aliases
        docs = list(yaml.safe_load_all(text))
        kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
        chosen = kube.chosen(out)
        tiers = {c.role for c in chosen.commands} - {"proxy", "front"}
        for tier in tiers:
            assert ("Deployment", f"advisor-{chosen.placement}-{tier}") in kinds
            assert ("Service", f"advisor-{chosen.placement}-{tier}") in kinds
        for d in (d for d in docs if d["kind"] == "Deployment"):
            (c,) = d["spec"]["template"]["spec"]["containers"]
            if "--kv-transfer-config" in c["args"]:  # the shell command's config, as it is
                role = d["metadata"]["name"].rsplit("-", 1)[-1]
                assert json.loads(flag(c["args"], "--kv-transfer-config")) == cfg(commands[role])
                assert {"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {
                    "fieldRef": {"fieldPath": "status.podIP"}}} in c["env"]
    else:
        values, *servers = yaml.safe_load_all(text)
        pd = kube.chosen(out).placement.startswith("disaggregated")
        (name,) = values["inferenceExtension"]["pluginsCustomConfig"]
        assert ("prefix-based-pd-decider" in values["inferenceExtension"][
            "pluginsCustomConfig"][name]) == pd
        roles = {d["spec"]["template"]["metadata"]["labels"]["llm-d.ai/role"]: d
                 for d in servers}
        assert set(roles) == ({"prefill", "decode"} if pd else {"both"})
        for tier in ("prefill", "decode") if pd else ():
            (c,) = roles[tier]["spec"]["template"]["spec"]["containers"]
            assert c["args"][0] == "Qwen/Qwen2.5-7B-Instruct"
            assert json.loads(flag(c["args"], "--kv-transfer-config")) == cfg(commands[tier])
        if not pd:
            assert roles["both"]["spec"]["replicas"] == 2


def test_deploy_places_1p1d_on_the_p2p_pair_of_the_runs_matrix(tmp_path, capsys):
    run = run_dir(tmp_path, "disaggregate", "p2p_4gpu_pairs.txt")
    out = run_deploy(str(run.path), DeployOptions())
    (pd,) = [p for p in out.plans if p.placement == "disaggregated"]
    pre, dec = pd.commands[0], pd.commands[1]
    assert (pre.env["CUDA_VISIBLE_DEVICES"], dec.env["CUDA_VISIBLE_DEVICES"]) == ("0", "2")
    assert "every P->D pair on GPUs with P2P" in pd.notes[0]
    nowhere = run_deploy(str(run.path), DeployOptions(
        p2p_matrix=str(FIX / "p2p_2gpu_ansi.txt"), gpus="0,1"))
    (pd,) = [p for p in nowhere.plans if p.placement == "disaggregated"]
    assert "no GPU pair here has P2P" in pd.notes[0]
    capsys.readouterr()


def test_tensor_parallel_instances_take_that_many_gpus_each():
    plan = disaggregated("M", [[0, 1], [2, 3]], 1, 1)
    pre, dec = plan.commands[0], plan.commands[1]
    assert pre.env["CUDA_VISIBLE_DEVICES"] == "0,1" and dec.env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert flag(pre.argv, "--tensor-parallel-size") == "2"
    s = section(advice("disaggregate"), "collocated-1", "disagg-1p1d", "M", Where(tp=2))
    assert s.gpus == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="needs 4 GPUs"):
        section(advice("disaggregate"), None, "disagg-1p1d", "M", Where(gpus=(0, 1, 2), tp=2))


def test_a_plans_per_role_tp_names_give_each_instance_its_width():
    """A plan's disagg-1p2d-tp4-2: one prefiller on 4 GPUs, two decoders on 2 each."""
    s = section(advice("disaggregate"), "collocated-2-tp4", "disagg-1p2d-tp4-2", "M")
    (col,) = [p for p in s.plans if p.placement == "collocated"]
    (pd,) = [p for p in s.plans if p.placement == "disaggregated"]
    assert [flag(c.argv, "--tensor-parallel-size") for c in col.commands[:1]] == ["4"]
    engines = [c for c in pd.commands if c.role in ("prefill", "decode")]
    assert [(c.role, c.env["CUDA_VISIBLE_DEVICES"], flag(c.argv, "--tensor-parallel-size"))
            for c in engines] == [("prefill", "0,1,2,3", "4"), ("decode", "4,5", "2"),
                                  ("decode", "6,7", "2")]


@pytest.mark.integration
@pytest.mark.parametrize("args,needle", [
    (["--format", "yaml"], "--format must be one of sh, json, k8s, llm-d"),
    (["--proxy", "nginx"], "--proxy must be vllm or advisor"),
    (["--gpus", "a,b"], "--gpus 'a,b': expected GPU indices"),
    (["--gpus", "0,0"], "each GPU index once"),
    (["--hosts", ","], "--hosts ',': expected a comma-separated list"),
    (["--p2p-matrix", "/nonexistent"], "--p2p-matrix /nonexistent"),
    (["--gpus", "0"], "--gpus: 1P1D needs 2 GPUs; 1 given"),
])
def test_bad_flags_are_one_line_and_exit_2(tmp_path, args, needle):
    run = run_dir(tmp_path, "disaggregate")
    cli = advisor if args[0] == "--format" else advisor_here
    r = cli("deploy", str(run.path), *args)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr
