"""Reports from a checked-in run directory (a quick sweep of the tiny engine, written in the
previous run-directory format) and from a sweep with failures: rendered in headless Chromium,
escaped, honest about failures and about damaged run directories."""

import json
import shutil

import pytest

from tests.advisor.helpers import scripted
from tests.cli import advisor
from tests.fixtures import FIXTURE_RUN
from tests.reports import browser

pytestmark = pytest.mark.integration  # starts servers or runs the CLI

PLOTS = ("itl", "ttft", "attainment", "kv_transfer", "timeline")




def only_dir(parent):
    (d,) = [p for p in parent.iterdir() if p.is_dir()]
    return d


@pytest.fixture
def engine_run(tmp_path):
    """A copy of the checked-in run: the tiny engine in both placements at two rates."""
    run = tmp_path / "engine-run"
    shutil.copytree(FIXTURE_RUN, run)
    return run


@pytest.mark.slow  # starts a headless Chromium, ~6 s
def test_report_renders_in_chromium_with_every_plot_and_nothing_fetched(engine_run, tmp_path):
    p = advisor("report", str(engine_run))
    assert p.returncode == 0, p.stderr
    html = engine_run / "report.html"
    md = (engine_run / "report.md").read_text()
    for name in PLOTS:
        assert f"](report-{name}.png)" in md and (engine_run / f"report-{name}.png").is_file()
    text = html.read_text()
    assert "<script" not in text and "@import" not in text
    for attr in ('src="http', "src='http", 'href="http', "href='http", "url(http"):
        assert attr not in text
    if browser.CHROMIUM is None:
        pytest.skip("chromium is not installed (.ci/setup installs it)")
    shot = tmp_path / "report.png"
    seen = browser.inspect(html.as_uri(), str(shot))
    assert seen["console_errors"] == [] and seen["exceptions"] == [] and seen["dialogs"] == []
    # the page itself, nothing else (a plot's raster layer is inline, a data: URI)
    assert [r for r in seen["requests"] if not r.startswith("data:")] == [html.as_uri()]
    assert len(seen["svg_boxes"]) == len(PLOTS)
    assert all(w > 300 and h > 150 for w, h in seen["svg_boxes"])
    assert shot.stat().st_size > 50_000  # a real full-page picture, not a blank one


@pytest.mark.slow  # renders reports full of hostile strings, ~6 s
def test_hostile_strings_are_escaped_and_never_run(engine_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(engine_run, run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"]["model"] = "<script>alert(1)</script>"
    manifest["command"] = ["advisor", "sweep", "--model", "<img src=x onerror=alert(2)>"]
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert advisor("report", str(run)).returncode == 0
    text = (run / "report.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "<script>" not in text
    assert "<img src=x" not in text
    if browser.CHROMIUM is None:
        pytest.skip("chromium is not installed")
    seen = browser.inspect((run / "report.html").as_uri(), str(tmp_path / "x.png"))
    assert seen["dialogs"] == [] and seen["scripts"] == 0


@pytest.mark.integration
@pytest.mark.slow  # a whole sweep
def test_failed_requests_show_in_the_tables_and_count_in_attainment(tmp_path):
    with scripted(ttft_ms=20, itl_ms=5, fail_every=3) as col, scripted(ttft_ms=20, itl_ms=5) as dis:
        p = advisor("sweep", "--collocated-url", col, "--disagg-url", dis, "--rates", "4",
                    "--num-prompts", "9", "--scale", "0.01", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    run = only_dir(tmp_path)
    html, md = (run / "report.html").read_text(), (run / "report.md").read_text()
    assert 'class="failed"' in html
    row = next(line for line in md.splitlines() if line.startswith("| collocated-url"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3:6] == ["6", "3", "0.667"]  # completed, failed, attainment 6/9


def test_a_run_with_no_request_completed_shows_no_latency(engine_run):
    """vLLM's statistics read 0 ms where nothing completed: the table shows none."""
    path = engine_run / "runs" / "collocated-2" / "rate-4" / "result.json"
    result = json.loads(path.read_text())
    result.update(completed=0, failed=result["num_requests"], slo_attainment=0.0,
                  **{k: 0.0 for k in result if k.endswith("_ms")})
    path.write_text(json.dumps(result))
    assert advisor("report", str(engine_run), "--format", "md").returncode == 0
    md = (engine_run / "report.md").read_text()
    head = next(line for line in md.splitlines() if line.startswith("| placement"))
    names = [c.strip() for c in head.strip("|").split("|")]
    cells = {float(r[1]): r for line in md.splitlines() if line.startswith("| collocated-2")
             for r in [[c.strip() for c in line.strip("|").split("|")]]}
    ttft, p99 = names.index("TTFT median"), names.index("P99 ITL")
    assert cells[4.0][ttft] == cells[4.0][p99] == "-"  # nothing was measured
    assert float(cells[2.0][ttft]) > 0 and float(cells[2.0][p99]) > 0  # the other run's kept


@pytest.mark.slow  # renders a dozen damaged run directories, ~6 s
def test_damaged_run_directories_are_named_never_a_traceback(engine_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(engine_run, run)
    (run / "evidence.json").unlink()
    (run / "recommendation.json").write_text("{not json")
    first = next(run.glob("runs/*/rate-*/requests.jsonl"))
    first.write_text(first.read_text() + "garbage\n")
    p = advisor("report", str(run))
    assert p.returncode == 0, p.stderr
    text = (run / "report.html").read_text()
    assert "evidence.json is missing" in text and "recommendation.json is corrupt" in text
    assert "is corrupt and was skipped" in text
    for bad in (tmp_path / "empty", tmp_path / "nowhere"):
        if bad.name == "empty":
            bad.mkdir()
        p = advisor("report", str(bad))
        assert p.returncode == 2 and "Traceback" not in p.stderr and str(bad) in p.stderr


@pytest.mark.slow  # draws a report with the overlay, ~7 s
def test_compare_overlays_two_runs(engine_run, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(engine_run, other)
    run = tmp_path / "run"
    shutil.copytree(engine_run, run)
    assert advisor("report", str(run), "--compare", str(other), "--format", "md").returncode == 0
    assert "](report-compare.png)" in (run / "report.md").read_text()
    assert advisor("report", str(run), "--format", "pdf").returncode == 2


def test_report_files_replace_symlinks_never_write_through_them(engine_run, tmp_path):
    target = tmp_path / "elsewhere.png"
    target.write_bytes(b"keep me")
    (engine_run / "report-itl.png").symlink_to(target)
    (engine_run / "report.md").symlink_to(tmp_path / "elsewhere.md")
    assert advisor("report", str(engine_run), "--format", "md").returncode == 0
    assert target.read_bytes() == b"keep me" and not (tmp_path / "elsewhere.md").exists()
    assert not (engine_run / "report-itl.png").is_symlink()
    assert (engine_run / "report-itl.png").read_bytes().startswith(b"\x89PNG")
