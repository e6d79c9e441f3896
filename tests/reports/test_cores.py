"""The report's CPU column: how busy the instances and the measuring client kept the
host's cores in each run, and the mark on runs that left it none to spare."""

import json
import shutil

from advisor.output.report_data import load
from reports import html, markdown
from tests.fixtures import FIXTURE_RUN


def _set(result_json, instances_s: float | None, client_s: float | None) -> None:
    data = json.loads(result_json.read_text())
    values = data.setdefault("metrics", None) or {"values": {}, "gauges": {}, "buckets": {}}
    if instances_s is not None:
        values["values"]["process_cpu_seconds_total"] = instances_s
    data["metrics"], data["client_cpu_s"] = values, client_s
    result_json.write_text(json.dumps(data))


def _run(tmp_path, deployed_by_url: bool = False):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, run)
    for result in run.glob("runs/*/rate-*/result.json"):
        seconds = json.loads(result.read_text())["duration"]
        busy = result.parent.name == "rate-4" and "collocated" in str(result)
        # 1.7 + 0.2 of 2 cores at collocated's 4 req/s; 0.6 + 0.1 elsewhere
        _set(result, (1.7 if busy else 0.6) * seconds, (0.2 if busy else 0.1) * seconds)
    if deployed_by_url:
        manifest = json.loads((run / "manifest.json").read_text())
        manifest["config"]["collocated_url"] = "http://gpu-host:8000"
        (run / "manifest.json").write_text(json.dumps(manifest))
    return load(run)


def test_runs_that_kept_the_hosts_cores_busy_are_marked_and_explained(tmp_path):
    data = _run(tmp_path)
    assert data.columns[-1].key == "cores"
    cells = {(r.cells["placement"], r.cells["rate"]): r.cells["cores"] for r in data.rows}
    assert cells[("collocated-2", "4")] == "1.7 + 0.2 *"
    assert cells[("collocated-2", "2")] == cells[("disagg-1p1d", "4")] == "0.6 + 0.1"
    note = data.cores_note
    assert note.startswith("* ") and "2 cores" in note
    tail = note.split(": ", 1)[1]  # the part no renderer escapes
    assert tail in markdown.render(data, []) and tail in html.render(data, [])


def test_instances_on_another_host_add_nothing_to_this_ones_load(tmp_path):
    data = _run(tmp_path, deployed_by_url=True)
    assert all(not r.cells["cores"].endswith("*") for r in data.rows)
    assert data.cores_note is None


def test_runs_without_cpu_figures_have_no_column(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, run)
    assert "cores" not in {c.key for c in load(run).columns}
