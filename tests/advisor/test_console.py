"""What the advisor prints: on a terminal, tables wrapped to its width; into a file or a
pipe, plain lines with every value whole; and progress as lines where there is no terminal."""

import io
import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

from advisor.output.console import print_recommendation
from advisor.output.progress import ProgressLines, progress_bars
from advisor.rundata.recommendation import Recommendation

pytestmark = pytest.mark.unit

SCHEMA = Path(__file__).resolve().parents[1] / "fixtures" / "schema"
LONG = "frontend_cpu_ms_per_request=0.328, source=engine:frontend_cpu_seconds_total"


def advice() -> Recommendation:
    path = SCHEMA / "recommendation.json"
    return Recommendation.from_json(json.loads(path.read_text()), str(path))


def printed(terminal: bool, width: int = 80) -> str:
    buf = io.StringIO()
    print_recommendation(advice(), Console(file=buf, force_terminal=terminal, width=width,
                                           color_system=None))
    return buf.getvalue()


def test_into_a_pipe_every_value_is_whole_and_each_row_one_line():
    out = printed(terminal=False)
    assert "…" not in out and "│" not in out
    row = next(line for line in out.splitlines() if line.strip().startswith("frontend_cpu_heavy"))
    assert LONG in row and "frontend_cpu_share=0.1, goodput_margin=0.1" in row
    reason = next(line for line in out.splitlines() if "confident:" in line)
    assert reason.endswith("disaggregated do not overlap")  # not wrapped at 80 columns


def test_on_a_narrow_terminal_the_table_wraps_and_cuts_nothing():
    out = printed(terminal=True, width=90)
    assert "…" not in out and "│" in out
    assert max(len(line) for line in out.splitlines()) <= 90
    cells = "".join(line.split("│")[4].strip() for line in out.splitlines() if line.count("│") > 4)
    assert LONG.replace(" ", "") in cells.replace(" ", "")


def test_progress_lines_say_each_step_and_each_finished_run():
    now = [0.0]
    out = io.StringIO()
    lines = ProgressLines(out, clock=lambda: now[0])
    sweep = lines.add_task("sweep", total=None)
    lines.update(sweep, description="collocated-2 @ 1.1 req/s")
    lines.update(sweep, description="collocated-2 @ 1.1 req/s")  # unchanged: said once
    run = lines.add_task("collocated-2 @ 1.1 req/s", total=30)
    now[0] = 27.5
    for _ in range(30):
        lines.advance(run)
    lines.remove_task(run)
    assert out.getvalue().splitlines() == [
        "[    0.0 s] sweep",
        "[    0.0 s] collocated-2 @ 1.1 req/s",
        "[   27.5 s] collocated-2 @ 1.1 req/s: 30 of 30 done in 27.5 s"]


@pytest.mark.parametrize(("stdout_tty", "stderr_tty", "lines"),
                         [(True, True, False), (False, True, True), (True, False, True)])
def test_progress_is_lines_wherever_an_output_is_a_log_or_a_pipe(monkeypatch, stdout_tty,
                                                                  stderr_tty, lines):
    monkeypatch.setattr(sys, "stdout", _Stream(stdout_tty))
    monkeypatch.setattr(sys, "stderr", _Stream(stderr_tty))
    assert isinstance(progress_bars(), ProgressLines) == lines


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty
