"""Run directories as typed data: the previous format reads as is, a newer one is refused,
damage is named by file and field, and what is written reads back the same."""

import dataclasses
import json
import shutil

import pytest

from advisor.errors import UsageError
from advisor.measure.records import RequestRecord
from advisor.measure.stats import summarize
from advisor.measure.workload_run import record_row, records_of
from advisor.rundata.evidence import Calibration, Evidence
from advisor.rundata.result import RunResult
from advisor.rundata.rundir import FORMAT, RunDir
from advisor.rundata.slo import Slo
from advisor.rundata.stats import TurnStats
from tests.cli import advisor, advisor_here, said
from tests.fixtures import FIXTURE_RUN


@pytest.fixture
def run(tmp_path):
    shutil.copytree(FIXTURE_RUN, tmp_path / "run")
    return RunDir.existing(tmp_path / "run")


def test_the_previous_format_reads_as_it_is(run):
    manifest = run.read_manifest()
    assert manifest.format == 1 and manifest.model == "tiny" and manifest.seed == 0
    assert manifest.host.cpus_usable == 2 and manifest.versions.torch == "2.13.0+cpu"
    assert manifest.probe is not None and manifest.probe.links["shm"].gbps > 0
    assert manifest.calibration is None and manifest.sizing is None  # not recorded then
    problems = []
    runs = run.read_runs(problems)
    assert problems == []
    assert sorted((r.placement, r.kind, r.rate) for r in runs) == [
        ("collocated-2", "collocated", 2.0), ("collocated-2", "collocated", 4.0),
        ("disagg-1p1d", "disagg", 2.0), ("disagg-1p1d", "disagg", 4.0)]
    assert all(len(r.records) == r.described.num_prompts == 6 for r in runs)
    # result.json's flat statistics read as typed ones, and write back as they were
    assert all(r.stats.completed == 6 and r.stats.latency_ms("ttft", "median") > 0
               and r.stats.latency_ms("itl", "p99") is not None for r in runs)
    stored = json.loads((run.run_path("disagg-1p1d", 2) / "result.json").read_text())
    back = RunResult.read(run.run_path("disagg-1p1d", 2)).to_json()
    old_slo = stored.pop("goodput_slos")  # format 1's {metric: ms}, written back as objectives
    assert {k: v for k, v in back.items() if k in stored} == stored
    assert Slo.from_run_file(back["goodput_slos"], "back") == Slo.of(old_slo["ttft"],
                                                                       old_slo["itl"])
    ev = run.read_evidence()
    assert ev.slo.ttft_ms == 2000 and ev.disaggregated.placement == "disagg-1p1d"
    assert ev.kv_transfer.transfers > 0 and ev.kv_transfer.connector == "shm"


@pytest.mark.integration
def test_a_newer_format_is_refused_by_name(run):
    manifest = run.read_manifest()
    run.write_manifest(manifest)
    assert run.read_manifest().format == FORMAT  # what this advisor writes
    newer = {**manifest.to_json(), "format": FORMAT + 1}
    (run.path / "manifest.json").write_text(json.dumps(newer))
    with pytest.raises(UsageError, match=f"manifest.json: run-directory format {FORMAT + 1}"):
        RunDir.existing(run.path)
    out = advisor_here("report", str(run.path))
    assert out.returncode == 2 and "run-directory format" in out.stderr
    assert len(said(out.stderr)) == 1


@pytest.mark.parametrize("field,value,needle", [
    ("slo_attainment", "high", "slo_attainment must be a number"),
    ("num_prompts", 6.5, "num_prompts must be an integer"),
    ("kind", 3, "kind must be a string"),
    ("per_turn", [{"turn": 1, "median_ttft_ms": "fast"}], "per_turn must be a list"),
])
def test_a_damaged_result_names_its_file_and_field(run, field, value, needle):
    path = run.run_path("collocated-2", 2) / "result.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, field: value}))
    with pytest.raises(UsageError, match=needle) as e:
        run.read_run("collocated-2", 2)
    assert str(path) in str(e.value)


def test_written_runs_and_evidence_read_back_the_same(run, tmp_path):
    original = run.read_run("disagg-1p1d", 4, records=True)
    original = dataclasses.replace(original, stats=dataclasses.replace(  # as multi-turn runs have
        original.stats, per_turn=[TurnStats(1, 3, 0, median_ttft_ms=120.5)]))
    copy = RunDir(tmp_path / "copy")
    copy.write_run(original)
    back = copy.read_run("disagg-1p1d", 4, records=True)
    assert back.to_json() == original.to_json() and back.records == original.records
    ev = run.read_evidence()
    copy.write_evidence(ev)
    assert copy.read_evidence() == ev == Evidence.from_json(ev.to_json())


