"""`advisor bench` speaks `vllm bench serve`: a user's command line runs with only the
program's name changed, and `--save-result` writes vLLM's result JSON, its keys those of
vllm/benchmarks/serve.py at commit 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1, its figures
those of a server whose timing is known."""

import json
import re

import numpy as np
import pytest

from tests.advisor.helpers import scripted
from tests.cli import advisor

pytestmark = pytest.mark.integration

# what serve.py's main_async puts before the benchmark's figures, then what benchmark()
# returns for a generative model (generated_texts left out: our client keeps no text)
SETUP_KEYS = ["date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id",
              "num_prompts"]
TRAFFIC_KEYS = ["request_rate", "burstiness", "max_concurrency"]
RESULT_KEYS = ["duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
               "request_throughput", "request_goodput", "output_throughput",
               "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls",
               "latencies", "start_times", "queue_times", "errors",
               "max_output_tokens_per_s", "max_concurrent_requests", "rtfx"]
DETAILED = {"input_lens", "output_lens", "start_times", "ttfts", "itls", "errors"}


def test_a_vllm_command_line_runs_and_saves_vllms_result(tmp_path):
    """As vLLM's docs write it (--backend, --host/--port, --dataset-name, --input-len ...),
    with `vllm bench serve` replaced by `advisor bench`."""
    with scripted(ttft_ms=20, itl_ms=5, fail_every=5) as url:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        p = advisor("bench", "--backend", "vllm", "--host", host, "--port", port,
                    "--endpoint", "/v1/completions", "--dataset-name", "random",
                    "--input-len", "16", "--output-len", "4", "--num-prompts", "10",
                    "--request-rate", "50", "--max-concurrency", "4", "--ignore-eos",
                    "--goodput", "ttft:500", "--percentile-metrics", "ttft,tpot,itl,e2el",
                    "--metric-percentiles", "50,99", "--save-result", "--save-detailed",
                    "--result-dir", str(tmp_path), "--result-filename", "run.json",
                    "--label", "lab", "--metadata", "tp=1", "--metadata", "gpu=none")
    assert p.returncode == 0, p.stderr
    got = json.loads((tmp_path / "run.json").read_text())
    keys = list(got)
    assert keys[:7] == SETUP_KEYS and keys[7:9] == ["tp", "gpu"] and keys[9:12] == TRAFFIC_KEYS
    assert keys[12:12 + len(RESULT_KEYS)] == RESULT_KEYS
    assert all(re.fullmatch(r"(mean|median|std|p50|p99)_(ttft|tpot|itl|e2el)_ms", k)
               for k in keys[12 + len(RESULT_KEYS):])
    assert (got["backend"], got["label"], got["tp"], got["request_rate"],
            got["max_concurrency"]) == ("vllm", "lab", "1", 50.0, 4)
    assert (got["completed"], got["failed"]) == (8, 2) and len(got["ttfts"]) == 10
    ok = [i for i, e in enumerate(got["errors"]) if not e]
    assert len(ok) == 8 and all("500" in e for e in got["errors"] if e)
    ttfts = np.array([got["ttfts"][i] for i in ok])
    itls = np.concatenate([got["itls"][i] for i in ok])
    assert ((ttfts >= 0.020) & (ttfts < 0.060)).all()  # the server's 20 ms, and the loopback
    # chunks read together are stamped together: the median, not each gap, is the server's
    assert 0.004 <= np.median(itls) < 0.015 and len(itls) == 8 * 3
    for i in ok:  # vLLM's identity: a request's latency is its TTFT and its gaps
        assert got["latencies"][i] == pytest.approx(got["ttfts"][i] + sum(got["itls"][i]))
    assert [got["output_lens"][i] for i in ok] == [4] * 8 and got["input_lens"][0] == 16
    assert got["p50_ttft_ms"] == pytest.approx(np.median(ttfts) * 1000)
    assert got["request_goodput"] is not None and 1 <= got["max_concurrent_requests"] <= 10


def test_without_save_detailed_the_per_request_lists_are_left_out_and_the_name_is_vllms(
        tmp_path):
    with scripted(ttft_ms=5, itl_ms=2) as url:
        p = advisor("bench", "--base-url", url, "--dataset-name", "random", "--input-len", "8",
                    "--output-len", "3", "--num-prompts", "4", "--save-result",
                    "--result-dir", str(tmp_path))
    assert p.returncode == 0, p.stderr
    ours = {"result.json", "requests.jsonl"}  # --result-dir's own files, beside it
    (path,) = [f for f in tmp_path.iterdir() if f.name not in ours]
    assert re.fullmatch(r"openai-infqps-.+-\d{8}-\d{6}\.json", path.name), path.name
    got = json.loads(path.read_text())
    assert not DETAILED & set(got) and len(got["latencies"]) == 4
    assert got["request_goodput"] is None and got["label"] is None
    assert f"vLLM's result JSON: {path}" in p.stdout

