"""`advisor bench` end to end: result files with vLLM's keys, and clear errors for bad input."""

import json

import pytest

from tests.advisor.helpers import received, scripted
from tests.cli import advisor, advisor_here, said

pytestmark = pytest.mark.integration  # starts servers or runs the CLI

VLLM_KEYS = ("completed", "failed", "duration", "request_throughput", "request_goodput",
             "output_throughput", "total_input_tokens", "total_output_tokens",
             "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms",
             "mean_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "p99_itl_ms", "mean_e2el_ms")




def flat(table: str) -> str:
    """A rich table's text without its borders, each run of whitespace one space."""
    return " ".join(table.replace("│", " ").split())


def test_bench_writes_result_and_records_atomically(tmp_path):
    with scripted(ttft_ms=20, itl_ms=5, fail_every=4) as url:
        p = advisor("bench", "--base-url", url, "--num-prompts", "12", "--request-rate", "50",
                    "--random-input-len", "16", "--random-output-len", "4", "--ignore-eos",
                    "--goodput", "ttft:500", "itl:100", "--percentile-metrics",
                    "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
                    "--result-dir", str(tmp_path), "--seed", "3")
    assert p.returncode == 0, p.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    assert all(k in result for k in VLLM_KEYS)
    assert (result["completed"], result["failed"]) == (9, 3)
    assert result["slo_attainment"] == 9 / 12
    assert result["goodput_slos"] == {"objectives": [
        {"metric": "ttft", "ms": 500, "judged": "per_request"},
        {"metric": "itl", "ms": 100, "judged": "per_request"}]}
    assert result["manifest"]["seed"] == 3 and result["manifest"]["versions"]["python"]
    rows = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and sum(not r["ok"] for r in rows) == 3
    assert sorted(f.name for f in tmp_path.iterdir()) == ["requests.jsonl", "result.json"]
    assert "the commonest failure: HTTP 500: scripted failure" in flat(p.stdout)
    # into a pipe: a progress line for the run on stderr, plain lines for the tables
    assert "] requests: 12 of 12 done in " in p.stderr and "│" not in p.stdout


def test_a_run_with_every_request_refused_says_why_and_shows_no_latency():
    """vLLM refuses a prompt past its context with HTTP 400: the summary names that, and
    shows neither a pace nor latencies (its statistics read 0 ms, measured from nothing)."""
    with scripted(ttft_ms=20, itl_ms=5, max_model_len=64, lists_context=False) as url:
        p = advisor("bench", "--base-url", url, "--num-prompts", "3", "--request-rate", "50",
                    "--random-input-len", "100")
    assert p.returncode == 0, p.stderr
    out = flat(p.stdout)
    assert "3 (0 completed, 3 failed); the commonest failure: HTTP 400: prompt (100 tokens) " \
           "+ max_tokens (128) exceeds the model's context of 64 tokens" in out
    assert "no request completed: no latency was measured" in out
    assert "fell behind" not in out and "TTFT" not in out


BAD = [
    (["--dataset", "sharegpt"], "--dataset"),
    (["--workload", "nope"], "--workload"),
    (["--goodput", "ttft=5"], "--goodput"),
    (["--goodput", "ttft:5", "bogus"], "bogus"),
    (["--request-rate", "-2"], "--request-rate"),
    (["--temperature", "-1"], "--temperature"),
    (["--metric-percentiles", "x"], "--metric-percentiles"),
    (["--percentile-metrics", "ttft,speed"], "--percentile-metrics"),
    (["--base-url", "http://127.0.0.1:9", "--ready-timeout", "0"], "cannot reach"),
    (["--backend", "tgi"], "--backend"),  # vllm bench serve's flags, given wrong
    (["--backend", "openai-chat"], "--endpoint /v1/chat/completions"),
    (["--metadata", "tp"], "--metadata"),
    (["--base-url", "http://127.0.0.1:9", "--port", "9"], "--host/--port"),
]


@pytest.mark.parametrize("args,needle", BAD)
def test_bad_input_is_one_line_naming_the_problem(args, needle):
    cli = advisor if args is BAD[0][0] else advisor_here
    p = cli("bench", "--num-prompts", "2", *args)
    assert p.returncode == 2
    assert needle in p.stderr and "Traceback" not in p.stderr
    assert len(said(p.stderr)) == 1


def test_a_trace_with_a_bad_row_is_named(tmp_path):
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 4, "output_length": 2}\n{"timestamp": "x"}\n')
    p = advisor("bench", "--trace", str(bad), "--base-url", "http://127.0.0.1:9")
    assert p.returncode == 2 and "row 2" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.slow  # a load drill of 10 s or more
def test_bench_says_when_the_server_fell_behind_its_arrivals(tmp_path):
    # one request in flight at a time, ~80 ms each, arriving at 50 per second: every
    # request meets the SLO from its send, but the run completes ~12 per second
    with scripted(ttft_ms=20, itl_ms=10) as url:
        args = ["bench", "--base-url", url, "--num-prompts", "30", "--random-input-len", "8",
                "--random-output-len", "6", "--ignore-eos", "--goodput", "ttft:2000"]
        behind = advisor_here(*args, "--request-rate", "50", "--max-concurrency", "1")
        kept = advisor_here(*args, "--request-rate", "5")
    assert behind.returncode == kept.returncode == 0
    assert "SLO attainment" in behind.stdout and "100.0% of all requests" in behind.stdout
    said = " ".join(w for w in behind.stdout.split() if w != "│")  # the table wraps it
    assert "the server fell behind its arrivals" in said
    assert "kept pace" in kept.stdout and "fell behind" not in kept.stdout


def test_requests_past_the_context_the_server_lists_are_named_before_any_is_sent():
    with scripted(ttft_ms=20, itl_ms=5, max_model_len=64) as url:
        p = advisor("bench", "--base-url", url, "--num-prompts", "3", "--request-rate", "50",
                    "--random-input-len", "100")
        sent = received(url)
    assert p.returncode == 2 and not sent
    assert p.stderr.strip() == (
        f"advisor: error: {url} serves a context of 64 tokens (max_model_len, in its "
        "/v1/models), and a request of random needs 228 (its prompt and max_tokens): it would "
        "be refused. Send shorter ones (--random-input-len, --random-output-len; --scale for a "
        "--workload) or serve a longer context")
