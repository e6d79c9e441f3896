"""A file someone hands `advisor import` cannot make it allocate what the file only declares
(issue 56, item 5): a guidellm request declaring four million token iterations for five
output tokens is one line naming the request, in a process that stays small."""

import json
import subprocess
import sys

import pytest

from tests.cli import said

pytestmark = pytest.mark.integration


# the CLI, then the process's own peak RSS (kB) written to argv[1]: VmHWM, which an exec
# resets (getrusage's maxrss keeps the forking parent's)
_MEASURED = """import sys
from pathlib import Path
from advisor.cli import app
out, sys.argv = Path(sys.argv[1]), ["advisor", *sys.argv[2:]]
try:
    app()
finally:
    status = Path("/proc/self/status").read_text().split("VmHWM:")[1]
    out.write_text(status.split()[0])
"""


def _guidellm(iterations, output_tokens) -> dict:
    timings = {"request_start": 0.5, "first_token_iteration": 1.0,
               "last_token_iteration": 2.0, "request_end": 2.0,
               "token_iterations": iterations}
    request = {"info": {"timings": timings}, "prompt_tokens": 10,
               "output_tokens": output_tokens}
    return {"metadata": {"guidellm_version": "0.8.1"}, "benchmarks": [
        {"config": {"strategy": {"type_": "constant", "rate": 1.0}},
         "requests": {"successful": [request]}}]}


@pytest.mark.parametrize("iterations,output_tokens", [(4_000_000, 5), (300_000_000, 5),
                                                      ("many", 5), (-3, 5),
                                                      (4_000_000, 4_000_000_000)])
def test_declared_iterations_are_bounded_before_anything_is_made(tmp_path, iterations,
                                                                  output_tokens):
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(_guidellm(iterations, output_tokens)))
    peak = tmp_path / "peak_kb"
    out = subprocess.run([sys.executable, "-c", _MEASURED, str(peak), "import", "--placement",
                          f"collocated={path}", "--placement", f"disagg={path}", "--out",
                          str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    peak_mb = int(peak.read_text()) / 1024
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    (line,) = said(out.stderr)
    assert f"{path} benchmark 0" in line and "token_iterations" in line
    assert peak_mb < 200, f"{peak_mb:.0f} MB"
    assert not (tmp_path / "out").exists()
