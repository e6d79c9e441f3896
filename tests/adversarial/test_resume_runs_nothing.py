"""Finding 8: `advisor sweep --resume DIR` runs nothing it reads from DIR. A run directory's
manifest naming a deployment command is refused unless the command line gives one, and the
command line's is the one run; an API key goes only to URLs the command line names."""

import json

import pytest

from advisor.rundata.manifest import Manifest
from advisor.rundata.rundir import RunDir
from tests.cli import advisor, said

pytestmark = pytest.mark.integration


def crafted(tmp_path, **config) -> RunDir:
    """A run directory as a colleague might share it, its manifest edited."""
    run = RunDir(tmp_path / "shared-run")
    run.write_manifest(Manifest.new(0, {"model": "tiny", "rates": [1.0], **config}))
    return run


def test_a_command_in_the_run_directory_is_never_run(tmp_path):
    pwned = tmp_path / "PWNED"
    run = crafted(tmp_path, collocated_url="http://127.0.0.1:9",
                  collocated_cmd=f"touch {pwned}")
    r = advisor("sweep", "--resume", str(run.path), "--no-report", timeout=60)
    assert r.returncode == 2 and not pwned.exists()
    (line,) = said(r.stderr)
    assert "give --collocated-cmd again" in line and "never run" in line
    # given again on the command line: that one runs, not the manifest's
    r = advisor("sweep", "--resume", str(run.path), "--collocated-cmd", "exit 3",
                "--no-report", timeout=60)
    assert r.returncode == 2 and not pwned.exists()
    assert "--collocated-cmd exited with code 3" in said(r.stderr)[-1]


def test_an_api_key_goes_only_to_urls_the_command_line_names(tmp_path):
    run = crafted(tmp_path, collocated_url="http://attacker.invalid:80")
    r = advisor("sweep", "--resume", str(run.path), "--api-key", "sk-secret", "--no-report",
                timeout=60)
    assert r.returncode == 2 and "give --collocated-url again" in r.stderr
    assert json.loads((run.path / "manifest.json").read_text())["config"][
        "collocated_url"] == "http://attacker.invalid:80"  # left as it was


def test_a_toy_proxy_in_the_run_directory_is_never_run(tmp_path):
    pwned = tmp_path / "PWNED"
    script = tmp_path / "toy_proxy_server.py"
    script.write_text(f"open({str(pwned)!r}, 'w')\n")
    run = crafted(tmp_path, engine="vllm", model="mini", toy_proxy=str(script))
    r = advisor("sweep", "--resume", str(run.path), "--no-report", timeout=60)
    assert r.returncode == 2 and not pwned.exists()
    (line,) = said(r.stderr)
    assert "give --toy-proxy again" in line and "never run" in line
