"""`advisor import` reads other tools' files as they wrote them, and decides as a sweep does.

The aiperf and guidellm fixtures are those tools' own output (aiperf 0.13.0, guidellm
0.8.1) against the scripted server (first token 20 ms after arrival, then one every 5 ms),
checked against the figures each tool computed itself; the vLLM file is one our own
`--save-result --save-detailed` wrote, checked against the same run's result.json."""

import json
from pathlib import Path

import numpy as np
import pytest

from advisor.imports import aiperf, guidellm
from advisor.measure.stats import latency
from advisor.rundata.files import read_json_object
from advisor.rundata.rundir import RunDir
from tests.advisor.helpers import scripted
from tests.cli import advisor, advisor_here, said

FIXTURES = Path(__file__).parent / "fixtures" / "imports"
AIPERF = FIXTURES / "aiperf" / "profile_export.jsonl"
GUIDELLM = FIXTURES / "guidellm" / "benchmarks.json"


def test_aiperf_records_give_aiperfs_own_figures():
    found = aiperf.read(AIPERF)
    own = json.loads((AIPERF.parent / aiperf.SUMMARY).read_text())
    lats = [latency(r) for r in found.records]
    assert (found.rate, found.tool, found.model) == (5.0, "aiperf 0.13.0", "scripted")
    assert len(lats) == own["request_count"]["avg"] == 20 and all(lats)
    ttft_ms = np.array([lat.ttft for lat in lats]) * 1000
    assert ttft_ms.mean() == pytest.approx(own["time_to_first_token"]["avg"], abs=1e-4)
    gaps_ms = np.concatenate([lat.itls for lat in lats]) * 1000
    assert np.median(gaps_ms) == pytest.approx(own["inter_chunk_latency"]["p50"], abs=0.2)
    assert 4.5 <= np.median(gaps_ms) <= 5.5  # the server's 5 ms
    assert ttft_ms.min() >= 20.0  # never under the server's 20 ms
    for r in found.records:  # its schedule: each credit issued before its request went out
        assert 0 <= r.sent - r.scheduled < 0.05 and r.end >= r.chunks[-1] - 1e-9


def test_guidellm_records_give_guidellms_own_figures_and_say_what_they_lack():
    data = read_json_object(GUIDELLM)
    (found,), skipped = guidellm.read(GUIDELLM, data)
    own = data["benchmarks"][0]["metrics"]
    lats = [latency(r) for r in found.records]
    assert (found.rate, found.tool, skipped) == (5.0, "guidellm 0.8.1", [])
    ttft_ms = np.array([lat.ttft for lat in lats]) * 1000
    assert ttft_ms.mean() == pytest.approx(own["time_to_first_token_ms"]["successful"]["mean"],
                                           rel=1e-6)
    per_request = data["benchmarks"][0]["requests"]["successful"]
    for lat, req in zip(lats, per_request):  # each request's mean gap, as guidellm has it
        assert lat.itls.mean() * 1000 == pytest.approx(req["inter_token_latency_ms"], rel=1e-4)
    assert guidellm.MEAN_GAPS in found.unknown


def test_a_guidellm_benchmark_without_a_rate_is_left_out_saying_why():
    data = read_json_object(GUIDELLM)
    sync = json.loads(json.dumps(data["benchmarks"][0]))
    sync["config"]["strategy"].update(type_="synchronous", rate=None)
    found, skipped = guidellm.read(GUIDELLM, {**data, "benchmarks": [sync, data["benchmarks"][0]]})
    assert [f.rate for f in found] == [5.0]
    assert len(skipped) == 1 and "no arrival rate (a synchronous benchmark)" in skipped[0]


