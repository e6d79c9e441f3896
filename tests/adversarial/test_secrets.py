"""Finding 7: a key given on the command line never reaches a file. Every file a bench and
a sweep write is searched for it; the command lines their manifests record say
`<redacted>` in its place."""

import json

import pytest

from tests.advisor.helpers import scripted
from tests.cli import advisor

pytestmark = pytest.mark.integration

KEY = "sk-do-not-write-me-0123456789"


def _files_holding(root, needle: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def test_bench_writes_no_api_key(tmp_path):
    with scripted(ttft_ms=5, itl_ms=1) as url:
        r = advisor("bench", "--base-url", url, "--model", "scripted", "--num-prompts", "4",
                    "--request-rate", "50", "--random-input-len", "8", "--random-output-len",
                    "4", "--api-key", KEY, "--result-dir", str(tmp_path), "--seed", "1")
    assert r.returncode == 0, r.stderr
    assert _files_holding(tmp_path, KEY) == []
    command = json.loads((tmp_path / "result.json").read_text())["manifest"]["command"]
    assert command[command.index("--api-key") + 1] == "<redacted>"
    assert KEY not in r.stdout + r.stderr


@pytest.mark.slow  # a sweep against a scripted deployment, ~15 s
def test_sweep_writes_no_api_key(tmp_path):
    with scripted(ttft_ms=5, itl_ms=1) as url:
        r = advisor("sweep", "--collocated-url", url, "--disagg-url", url, "--rates", "2",
                    "--model", "scripted", "--scale", "0.05", "--output-scale", "0.1",
                    "--num-prompts", "4", f"--api-key={KEY}", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert _files_holding(tmp_path, KEY) == []
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    command = json.loads((run / "manifest.json").read_text())["command"]
    assert "--api-key=<redacted>" in command


def test_only_secret_flags_and_keys_are_redacted():
    from advisor.rundata.files import redacted_argv, redacted_config

    argv = ["advisor", "bench", "--api-key", "K", "--hf-token=T", "--max-num-batched-tokens",
            "512", "--check-prompt-tokens", "4", "--client-secret", "S"]
    assert redacted_argv(argv) == ["advisor", "bench", "--api-key", "<redacted>",
                                   "--hf-token=<redacted>", "--max-num-batched-tokens", "512",
                                   "--check-prompt-tokens", "4", "--client-secret", "<redacted>"]
    assert redacted_config({"api_key": "K", "max_num_batched_tokens": 5, "token": None}) == {
        "api_key": "<redacted>", "max_num_batched_tokens": 5, "token": None}
