"""The advisor against the front the guide sets up: vLLM's toy P/D proxy (a stand-in written
here: no /v1/models, no /metrics, SSE labelled application/json) in front of the bundled
prefill and decode engines; and deployments the sweep starts and stops itself."""

import functools
import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from aiohttp import web

from advisor.testing.toy_proxy import make_app
from engine.processes.children import free_port
from engine.processes.launch import Topology, launch
from tests.cli import advisor, advisor_here, said
from tests.serving.helpers import post, post_stream, running_app

pytestmark = pytest.mark.integration

SMALL = ("--model", "tiny", "--scale", "0.05", "--output-scale", "0.1", "--num-prompts", "4")


@pytest.fixture(scope="module")
def toy():
    """(toy proxy URL, prefiller URL, decoder URL) over a tiny 1P1D deployment."""
    with launch(Topology(mode="disagg", model="tiny", dtype="float32")) as d:
        pre, dec = d.instance_urls["prefill"][0], d.instance_urls["decode"][0]
        with running_app(make_app([pre], [dec], d.instance_key)) as url:
            yield url, pre, dec


def test_the_stand_in_has_only_what_the_toy_proxy_has(toy):
    url, _, _ = toy
    for path in ("/v1/models", "/metrics", "/health"):
        assert _get(url + path)[0] == 404
    assert _get(url + "/healthcheck")[0] == 200
    events = post_stream(url, {"model": "tiny", "prompt": "hi", "max_tokens": 2, "stream": True},
                         "/v1/completions")
    assert len(events) == 2


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""


def test_bench_needs_no_models_endpoint_and_reads_sse_sent_as_json(toy, tmp_path):
    url, _, _ = toy
    p = advisor("bench", "--base-url", url, "--model", "tiny", "--num-prompts", "4",
                "--random-input-len", "40", "--random-output-len", "6", "--ignore-eos",
                "--ready-timeout", "30", "--result-dir", str(tmp_path))
    assert p.returncode == 0, p.stderr
    recs = [json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert [r["ok"] for r in recs] == [True] * 4
    assert {r["output_tokens"] for r in recs} == {6} and {r["token_source"] for r in recs} == \
        {"usage"}


@pytest.mark.slow  # a P/D deployment behind the toy proxy, ~7 s
def test_transfer_check_reads_the_decoders_metrics_behind_the_toy_proxy(toy):
    url, _, dec = toy
    p = advisor("probe", "--json", "--link-mb", "1", "--transfer-check", url, "--model", "tiny",
                "--metrics-url", dec + "/metrics", "--check-prompts", "2",
                "--check-prompt-tokens", "200", "--ready-timeout", "30")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)["transfer_check"]
    assert r["transfers"] == 2 and r["failed_requests"] == 0 and r["failures"] == 0
    assert r["verdict"].startswith("healthy") and r["overhead_ms"] is not None


def _kv(run_dir) -> dict:
    (d,) = [p for p in run_dir.iterdir() if p.is_dir()]
    return json.loads((d / "evidence.json").read_text())["kv_transfer"], d


@pytest.mark.slow
def test_sweep_evidence_comes_from_the_decoder_and_survives_a_resume(toy, tmp_path):
    url, _, dec = toy
    p = advisor("sweep", "--disagg-url", url, "--disagg-metrics", dec + "/metrics",
                "--rates", "1,2", *SMALL, "--out", str(tmp_path), "--no-report")
    assert p.returncode == 0, p.stderr
    kv, run = _kv(tmp_path)
    assert kv["transfers"] == 8 and kv["failures"] == 0 and kv["verdict"]
    # resumed with nothing missing: the same evidence, from the stored per-run deltas
    assert advisor("sweep", "--resume", str(run), "--no-report").returncode == 0
    assert _kv(tmp_path)[0] == kv
    # one disaggregated run deleted: measured again, counted the same
    shutil.rmtree(run / "runs" / "disagg-url" / "rate-2")
    p = advisor("sweep", "--resume", str(run), "--no-report")
    assert p.returncode == 0, p.stderr
    again = _kv(tmp_path)[0]
    assert again["transfers"] == kv["transfers"] and again["failures"] == 0