@pytest.mark.integration
def test_vllm_results_import_to_the_figures_of_the_run_that_saved_them(tmp_path):
    """Our --save-detailed file, imported, gives that run's own statistics."""
    with scripted(ttft_ms=20, itl_ms=5, fail_every=7) as url:
        p = advisor("bench", "--base-url", url, "--input-len", "16", "--output-len", "6",
                    "--num-prompts", "21", "--request-rate", "40", "--save-result",
                    "--save-detailed", "--result-dir", str(tmp_path / "bench"),
                    "--result-filename", "vllm.json")
    assert p.returncode == 0, p.stderr
    ours = json.loads((tmp_path / "bench" / "result.json").read_text())
    p = advisor("import", "--placement", f"collocated={tmp_path / 'bench' / 'vllm.json'}",
                "--out", str(tmp_path / "out"), "--no-report", "--json")
    assert p.returncode == 0, p.stderr
    run = RunDir(json.loads(p.stdout)["run_dir"]).read_run("collocated", 40.0)
    assert (run.get("completed"), run.get("failed")) == (ours["completed"], ours["failed"]) \
        == (18, 3)
    for key in ("median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms",
                "mean_tpot_ms"):
        assert run.get(key) == pytest.approx(ours[key], abs=0.01), key
    assert run.described.imported.startswith("vllm bench serve (openai)")


def test_an_import_decides_and_names_what_its_files_lack(tmp_path, capsys):
    p = advisor_here("import", "--placement", f"collocated={AIPERF.parent}",
                     "--placement", f"disagg={GUIDELLM}", "--slo", "ttft:100", "itl:20",
                     "--out", tmp_path, "--no-report", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    run = RunDir(out["run_dir"])
    ev = run.read_evidence()
    assert ev.imported.tools == ["aiperf 0.13.0", "guidellm 0.8.1"]
    assert any("KV transfer" in u for u in ev.imported.unknown)
    assert guidellm.MEAN_GAPS in ev.imported.unknown
    assert ev.collocated.placement == "collocated" and ev.disaggregated.placement == "disagg"
    assert ev.kv_transfer is None
    kv_row = next(r for r in out["rows"] if r["id"] == "kv_transfer_slow")
    assert kv_row["verdict"] == "undecided: no KV transfer time was measured"
    assert out["imported"].startswith("measured by aiperf 0.13.0, guidellm 0.8.1")
    # the same intervals a sweep would compute from the same outcomes: both met 5 req/s
    assert ev.collocated.max_goodput_rps == ev.disaggregated.max_goodput_rps == 5.0


@pytest.mark.parametrize("args, says", [
    (["--placement", "both=x"], "--placement 'both=x': expected NAME=PATH[@RATE]"),
    (["--placement", "collocated"], "expected NAME=PATH[@RATE]"),
    (["--placement", "collocated=/no/such/dir"], "/no/such/dir does not exist"),
    (["--placement", f"collocated={AIPERF}@fast"], "'fast' after @ is not a rate"),
    (["--placement", f"collocated={AIPERF}", "--placement", f"collocated-2={GUIDELLM}"],
     "at most one collocated and one disagg"),
    ([], "--placement: give at least one"),
    (["--placement", f"collocated={AIPERF}", "--slo", "ttft:100"],
     "--slo needs ttft:MS and one of itl:MS"),
])
def test_bad_placements_are_named_without_a_traceback(args, says, tmp_path):
    p = advisor_here("import", *args, "--out", tmp_path)
    assert p.returncode == 2 and says in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not list(tmp_path.iterdir())


def test_files_that_cannot_be_judged_say_why(tmp_path):
    summary = json.loads((AIPERF.parent / aiperf.SUMMARY).read_text())
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "profile_export.jsonl").write_text(AIPERF.read_text())  # no summary: no rate
    brief = tmp_path / "brief.json"  # a vLLM result saved without --save-detailed
    brief.write_text(json.dumps({"request_rate": 1.0, "request_throughput": 1.0,
                                 "median_ttft_ms": 5.0}))
    p = advisor("import", "--placement", f"collocated={alone}", "--out", tmp_path / "o")
    assert p.returncode == 2 and said(p.stderr) == [
        f"advisor: error: --placement: {alone / 'profile_export.jsonl'} does not say the rate it "
        "was run at: give the file alone as NAME=FILE@RATE"], p.stderr
    p = advisor_here("import", "--placement", f"collocated={brief}", "--out", tmp_path / "o")
    assert p.returncode == 2 and "save it with `vllm bench serve --save-result " \
        "--save-detailed`" in p.stderr
    # with the rate given, the same file is judged
    p = advisor_here("import", "--placement", f"collocated={alone / 'profile_export.jsonl'}@5",
                     "--out", tmp_path / "o", "--no-report", "--json")
    assert p.returncode == 0, p.stderr
    assert summary["input_config"]["phases"][0]["rate"] == 5.0
