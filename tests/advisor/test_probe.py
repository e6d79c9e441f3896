"""Probe: the P2P parser on recorded outputs, KV arithmetic, the inventory parser, and the
host probe on this machine."""

import json
from pathlib import Path

import pytest

from advisor.errors import UsageError
from advisor.probe import cores, hardware, p2p
from advisor.probe.kvsize import kv_size, parse_link
from advisor.probe.wakeup import measure
from tests.cli import advisor

FIX = Path(__file__).parent / "fixtures"


def test_one_gpu():
    m = p2p.parse((FIX / "p2p_1gpu.txt").read_text())
    assert m.gpus == ["GPU0"] and m.status == [["X"]] and not m.all_ok


def test_two_gpus_with_ansi_codes_around_the_header():
    text = (FIX / "p2p_2gpu_ansi.txt").read_text()
    assert "\x1b[" in text
    m = p2p.parse(text)
    assert m.status == [["X", "CNS"], ["CNS", "X"]]
    assert m.to_json()["legend"]["CNS"] == "chipset not supported"


def test_four_gpus_with_a_title_spaces_and_every_status_code():
    m = p2p.parse((FIX / "p2p_4gpu_spaces.txt").read_text())
    assert m.gpus == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert m.pair(0, 1) == "OK" and m.pair(0, 2) == "GNS" and m.pair(0, 3) == "TNS"
    assert m.pair(1, 2) == "NS" and m.pair(1, 3) == "U" and m.pair(2, 3) == "DR"
    codes = {s for row in m.status for s in row}
    assert codes | {"CNS"} == set(p2p.CODES)  # CNS is in the 2- and 8-GPU fixtures


def test_eight_gpus_with_tabs_and_trailing_tabs():
    m = p2p.parse((FIX / "p2p_8gpu.txt").read_text())
    assert len(m.gpus) == 8 and m.pair(0, 3) == "OK" and m.pair(0, 4) == "CNS"
    assert m.pair(7, 7) == "X" and not m.all_ok


@pytest.mark.parametrize("text,needle", [
    ("nothing here", "no GPU header"),
    (" \tGPU0\tGPU1\n GPU0\tX\tOK\n", "1 rows for 2 GPUs"),
    (" \tGPU0\tGPU1\n GPU0\tX\tWAT\n GPU1\tOK\tX\n", "unknown P2P status"),
    (" \tGPU0\tGPU1\n GPU0\tX\n GPU1\tOK\tX\n", "malformed P2P row"),
])
def test_malformed_outputs_are_refused(text, needle):
    with pytest.raises(UsageError, match=needle):
        p2p.parse(text)


def test_kv_arithmetic_matches_the_guide():
    big = kv_size("llama-3.1-70b", 10_000)
    assert big.bytes_per_token == 327680
    assert big.seconds_on(parse_link("400Gbps")) * 1000 == pytest.approx(65.5, abs=0.5)
    assert kv_size("qwen2.5-7b", 8192).bytes_per_token == 57344
    assert parse_link("25GBps") == 25e9 and parse_link("pcie4") == 32e9


def test_mla_kv_is_one_latent_per_layer_and_token():
    # DeepSeek-V3: 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes, no K/V pair
    size = kv_size("deepseek-v3", 8192)
    assert size.bytes_per_token == 61 * 576 * 2 == 70272
    assert size.total_bytes == 8192 * 70272
    assert "MLA" in size.formula()


def test_a_hybrid_model_has_kv_for_its_attention_layers_and_a_fixed_state():
    # Qwen3-Next-80B-A3B: 48 layers, every 4th attends (12), 2 KV heads x 256
    size = kv_size("qwen3-next-80b-a3b", 1000)
    assert size.bytes_per_token == 12 * 2 * 2 * 256 * 2 == 24576
    # 36 Gated DeltaNet layers: 32 value heads x 128 x 128, plus a conv state of
    # (4 - 1) x (2 x 16 x 128 + 32 x 128)
    state = 36 * (32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)) * 2
    assert size.shape.state_bytes("bfloat16") == state == 39_518_208
    assert size.total_bytes == 1000 * 24576 + state
    assert kv_size("qwen3-next-80b-a3b", 2000).total_bytes - size.total_bytes == 1000 * 24576


def test_mla_and_nemotron_h_configs_are_read_from_a_directory(tmp_path):
    mla = {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8,
           "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "kv_lora_rank": 64,
           "vocab_size": 1000, "n_routed_experts": 8, "num_experts_per_tok": 2,
           "moe_intermediate_size": 128}
    (tmp_path / "config.json").write_text(json.dumps(mla))
    assert kv_size(str(tmp_path), 10).bytes_per_token == 4 * (64 + 16) * 2
    nemotron = {"hybrid_override_pattern": "M-M*-M*-", "hidden_size": 512,
                "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
                "mamba_num_heads": 16, "mamba_head_dim": 32, "ssm_state_size": 64,
                "n_groups": 2, "conv_kernel": 4, "intermediate_size": 1024, "vocab_size": 1000,
                "num_hidden_layers": 8}
    (tmp_path / "config.json").write_text(json.dumps(nemotron))
    size = kv_size(str(tmp_path), 10, "float32")
    assert size.bytes_per_token == 2 * 2 * 2 * 64 * 4  # two attention layers
    per_mamba = 16 * 32 * 64 + 3 * (16 * 32 + 2 * 2 * 64)
    assert size.shape.state_bytes("float32") == 3 * per_mamba * 4


