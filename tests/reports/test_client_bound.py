"""The report marks a run whose measuring client did not keep up, with the reason and that
no decision rests on it; runs without a mark add no column."""

import json
import shutil

from advisor.output.report_data import load
from reports import markdown
from tests.fixtures import FIXTURE_RUN

WHY = "the measuring client did not keep up: requests left 42.0 ms behind schedule at p99"


def test_a_run_the_client_did_not_keep_up_with_is_marked_with_why(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, run)
    marked = next(run.glob("runs/disagg-*/rate-*/result.json"))
    data = json.loads(marked.read_text())
    data["client_check"] = {"cpu_share": 0.9, "loop_lag_p99_ms": 1.0,
                            "send_late_p99_ms": 42.0, "bound": WHY}
    marked.write_text(json.dumps(data))
    report = load(run)
    assert report.columns[-1].key == "client_bound"
    cells = [r for r in report.rows if r.cells["client_bound"]]
    assert len(cells) == 1
    assert cells[0].cells["client_bound"] == f"{WHY}; not used for the decision"
    assert WHY in markdown.render(report, [])


def test_runs_without_a_mark_have_no_column(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, run)
    assert "client_bound" not in {c.key for c in load(run).columns}
