"""`advisor deploy`'s commands, checked against the flags and wiring the guide gives."""

import json

import pytest

from advisor.decide import deploy
from advisor.rundata.recommendation import Recommendation


def env_and_argv(plan, role):
    return [(c.env, c.argv) for c in plan.commands if c.role == role]


def test_disaggregated_is_wired_as_the_guide_wires_it():
    plan = deploy.disaggregated("Qwen/Qwen2.5-7B-Instruct", [0, 1, 2], prefill=1, decode=2)
    (p_env, p_argv), = env_and_argv(plan, "prefill")
    decoders = env_and_argv(plan, "decode")
    assert p_argv[:3] == ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]
    cfg = json.loads(p_argv[p_argv.index("--kv-transfer-config") + 1])
    assert cfg == {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}
    for _env, argv in decoders:
        assert json.loads(argv[argv.index("--kv-transfer-config") + 1])["kv_role"] == "kv_consumer"
    envs = [p_env] + [e for e, _ in decoders]
    assert len({e["VLLM_NIXL_SIDE_CHANNEL_PORT"] for e in envs}) == 3  # one each
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "1", "2"]
    assert all("--no-enable-prefix-caching" in a for _, a in [(p_env, p_argv), *decoders])
    (proxy,) = [c for c in plan.commands if c.role == "proxy"]
    a = proxy.argv
    ports = [x[1][x[1].index("--port") + 1] for x in decoders]
    assert a[a.index("--decoder-ports") + 1:] == ports
    assert a[a.index("--prefiller-ports") + 1] == p_argv[p_argv.index("--port") + 1]
    assert "--prefiller-hosts" in a and a[a.index("--port") + 1] == "8192"


def test_bidirectional_uses_kv_both_and_ucx_devices_when_given():
    plan = deploy.disaggregated("m", [0, 1], bidirectional=True,
                                ucx_devices=["mlx5_0:1", "mlx5_1:1"])
    for c, dev in zip(plan.commands[:2], ["mlx5_0:1", "mlx5_1:1"]):
        assert json.loads(c.argv[c.argv.index("--kv-transfer-config") + 1])["kv_role"] == "kv_both"
        assert c.env["UCX_NET_DEVICES"] == dev
    assert plan.placement == "disaggregated-bidirectional"


def test_too_few_gpus_is_an_error():
    with pytest.raises(ValueError, match="needs 3 GPUs"):
        deploy.disaggregated("m", [0, 1], prefill=1, decode=2)


def test_collocated_is_data_parallel_over_the_same_gpus():
    (c,) = deploy.collocated("m", [0, 1]).commands
    assert c.env == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert c.argv[c.argv.index("--data-parallel-size") + 1] == "2"


def test_render_split_sizes_its_workers_from_the_measured_front_end_cpu():
    plan = deploy.render_split("m", [0, 1], frontend_cpu_ms=15.0, peak_rps=150.0,
                               reasoning_parser="qwen3")
    render = plan.commands[0].argv
    assert render[:4] == ["vllm", "launch", "render", "m"]
    assert render[render.index("--renderer-num-workers") + 1] == "3"  # 2.25 cores of CPU
    engines = [c for c in plan.commands if c.role == "engine"]
    assert len(engines) == 2 and all("--tokens-only" in c.argv for c in engines)
    assert all("--reasoning-parser" in c.argv for c in plan.commands)


def advice(action: str) -> Recommendation:
    """A recommendation of `action` and nothing else, as `deploy.section` reads one."""
    return Recommendation(action, [], [], None, [], {})


def test_the_section_marks_the_recommended_plan_and_names_a_published_model():
    s = deploy.section(advice("disaggregate"), "collocated-2", "disagg-1p1d", "qwen2.5-7b")
    assert s.model == "Qwen/Qwen2.5-7B-Instruct" and s.recommended == "disaggregated"
    assert [p.placement for p in s.plans] == ["collocated", "disaggregated"]
    first = deploy.section(advice("measure-first"), "collocated-2", None, "tiny")
    assert first.recommended is None and first.model == "MODEL" and first.notes
    script = deploy.as_shell(s)
    assert script.count(" &\n") == 2  # prefiller and decoder in the background, proxy last


def test_tensor_parallel_instances_take_that_many_gpus_each():
    plan = deploy.disaggregated("M", [0, 1, 2, 3], 1, 1, tp=2)
    pre, dec = plan.commands[0], plan.commands[1]
    assert pre.env["CUDA_VISIBLE_DEVICES"] == "0,1" and dec.env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert "--tensor-parallel-size 2" in pre.shell() and "--tensor-parallel-size 2" in dec.shell()
    col = deploy.collocated("M", [0, 1, 2, 3], tp=2).commands[0].shell()
    assert "--data-parallel-size 2" in col and "--tensor-parallel-size 2" in col
    with pytest.raises(ValueError, match="needs 4 GPUs"):
        deploy.disaggregated("M", [0, 1, 2], 1, 1, tp=2)
    section = deploy.section(advice("disaggregate"), "collocated-1", "disagg-1p1d", "M", tp=2)
    assert section.gpus == [0, 1, 2, 3]