def test_layouts_still_unknown_are_stated_not_guessed(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "jamba",
                                                      "mamba_d_state": 16}))
    with pytest.raises(UsageError, match="hybrid SSM"):
        kv_size(str(tmp_path), 10)


def test_inventory_parser():
    text = ("0, NVIDIA H200, 143771 MiB, 00000000:19:00.0\n"
            "1, NVIDIA H200, 143771 MiB, 00000000:3B:00.0\n")
    gpus = hardware.parse_inventory(text)
    assert [g.index for g in gpus] == [0, 1] and gpus[1].pci_bus_id == "00000000:3B:00.0"
    with pytest.raises(ValueError):
        hardware.parse_inventory("garbage line")


@pytest.mark.integration
@pytest.mark.slow  # every check on this machine (torch, links, matmul rates), 6-9 s
def test_probe_json_on_this_machine(tmp_path):
    out = advisor("probe", "--json", "--link-mb", "8", "--p2p-matrix",
                  str(FIX / "p2p_2gpu_ansi.txt"), "--wakeup-idle-s", "0.05")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    w = r["wakeup"]
    assert w["idle_s"] == 0.05 and w["busy_ms"] > 0
    assert w["ratio"] == w["after_idle_ms"] / w["busy_ms"]
    if not r["gpus"]:
        assert r["gpu_note"] and r["torch"]["device_count"] == 0
    assert r["links"]["shm"]["gbps"] > 0 and r["links"]["tcp"]["gbps"] > 0
    assert r["p2p"]["status"] == [["X", "CNS"], ["CNS", "X"]]
    c = r["core_sharing"]
    assert c is None or (c["alone_gflops"] > 0 and c["shared_gflops"] > 0
                         and c["ratio"] == c["shared_gflops"] / c["alone_gflops"])


@pytest.mark.integration
def test_kv_size_cli():
    out = advisor(
        "kv-size", "--model", "llama-3.1-70b", "--tokens", "10000", "--link", "400Gbps", "--json"
    )
    r = json.loads(out.stdout)
    assert r["bytes_per_token"] == 327680 and round(r["links"][0]["ms"]) == 66
    bad = advisor("kv-size", "--model", "nope")
    assert bad.returncode == 2 and "unknown model" in bad.stderr and "Traceback" not in bad.stderr


def test_gpu_link_measurement_runs_the_connectors_copy_path():
    # On a GPU machine the same function times cuda:i -> cuda:j; here both ends are the CPU.
    import torch

    from engine.kv.loopback import copy_gbps, gpu_links

    assert copy_gbps(torch.device("cpu"), torch.device("cpu"), "staged", 4 << 20) > 0
    assert gpu_links(0) == [] and gpu_links(1) == []


def test_cpu_vector_flags_are_read_from_cpuinfo():
    zen3 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma bmi2\n"
    zen4 = "flags\t\t: avx2 avx512f avx512_bf16 avx512vl\n"
    assert hardware.cpu_flags(zen3) == ["avx2"]
    assert hardware.cpu_flags(zen4) == ["avx2", "avx512f", "avx512_bf16"]
    assert hardware.cpu_flags("") == []


def test_the_wake_up_check_times_work_back_to_back_and_after_idling():
    """A host whose work runs 5x slower right after a sleep, on a fake clock."""
    now, slept = [0.0], [False]

    def work():
        now[0] += 0.060 if slept[0] else 0.012
        slept[0] = False

    def sleep(s):
        now[0] += s
        slept[0] = True

    w = measure(work, idle_s=2.0, repeats=3, sleep=sleep, clock=lambda: now[0])
    assert (w.busy_ms, w.after_idle_ms) == (pytest.approx(12.0), pytest.approx(60.0))
    assert w.ratio == pytest.approx(5.0)
    assert w.summary() == ("a 128 MB read takes 12.0 ms back to back and 60.0 ms after 2 s "
                           "idle (5.0x)")


@pytest.mark.parametrize("shared_rate, independent", [(30.0, False), (58.0, True)])
def test_the_core_check_alternates_the_contender_and_tells_shared_cores_apart(
        shared_rate, independent):
    """A host whose GEMM rate halves while the other core computes, and one where it does
    not, on fakes: the contender paused and resumed in turn, and left paused."""
    running, seen = [False], []

    def rate():
        seen.append(running[0])
        return shared_rate if running[0] else 64.0

    c = cores.measure(rate, lambda: running.__setitem__(0, False),
                      lambda: running.__setitem__(0, True), core=0, other=1, rounds=2)
    assert seen == [False, True, False, True] and not running[0]
    assert (c.alone_gflops, c.shared_gflops) == (64.0, shared_rate)
    assert c.independent is independent
    assert ("slow each other" in c.summary()) is not independent


def test_a_contender_that_cannot_start_leaves_the_core_check_unmeasured(monkeypatch):
    """Not "independent" on no evidence: a contender that dies before its first GEMM (here
    one that exits at once) gives no figure at all, and nothing is left running."""
    import os

    monkeypatch.setattr(cores, "_CONTENDER", "raise SystemExit(1)")
    before = os.sched_getaffinity(0)
    assert cores.host_core_sharing(window_s=0.01, rounds=1) is None
    assert os.sched_getaffinity(0) == before  # this process may run anywhere again


def test_a_negative_wake_up_idle_is_one_line_naming_the_flag():
    out = advisor("probe", "--wakeup-idle-s", "-1")
    assert out.returncode == 2 and "--wakeup-idle-s must be >= 0" in out.stderr
    assert "Traceback" not in out.stderr
