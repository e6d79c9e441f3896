"""A user's mistake is one line and exit code 2; a bug is not disguised as one."""

import pytest
import typer

from advisor.cli import _user_errors
from advisor.errors import UsageError
from advisor.rundata.files import RunDataError
from engine.serve.launch import LaunchError


@pytest.mark.parametrize("error", [UsageError("--rates: bad"), RunDataError("x.json: corrupt"),
                                   LaunchError("instance exited")])
def test_what_the_user_can_fix_exits_2_with_one_line(error, capsys):
    with pytest.raises(typer.Exit) as e, _user_errors():
        raise error
    assert e.value.exit_code == 2
    err = capsys.readouterr().err
    assert err.startswith("advisor: error: ") and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("bug", [ValueError("a bug"), KeyError("p99_itl_ms"), TypeError("x")])
def test_a_bug_surfaces_as_itself(bug):
    with pytest.raises(type(bug)), _user_errors():
        raise bug
