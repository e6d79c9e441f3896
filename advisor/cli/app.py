"""The `advisor` app and what every verb shares: one line and exit code 2 for what the
user can fix, SLO words gathered from extra arguments."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import typer

from advisor.errors import UsageError
from engine.api import LaunchError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Measure collocated vs disaggregated LLM serving and recommend a placement.")


@app.callback()
def main() -> None:
    """advisor: measure, decide, report."""


def fail(message: str) -> None:
    """One clear line on stderr and exit code 2 (a usage error)."""
    typer.echo(f"advisor: error: {message}", err=True)
    raise typer.Exit(2)


@contextlib.contextmanager
def user_errors(what: str = "") -> Iterator[None]:
    """Turn what the user can fix into one line and exit code 2."""
    try:
        yield
    except UsageError as e:
        fail(str(e))
    except LaunchError as e:
        fail(f"{what or 'a deployment'} failed to start: {e}")


def slo_items(values: list[str] | None, ctx: typer.Context) -> list[str]:
    """An SLO option's values plus the NAME:MS words after it: vLLM's `--goodput ttft:2000
    itl:50` takes several values per flag, which click leaves as extra arguments."""
    items = list(values or [])
    for extra in ctx.args:
        if not _SLO_WORD.match(extra):
            fail(f"unexpected argument {extra!r}: a flag takes one value each time it is "
                 "given (--disagg-metrics URL --disagg-metrics URL)")
        items.append(extra)
    return items


_SLO_WORD = re.compile(r"^[a-z0-9_]+:[^/]*$")  # NAME:MS, which no URL is