@pytest.mark.integration
def test_resume_over_a_corrupt_result_is_one_line_naming_it(run):
    (run.run_path("disagg-1p1d", 4) / "result.json").write_text("{oops")
    (run.path / "recommendation.json").unlink()
    out = advisor_here("sweep", "--resume", str(run.path))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "disagg-1p1d/rate-4/result.json is not valid JSON" in out.stderr


@pytest.mark.integration
def test_recommend_decides_on_the_checked_in_run(run):
    (run.path / "recommendation.json").unlink()
    out = advisor("recommend", str(run.path), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == run.read_recommendation().to_json()
    assert RunResult.read(run.run_path("collocated-2", 4)).get("completed") == 6


def test_the_wake_up_curve_is_the_line_through_two_prompts_after_each_idle():
    def cal(idle, extra, tokens=()):
        # back-to-back TTFT: 20 ms at 64 tokens, 220 ms at 1024 (the fitted line)
        return Calibration([64, 1024], [20.0, 220.0], [1], [10.0], 0.2083333, 6.6666667,
                           wake_idle_s=idle, wake_extra_ms=extra, wake_prompt_tokens=tokens)

    two = cal((1.0, 1.0, 3.0, 3.0), (30.0, 70.0, 40.0, 120.0), (64, 1024, 64, 1024))
    (z, one, three) = two.wake_curve()
    assert z == (0.0, 0.0, 0.0)
    # after 1 s: +0.2 ms per ms of the step and +26 ms; after 3 s: +0.4 and +32
    assert one == pytest.approx((1.0, 26.0, 0.2))
    assert three == pytest.approx((3.0, 32.0, 0.4))
    assert "+26 ms (+20% of the step) after 1 s" in two.summary()
    # one prompt (as runs recorded before the prompt was), or a point left out: flat
    assert cal((1.0, 3.0), (30.0, 40.0)).wake_curve()[1:] == ((1.0, 30.0, 0.0), (3.0, 40.0, 0.0))
    assert cal((1.0, 3.0, 3.0), (30.0, 40.0, 120.0), (64, 64, 1024)).wake_curve()[1] == (
        1.0, 30.0, 0.0)
    # a longer prompt that paid less does not make the share negative
    assert cal((1.0, 1.0), (70.0, 30.0), (64, 1024)).wake_curve()[1] == (1.0, 50.0, 0.0)


def test_stored_rows_give_back_records_with_the_same_statistics():
    start = 1000.0
    records = [
        # sent at the run's very start: its row says 0.0, which must not read as "never"
        RequestRecord(0, "c0", 0, False, start, start, start, [start + 0.2, start + 0.25,
                      start + 0.4], start + 0.4, 10, 3, status=200),
        RequestRecord(1, "c1", 0, False, start + 0.5, start + 0.5, start + 0.51,
                      [start + 0.61, start + 0.62], start + 0.62, 10, 2, status=200),
        # never sent: refused before its body went out, a failure and an SLO miss
        RequestRecord(2, "c2", 0, False, start + 1.0, start + 1.0, 0.0, [], 0.0, 10, 0,
                      status=None, error="connection refused"),
        RequestRecord(3, "w", 0, True, start, start, start + 0.1, [start + 0.2], start + 0.2,
                      10, 1, status=200),  # a warm-up: not counted either way
    ]
    rows = [record_row(r, start) for r in records]
    assert rows[0]["sent"] == 0.0 and rows[2]["sent"] is None
    back = records_of(json.loads(json.dumps(rows)))
    assert [r.ok for r in back] == [r.ok for r in records]
    slos, pcts = Slo.of(150, 100), [50.0, 99.0]
    want, got = summarize(records, 2.0, slos, pcts), summarize(back, 2.0, slos, pcts)
    assert got["completed"] == 2 and got["failed"] == 1 and got["good_requests"] == 1
    for key, value in want.to_json().items():
        if key == "ci95":
            for name, bounds in value.items():
                assert got.to_json()[key][name] == pytest.approx(bounds, abs=1e-5), name
        elif key == "goodput_slos":
            assert got[key] == slos
        else:
            assert got[key] == pytest.approx(value, abs=1e-5), key
