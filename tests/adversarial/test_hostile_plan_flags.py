"""The planner's and the CLI's numbers from outside (issue 67, item 6), at the scale found:
each is one line naming the flag or file, in seconds. Before: a config.json with zero heads
was a ZeroDivisionError in plan and kv-size, a 4,000-digit intermediate_size an
OverflowError, 28.5 layers were taken; --gpus 1000000 ran 47 s to a MemoryError; 5,000
--rates took 2.5 GB; kv-size --link 0GBps was a traceback; a nested list under a --config's
slo a traceback; an imported result with NaN TTFTs failed while drawing its report."""

import json
import math
import time

import pytest

from tests.cli import advisor, advisor_here

pytestmark = pytest.mark.unit
QWEN = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 896, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2, "intermediate_size": 4864,
        "vocab_size": 151936, "max_position_embeddings": 32768}


def one_line(*args, needle: str) -> None:
    start = time.monotonic()
    r = advisor_here(*args)
    out = (r.stderr + r.stdout).strip()
    assert time.monotonic() - start < 10
    assert r.returncode == 2 and needle in out and "Traceback" not in out, out
    assert len([line for line in r.stderr.splitlines() if line.strip()]) <= 1, r.stderr


@pytest.mark.parametrize("change,needle", [
    ({"num_attention_heads": 0}, "num_attention_heads must be an integer from 1"),
    ({"num_key_value_heads": 0}, "num_key_value_heads must be an integer from 1"),
    ({"intermediate_size": int("9" * 4000)}, "intermediate_size must be an integer"),
    ({"num_hidden_layers": 28.5}, "num_hidden_layers must be an integer"),
    ({"hidden_size": True}, "hidden_size must be an integer")])
def test_a_config_json_out_of_range_is_one_line_in_plan_and_kv_size(tmp_path, change, needle):
    (tmp_path / "config.json").write_text(json.dumps({**QWEN, **change}))
    one_line("kv-size", "--model", str(tmp_path), needle=needle)
    one_line("plan", "--model", str(tmp_path), "--gpu", "h100-sxm", "--out",
             str(tmp_path / "out"), needle=needle)


@pytest.mark.parametrize("flags,needle", [
    (("--gpus", "1000000"), "--gpus must be 1 to"),
    (("--gpus", "8", "--nodes", "1000"), "--nodes must be 1 to"),
    (("--gpus", "64", "--nodes", "64"), "at most 1024 GPUs"),
    (("--rates", ",".join(["1"] * 5000)), "--rates: at most 64 rates"),
    (("--rates", "1,inf"), "--rates: each must be above 0"),
    (("--num-prompts", "100000000"), "--num-prompts must be 10 to 100000")])
def test_plan_flags_past_their_bounds_are_one_line(tmp_path, flags, needle):
    one_line("plan", "--model", "qwen2.5-7b", "--gpu", "h100-sxm", "--out", str(tmp_path),
             *flags, needle=needle)


def test_kv_size_on_a_link_of_nothing_is_one_line():
    one_line("kv-size", "--link", "0GBps", needle="--link '0GBps'")


def test_a_config_files_slo_of_nested_lists_is_one_line(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("slo: [[ttft:2000], [itl:50]]\n")
    one_line("sweep", "--config", str(f), needle="slo must be a list of NAME:MS texts")


def test_sweep_and_bench_num_prompts_are_bounded():
    one_line("sweep", "--num-prompts", "100000000", needle="--num-prompts must be 1 to")
    one_line("bench", "--num-prompts", "100000000", needle="--num-prompts must be 1 to")


@pytest.mark.integration
def test_an_imported_result_with_nan_ttfts_is_one_line(tmp_path):
    n = 4
    detailed = {"backend": "vllm", "request_rate": 2.0, "start_times": [i * 0.5 for i in range(n)],
                "ttfts": [0.1, math.nan, 0.1, 0.1], "itls": [[0.01] * 3] * n,
                "latencies": [0.2] * n, "input_lens": [100] * n, "output_lens": [4] * n,
                "errors": [""] * n}
    for name in ("c", "d"):
        (tmp_path / f"{name}.json").write_text(json.dumps(detailed))
    r = advisor("import", "--placement", f"collocated={tmp_path / 'c.json'}",
                "--placement", f"disagg={tmp_path / 'd.json'}", "--out", str(tmp_path / "o"),
                timeout=120)
    assert r.returncode == 2 and "request 1: its times must be finite" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
