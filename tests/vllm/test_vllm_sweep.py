"""`advisor sweep --engine vllm`: a short sweep on real vLLM (the mini preset, one rate) ends
in a decision, with vLLM's version, the exact scripts and NIXL's transfers on record."""

import json

import pytest

from tests.cli import advisor

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]


def test_a_short_sweep_on_vllm_ends_in_a_decision(tmp_path, vllm_settings):
    out = advisor("sweep", "--engine", "vllm", "--rates", "3", "--num-prompts", "12",
                  "--out", str(tmp_path), "--no-report", timeout=450)
    assert out.returncode == 0, out.stderr[-3000:]
    [run] = [d for d in tmp_path.iterdir() if d.is_dir()]
    rec = json.loads((run / "recommendation.json").read_text())
    assert rec["action"] in ("disaggregate", "stay-collocated", "fix-transfer", "measure-first")
    manifest = json.loads((run / "manifest.json").read_text())
    engine = manifest["engine"]
    assert (engine["name"], engine["version"]) == ("vllm", vllm_settings.install.version)
    assert set(engine["commands"]) == {"collocated-2", "disagg-1p1d"}
    assert "NixlConnector" in engine["commands"]["disagg-1p1d"]
    evidence = json.loads((run / "evidence.json").read_text())
    assert evidence["kv_transfer"]["transfers"] >= 12  # vLLM's own counters, read
    for name in ("collocated-2", "disagg-1p1d"):
        result = json.loads((run / "runs" / name / "rate-3" / "result.json").read_text())
        assert result["failed"] == 0 and result["completed"] == 12
