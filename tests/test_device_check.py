"""scripts/device_check.sh, the GPU checks prepared for the day a GPU is lent, runs its
every step on the CPU with --dry-run: so it is known to work before a GPU's minutes are
spent on it."""

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # a short sweep inside, ~30 s


def test_the_dry_run_takes_every_step_and_writes_every_figure(tmp_path):
    out = tmp_path / "figures" / "device_check.json"
    r = subprocess.run(["bash", str(ROOT / "scripts" / "device_check.sh"), "--dry-run",
                        "--out", str(out)], capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(out.read_text())
    assert report["dry_run"] and report["failed"] == []
    assert [k for k in report if isinstance(report[k], dict)] == [
        "environment", "correctness", "transfer", "p2p", "sweep"]
    for model in ("tiny", "small"):
        assert report["correctness"][model]["identical"], report["correctness"]
    t = report["transfer"]
    assert t["connector"] == "shm" and t["connector_gbps"] > 0 and t["copy_gbps"] > 0
    assert len(report["p2p"]["gpus"]) == 8 and report["p2p"]["p2p_pairs"]
    assert report["sweep"]["action"] and report["sweep"]["wall_s"] > 0


def test_a_bad_flag_is_refused():
    r = subprocess.run(["bash", str(ROOT / "scripts" / "device_check.sh"), "--gpu"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "unknown flag --gpu" in r.stderr
