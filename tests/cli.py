"""Running the `advisor` CLI as a user would: a subprocess, its exit code and output."""

import re
import subprocess
import sys


def advisor(*args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "advisor.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def advisor_here(*args) -> subprocess.CompletedProcess:
    """The CLI run in this process (typer's runner), answered as `advisor` answers: for
    bad flags, where a subprocess spends its second or two importing what the error comes
    before. An exception that escapes the CLI is raised here, so a traceback still fails.
    Each bad-flag test keeps its first case on `advisor`, the user's way in."""
    from typer.testing import CliRunner

    from advisor.cli import app

    r = CliRunner().invoke(app, [str(a) for a in args])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return subprocess.CompletedProcess(args, r.exit_code, r.stdout, r.stderr)


_PROGRESS = re.compile(r"^\[\s*[\d.]+ s\] ")


def said(stderr: str) -> list[str]:
    """The lines the CLI wrote on standard error other than its progress lines."""
    return [line for line in stderr.strip().splitlines() if not _PROGRESS.match(line)]
