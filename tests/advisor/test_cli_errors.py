"""A user's mistake is one line and exit code 2; a bug is not disguised as one."""

import subprocess
import sys
from pathlib import Path

import pytest
import typer

from advisor.cli.app import user_errors
from advisor.errors import UsageError
from advisor.rundata.files import RunDataError
from engine.processes.children import LaunchError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("error", [UsageError("--rates: bad"), RunDataError("x.json: corrupt"),
                                   LaunchError("instance exited")])
def test_what_the_user_can_fix_exits_2_with_one_line(error, capsys):
    with pytest.raises(typer.Exit) as e, user_errors():
        raise error
    assert e.value.exit_code == 2
    err = capsys.readouterr().err
    assert err.startswith("advisor: error: ") and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("bug", [ValueError("a bug"), KeyError("p99_itl_ms"), TypeError("x")])
def test_a_bug_surfaces_as_itself(bug):
    with pytest.raises(type(bug)), user_errors():
        raise bug


@pytest.mark.parametrize("flags", [["--workload", "nope"], ["--model", "nope"], ["--rates", "0"],
                                   ["--collocated-url", "notaurl"]])
def test_a_bad_sweep_flag_is_answered_before_torch_loads(flags):
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom advisor.cli import app\n"
            f"r = CliRunner().invoke(app, ['sweep', *{flags!r}])\n"
            "assert r.exit_code == 2 and 'Traceback' not in r.output, r.output\n"
            "sys.exit('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("args,flag", [
    (["sweep", "--disagg-url", "http://127.0.0.1:1", "--disagg-metrics", "ftp://x"],
     "--disagg-metrics 'ftp://x'"),
    (["bench", "--base-url", "localhost:8000"], "--base-url 'localhost:8000'"),
    (["probe", "--transfer-check", "127.0.0.1:8000"], "--transfer-check '127.0.0.1:8000'"),
])
def test_a_url_flag_that_is_no_url_is_named(args, flag):
    """Not a traceback from urllib once the run has started (it was, for the sweep)."""
    from typer.testing import CliRunner

    from advisor.cli import app

    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and flag in r.output and "expected an http(s) URL" in r.output


def test_several_urls_after_one_metrics_flag_say_to_repeat_it():
    """The spelling the guide once showed: the second URL is neither an SLO nor silently
    dropped, and the answer says how to give it."""
    from typer.testing import CliRunner

    from advisor.cli import app

    r = CliRunner().invoke(app, ["sweep", "--disagg-url", "http://127.0.0.1:1",
                                 "--disagg-metrics", "http://127.0.0.1:2/metrics",
                                 "http://127.0.0.1:3/metrics"])
    assert r.exit_code == 2 and "--slo" not in r.output
    assert "'http://127.0.0.1:3/metrics'" in r.output and "--disagg-metrics URL --disagg-metrics" \
        in r.output
