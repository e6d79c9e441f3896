"""advisor sweep: the run directory, resume, bad input; and (slow) the guide's effect on
this machine's bundled engine, with and without an emulated slow link."""

import csv
import json
import subprocess
import sys

import pytest

from advisor.decide.table import Thresholds
from tests.advisor.helpers import scripted
from tests.cli import advisor, advisor_here, said

pytestmark = pytest.mark.integration  # starts servers or runs the CLI

RUN_FILES = ("manifest.json", "summary.csv", "evidence.json", "recommendation.json", "report.html",
             "report.md")




def run_dir_of(out):
    dirs = [d for d in out.iterdir() if d.is_dir()]
    assert len(dirs) == 1
    return dirs[0]


def engine_processes() -> list[str]:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [
        line
        for line in ps.splitlines()
        if "-m engine.serve.server" in line or "-m engine.fronts.proxy" in line
    ]


@pytest.mark.slow  # a whole sweep
def test_sweep_of_existing_deployments_writes_the_run_directory_and_resumes(tmp_path):
    with scripted(ttft_ms=30, itl_ms=10) as col, scripted(ttft_ms=60, itl_ms=5) as dis:
        out = advisor(
            "sweep",
            "--collocated-url",
            col,
            "--disagg-url",
            dis,
            "--rates",
            "2,4",
            "--num-prompts",
            "6",
            "--scale",
            "0.01",
            "--out",
            str(tmp_path),
            "--slo",
            "ttft:1000",
            "itl:50",
        )
        assert out.returncode == 0, out.stderr
        run = run_dir_of(tmp_path)
        for name in RUN_FILES:
            assert (run / name).is_file(), name
        for placement in ("collocated-url", "disagg-url"):
            for rate in ("2", "4"):
                assert (run / "runs" / placement / f"rate-{rate}" / "result.json").is_file()
                assert (run / "runs" / placement / f"rate-{rate}" / "requests.jsonl").is_file()
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["seed"] == 0 and manifest["versions"]["python"]
        # this host's links say nothing about the deployments' own
        assert manifest["probe"]["links"] is None and "not measured" in \
            manifest["probe"]["links_note"]
        assert len((run / "summary.csv").read_text().splitlines()) == 5
        ev = json.loads((run / "evidence.json").read_text())
        assert (
            ev["collocated"]["max_goodput_rps"] == 4 and ev["disaggregated"]["max_goodput_rps"] == 4
        )
        assert ev["kv_transfer"] is None  # the scripted servers export no transfer metrics

        # an interrupted sweep: one run and the decision are missing
        kept = run / "runs" / "collocated-url" / "rate-2" / "result.json"
        before = kept.stat().st_mtime_ns
        drawn = (run / "report.html").stat().st_mtime_ns
        (run / "runs" / "disagg-url" / "rate-4" / "result.json").unlink()
        (run / "recommendation.json").unlink()
        again = advisor("sweep", "--resume", str(run), "--no-report")
        assert again.returncode == 0, again.stderr
    assert (run / "runs" / "disagg-url" / "rate-4" / "result.json").is_file()
    assert (run / "recommendation.json").is_file() and kept.stat().st_mtime_ns == before
    # --no-report: the report stays as it was, and the last line says how to draw it
    assert (run / "report.html").stat().st_mtime_ns == drawn
    assert f"advisor report {run}" in again.stdout.strip().splitlines()[-1]


BAD = [
    (["--workload", "nope"], "--workload"),
    (["--time-budget", "-5"], "--time-budget must be >= 0"),
    (["--topologies", "collocated:3,disagg:1p1d"], "3 instances need 3 cores"),
    (["--topologies", "disagg:1x1"], "--topologies"),
    (["--slo", "ttft:2000"], "itl"),
    (["--link-emulation", "fast"], "link emulation"),
    (["--model", "nope"], "unknown model"),
    (["--resume", "/nonexistent"], "--resume"),
]


@pytest.mark.parametrize("args,needle", BAD)
def test_bad_input_is_one_clear_line(tmp_path, args, needle):
    cli = advisor if args is BAD[0][0] else advisor_here
    out = cli("sweep", "--out", str(tmp_path), *args)
    assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr
    assert len(said(out.stderr)) == 1


def test_the_default_bundled_sweep_has_a_time_budget_and_a_longer_one_by_choice_none():
    from advisor.sweep.options import DEFAULT_BUDGET_S, SweepOptions

    assert SweepOptions().budget_s() == DEFAULT_BUDGET_S
    for longer in ({"num_prompts": 100}, {"repeats": 2}, {"rates": (1.0, 2.0)},
                   {"collocated_url": "http://127.0.0.1:9"}, {"time_budget": 0.0}):
        assert SweepOptions(**longer).budget_s() is None, longer
    assert SweepOptions(num_prompts=100, time_budget=600.0).budget_s() == 600.0
    # nor does the sizing raise the first rate to fit the five minutes' first pass
    from advisor.sweep.options import first_pass_run_s
    assert first_pass_run_s(SweepOptions()) is not None
    for longer in ({"num_prompts": 100}, {"repeats": 2}, {"collocated_url": "http://h:9"}):
        assert first_pass_run_s(SweepOptions(**longer)) is None, longer


def test_a_chat_workload_adds_the_render_split_which_needs_collocated_beside_it():
    from advisor.errors import UsageError
    from advisor.sweep.options import SweepOptions

    opts = SweepOptions(workload="chat-agent", model="small")
    chat = opts.engine_to_start("float32").placements(opts.topology_specs)
    assert [p.name for p in chat] == ["collocated-2", "disagg-1p1d", "render-split-2"]
    assert chat[2].kind == "render-split" and chat[2].topology.mode == "render-split"
    assert "render-split" not in SweepOptions(model="small").topology_text
    with pytest.raises(UsageError, match="judged against collocated"):  # parsed as it is made
        SweepOptions(model="small", topologies="disagg:1p1d,render-split:2")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_default_sweep_reproduces_the_guides_itl_effect_and_says_disaggregate(tmp_path):
    out = advisor("sweep", "--out", str(tmp_path), timeout=900)
    assert out.returncode == 0, out.stderr
    assert engine_processes() == []
    run = run_dir_of(tmp_path)
    for name in RUN_FILES:
        assert (run / name).is_file(), name
    ev = json.loads((run / "evidence.json").read_text())
    col, dis = ev["collocated"], ev["disaggregated"]
    assert col["rate_rps"] == dis["rate_rps"] and ev["judged_at"]  # both judged at one rate
    cal = ev["calibration"]
    assert cal["step_ms"][0] > 0 and cal["batches"] == [1, 2, 8] and len(cal["tail_ms"]) == 3
    rec = json.loads((run / "recommendation.json").read_text())
    # NOTE: this VM's speed drifts: CI runs were calibrated at 11-14 ms a step, then
    # decoded 1.3-1.7x slower, and P/D missed itl:50 at every rate. The sweep must then say
    # that the host slowed down, never let that noise pick a placement or hide why
    slowed = max(col["slowdown"], dis["slowdown"]) >= Thresholds().host_slowed
    if slowed and rec["action"] == "measure-first":
        assert ("the host slowed down after its calibration" in rec["reasons"][0]
                or "ran slower than the calibrated one" in rec["reasons"][0])
    else:
        assert dis["max_goodput_rps"] > 0
        assert rec["action"] == "disaggregate" and rec["calibration"]
    # the guide's effect at the highest rate both ran: collocated ITL tails jump
    rows = list(csv.DictReader((run / "summary.csv").open()))
    rates = {p: {float(r["request_rate"]) for r in rows if r["topology"] == p}
             for p in ("collocated-2", "disagg-1p1d")}
    top = max(rates["collocated-2"] & rates["disagg-1p1d"])
    p99 = {r["topology"]: float(r["p99_itl_ms"]) for r in rows if float(r["request_rate"]) == top}
    assert p99["collocated-2"] >= 1.5 * p99["disagg-1p1d"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_slow_emulated_link_turns_the_advice_around(tmp_path):
    # one rate of 6 requests on the tiny model: this is about the transfer turning the
    # advice, not the tails, the search or the model (the default sweep's test has those)
    out = advisor("sweep", "--out", str(tmp_path), "--link-emulation", "2s", "--model", "tiny",
                  "--num-prompts", "6", "--rates", "1", timeout=900)
    assert out.returncode == 0, out.stderr
    assert engine_processes() == []
    run = run_dir_of(tmp_path)
    rec = json.loads((run / "recommendation.json").read_text())
    # never disaggregate over a 2 s transfer; fix it first. When collocated met the SLO at
    # no rate tried either (its attainment hovers near 90% at the lowest rates), the action
    # is measure-first with fix-transfer beside it.
    assert rec["action"] in ("fix-transfer", "measure-first")
    assert "fix-transfer" in [rec["action"], *rec["secondary_actions"]]
    ev = json.loads((run / "evidence.json").read_text())
    assert ev["kv_transfer"]["emulated"] == "2s" and ev["kv_transfer"]["mean_ms"] >= 2000
    links = json.loads((run / "manifest.json").read_text())["probe"]["links"]
    assert links["shm"]["gbps"] > 0 and links["tcp"]["gbps"] > 0  # the bundled KV's own
    assert "emulated" in (run / "report.md").read_text()
    assert "emulated" in (run / "report.html").read_text()
    assert ",2s" in (run / "summary.csv").read_text()


@pytest.mark.slow  # a whole sweep
def test_repeats_pool_into_one_timeline_and_the_operating_rate_is_where_rows_are_judged(
        tmp_path):
    with scripted(ttft_ms=20, itl_ms=5) as col, scripted(ttft_ms=40, itl_ms=5) as dis:
        out = advisor("sweep", "--collocated-url", col, "--disagg-url", dis, "--rates", "2,4",
                      "--num-prompts", "4", "--repeats", "2", "--scale", "0.01",
                      "--operating-rate", "3", "--out", str(tmp_path), "--no-report")
    assert out.returncode == 0, out.stderr
    run = run_dir_of(tmp_path)
    result = json.loads((run / "runs" / "disagg-url" / "rate-4" / "result.json").read_text())
    assert result["num_prompts"] == 8 and result["num_requests"] == 8  # 2 runs of 4, pooled
    offsets = result["arrival_offsets"]
    assert offsets == sorted(offsets) and len(offsets) == 8
    ev = json.loads((run / "evidence.json").read_text())
    # the grid does not hold the operating rate: each placement is measured there too
    assert {d.name for d in (run / "runs" / "collocated-url").iterdir()} == \
        {"rate-2", "rate-3", "rate-4"}
    assert ev["collocated"]["rate_rps"] == 3 and ev["judged_at"] == "the operating rate 3 req/s"
    rec = json.loads((run / "recommendation.json").read_text())
    assert rec["judged_at"] == "the operating rate 3 req/s"


@pytest.mark.slow  # a sweep's calibration, ~10 s
def test_requests_past_the_context_a_deployment_lists_are_named_before_any_run(tmp_path):
    """vLLM lists its context (max_model_len) in /v1/models: the guide's 8k-token prompts
    on a model served with 1000 tokens are named before a request is sent, and the
    calibration keeps to prompts that fit (its 1024-token one would be refused)."""
    with scripted(ttft_ms=20, itl_ms=5, max_model_len=1000) as short, \
            scripted(ttft_ms=20, itl_ms=5) as other:
        out = advisor("sweep", "--collocated-url", short, "--disagg-url", other, "--rates",
                      "20,40", "--num-prompts", "4", "--out", str(tmp_path), "--no-report")
    assert out.returncode == 2, out.stderr
    last = said(out.stderr)[-1]
    assert last.startswith("advisor: error: collocated-url serves a context of 1000 tokens "
                           "(max_model_len, in its /v1/models), and a request of long-prompt "
                           "needs ") and "--scale" in last
    run = run_dir_of(tmp_path)
    assert not list((run / "runs").glob("*/*"))  # nothing measured
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["calibration"]["prompt_tokens"] == [16, 64, 256]


@pytest.mark.slow  # a sweep's calibration and one run, ~15 s
def test_a_deployment_that_refuses_every_request_stops_the_sweep_naming_why(tmp_path):
    """vLLM answers HTTP 400 to a prompt past its context: the guide's 8k-token prompts on a
    model served with a 2048-token context, behind a front that does not list the context.
    One run shows it; no rate measures past it."""
    with scripted(ttft_ms=20, itl_ms=5, max_model_len=2048, lists_context=False) as short, \
            scripted(ttft_ms=20, itl_ms=5) as other:
        out = advisor("sweep", "--collocated-url", short, "--disagg-url", other, "--rates",
                      "20,40", "--num-prompts", "4", "--out", str(tmp_path), "--no-report")
    assert out.returncode == 2, out.stderr
    last = said(out.stderr)[-1]  # after the scripted server's "no metrics"
    assert "Traceback" not in out.stderr
    assert last.startswith("advisor: error: collocated-url refused all 4 requests at 20 req/s "
                           "(HTTP 400: prompt (") and "exceeds the model's context of 2048" \
        in last and "--scale" in last
    run = run_dir_of(tmp_path)
    assert [d.name for d in (run / "runs").glob("*/*")] == ["rate-20"]  # nothing after it
    records = (run / "runs" / "collocated-url" / "rate-20" / "requests.jsonl").read_text()
    statuses = [json.loads(line)["status"] for line in records.splitlines()]
    assert statuses == [400] * 4  # its records kept, as any run's


@pytest.mark.slow  # a sweep's calibration and three runs, ~40 s
def test_a_deployment_whose_command_exits_mid_sweep_stops_it_naming_the_log(tmp_path):
    """The disaggregated deployment's command serves for 6 s, then exits (as a server that
    crashes under load): the run it died in is kept, and no rate is measured after it."""
    from engine.processes.children import free_port

    port = free_port()
    cmd = (f"timeout 6 {sys.executable} -m advisor.testing.scripted_server --port {port} "
           "--ttft-ms 20 --itl-ms 5")
    with scripted(ttft_ms=20, itl_ms=5) as col:
        out = advisor("sweep", "--collocated-url", col, "--disagg-url",
                      f"http://127.0.0.1:{port}", "--disagg-cmd", cmd, "--rates", "1,2",
                      "--num-prompts", "12", "--scale", "0.01", "--output-scale", "0.02",
                      "--out", str(tmp_path), "--no-report")
    assert out.returncode == 2, out.stderr
    run = run_dir_of(tmp_path)
    last = said(out.stderr)[-1]
    assert last == (f"advisor: error: --disagg-cmd exited with code 124 while it was "
                    f"measured: see {run / 'disagg-url.log'}; the run at 1 req/s is kept, "
                    f"failures and all: --resume {run} measures the rest")
    assert sorted(str(d.relative_to(run / "runs")) for d in (run / "runs").glob("*/*")) == \
        ["collocated-url/rate-1", "collocated-url/rate-2", "disagg-url/rate-1"]
    result = json.loads((run / "runs" / "disagg-url" / "rate-1" / "result.json").read_text())
    assert result["failed"] > 0  # the requests after it went down


def _rates(run) -> dict[str, list[float]]:
    rows = list(csv.DictReader((run / "summary.csv").open()))
    return {p: sorted(float(r["request_rate"]) for r in rows if r["topology"] == p)
            for p in {r["topology"] for r in rows}}


def _good_against_failing(tmp_path, fail_every: int, num_prompts: int):
    """The run directory of a searched sweep: collocated a server that meets the SLO at every
    rate, disaggregated one that fails every `fail_every`-th request."""
    with scripted(ttft_ms=20, itl_ms=5) as good, \
            scripted(ttft_ms=20, itl_ms=5, fail_every=fail_every) as failing:
        out = advisor("sweep", "--collocated-url", good, "--disagg-url", failing,
                      "--start-rate", "8", "--max-steps", "2", "--num-prompts", str(num_prompts),
                      "--scale", "0.01", "--output-scale", "0.02", "--slo", "ttft:1000",
                      "itl:50", "--out", str(tmp_path), "--no-report")
    assert out.returncode == 0, out.stderr
    return run_dir_of(tmp_path)


def _result(run, placement: str, rate: float) -> dict:
    return json.loads((run / "runs" / placement / f"rate-{rate:g}" / "result.json").read_text())


@pytest.mark.slow  # a sweep with its calibration, ~25 s
def test_a_placement_whose_interval_already_parts_from_the_others_gets_no_second_pass(tmp_path):
    # collocated meets the SLO at every rate; disaggregated misses it at every rate (every
    # other request fails): apart after the first pass ([64, unbounded) against [0, 16]), so
    # disaggregated takes no step down below 16 req/s: it would decide nothing
    run = _good_against_failing(tmp_path, fail_every=2, num_prompts=6)
    assert _rates(run) == {"collocated-url": [8.0, 16.0, 32.0, 64.0], "disagg-url": [16.0]}
    ev = json.loads((run / "evidence.json").read_text())
    assert ev["disaggregated"]["max_goodput_interval_rps"] == [0.0, 16.0]
    # judged at 16 req/s: the failures there, counted and named beside the figures
    assert ev["judged_at"].startswith("16 req/s")
    assert (ev["disaggregated"]["failed_at_rate"], ev["disaggregated"]["error"]) == \
        (3, "HTTP 500: scripted failure")
    assert (ev["collocated"]["failed_at_rate"], ev["collocated"]["error"]) == (0, None)


@pytest.mark.slow  # a sweep with its calibration, ~25 s
def test_a_rate_within_noise_that_bounds_an_overlapping_interval_is_measured_again(tmp_path):
    # disaggregated fails every 12th request: 22 of 24 meet the SLO at every rate, which is
    # above the 0.9 target but not surely; its interval [0, unbounded) overlaps collocated's
    run = _good_against_failing(tmp_path, fail_every=12, num_prompts=24)
    top = max(_rates(run)["disagg-url"])
    for rate in _rates(run)["disagg-url"]:
        result = _result(run, "disagg-url", rate)
        again = rate == top  # its highest pass, measured again and pooled with the first
        assert result["num_requests"] == (48 if again else 24), rate
        assert result["workload_params"].get("topped_up", False) is again
        assert result["workload_params"]["repeats"] == (2 if again else 1)
        assert result["slo_attainment"] == 22 / 24
        lines = (run / "runs" / "disagg-url" / f"rate-{rate:g}" / "requests.jsonl").read_text()
        assert len(lines.splitlines()) == result["num_requests"]
        offsets = result["arrival_offsets"]
        assert offsets == sorted(offsets) and len(offsets) == result["num_requests"]
    # collocated met the SLO surely everywhere: nothing of it is measured again
    for rate in _rates(run)["collocated-url"]:
        result = _result(run, "collocated-url", rate)
        assert result["num_requests"] == 24 and "topped_up" not in result["workload_params"]
