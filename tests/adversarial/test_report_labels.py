"""Finding 9, the report: a placement named with matplotlib's mathtext (`$\\frac{a$`) in a
shared run directory once ended `advisor report` in a traceback; labels are plain text."""

import json
import shutil
from pathlib import Path

import pytest

from tests.cli import advisor

pytestmark = pytest.mark.integration

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "run-format1"
NAME = "disagg-$\\frac{a$"


def test_a_placement_named_as_mathtext_is_drawn_as_text(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    (run / "runs" / "disagg-1p1d").rename(run / "runs" / NAME)
    for rate in (run / "runs" / NAME).iterdir():
        result = rate / "result.json"
        data = json.loads(result.read_text())
        data["topology"] = NAME
        result.write_text(json.dumps(data))
    r = advisor("report", str(run), timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    # shown as written: the Markdown escapes its backslash, so it renders as NAME
    assert NAME.replace("\\", "\\\\") in (run / "report.md").read_text()
