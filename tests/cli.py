"""Running the `advisor` CLI as a user would: a subprocess, its exit code and output."""

import subprocess
import sys


def advisor(*args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "advisor.cli", *args], capture_output=True,
                          text=True, timeout=timeout)