@pytest.mark.slow  # a disaggregated deployment behind two fronts (~10 s)
def test_the_decoder_takes_the_prompt_ids_our_proxy_hands_over():
    """Our proxy asks the prefill for return_token_ids and hands them to the decoder in
    kv_transfer_params: the decoder renders nothing and answers the same tokens."""
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "tell me a story"}],
            "max_tokens": 5, "temperature": 0}
    with launch(Topology(mode="collocated", replicas=1, model="tiny", dtype="float32")) as c:
        want = post(c.url, chat, "/v1/chat/completions")[1]["choices"][0]["token_ids"]
    with launch(Topology(mode="disagg", model="tiny", dtype="float32")) as d:
        got = post(d.url, chat, "/v1/chat/completions")[1]["choices"][0]["token_ids"]
        dec = d.instance_urls["decode"][0]
        renders = _get(dec + "/metrics")[1]
    assert got == want
    assert 'engine:frontend_requests_total{model_name="tiny",stage="render"} 0.0' in renders


def _serve_cmd(mode: str, port: int, *extra: str) -> str:
    return " ".join([sys.executable, "-m", "advisor.cli", "serve", "--mode", mode, "--model",
                     "tiny", "--dtype", "float32", "--port", str(port), *extra])


def _alive_on(port: int) -> list[str]:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if f"--port {port}" in line]


@pytest.mark.slow
def test_sweep_starts_and_stops_each_deployment_one_at_a_time(tmp_path):
    cp, dp = free_port(), free_port()
    p = advisor("sweep", "--collocated-url", f"http://127.0.0.1:{cp}",
                "--collocated-cmd", _serve_cmd("collocated", cp, "--replicas", "1"),
                "--disagg-url", f"http://127.0.0.1:{dp}", "--disagg-cmd", _serve_cmd("disagg", dp),
                "--rates", "1", *SMALL, "--ready-timeout", "120", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    (run,) = [d for d in tmp_path.iterdir() if d.is_dir()]
    logs = {f.name: f.read_text() for f in run.glob("*.log")}
    assert set(logs) == {"collocated-url.log", "disagg-url.log"}
    assert "stopped; all instances are down" in logs["collocated-url.log"]
    assert not _alive_on(cp) and not _alive_on(dp)
    for port in (cp, dp):  # both ports free again
        web_free = subprocess.run(["ss", "-ltn", f"sport = :{port}"], capture_output=True,
                                  text=True).stdout
        assert f":{port}" not in web_free
    # the advice's deployment, as vLLM commands, printed and in the report
    d = advisor("deploy", str(run), "--format", "json")
    assert d.returncode == 0, d.stderr
    plans = {p["placement"]: p for p in json.loads(d.stdout)["plans"]}
    assert set(plans) == {"collocated", "disaggregated"}
    assert "deploy with vllm" in (run / "report.md").read_text().lower()
    assert "vllm serve" in advisor("deploy", str(run)).stdout


def test_a_command_that_exits_at_once_is_one_line_naming_its_log(tmp_path):
    p = advisor("sweep", "--disagg-url", f"http://127.0.0.1:{free_port()}", "--disagg-cmd",
                "echo no GPU here; exit 3", "--model", "tiny", "--rates", "1",
                "--out", str(tmp_path), timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    (line,) = said(p.stderr)
    assert "exited with code 3" in line and "disagg-url.log" in line
    (log,) = tmp_path.glob("*/disagg-url.log")
    assert "no GPU here" in log.read_text()


def _metrics_app(text: str) -> web.Application:
    app = web.Application()

    async def health(_req):
        return web.json_response({"status": "ok"})

    async def metrics(_req):
        return web.Response(text=text)

    app.add_routes([web.get("/health", health), web.get("/metrics", metrics)])
    return app


@pytest.mark.parametrize("page, needle", [
    (None, "cannot read it"),
    ("# TYPE go_goroutines gauge\ngo_goroutines 12\n", "none of the expected metrics"),
])
def test_bad_metrics_urls_are_one_line_naming_the_flag(tmp_path, page, needle):
    with running_app(_metrics_app(page or "")) as url:
        metrics = f"http://127.0.0.1:{free_port()}/metrics" if page is None else url + "/metrics"
        # the second case takes the same path in-process
        cli = functools.partial(advisor, timeout=60) if page is None else advisor_here
        p = cli("sweep", "--disagg-url", url, "--disagg-metrics", metrics, "--model", "tiny",
                "--rates", "1", "--out", str(tmp_path))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    (line,) = said(p.stderr)
    assert line.startswith(f"advisor: error: --disagg-metrics {metrics}: {needle}")
