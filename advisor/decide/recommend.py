"""`advisor recommend`: evidence in, a recommendation out (and into the run directory)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from advisor.decide import deploy
from advisor.decide.table import Thresholds, recommend
from advisor.errors import UsageError
from advisor.output import console
from advisor.rundata import evidence
from advisor.rundata.recommendation import Deployment, Recommendation
from advisor.rundata.rundir import RunDir


def thresholds_from(overrides: list[str]) -> Thresholds:
    """["kv_slow_ms=100", ...] -> Thresholds with those fields replaced (UsageError names
    the bad one)."""
    names = {f.name: f.type for f in dataclasses.fields(Thresholds)}
    changes: dict[str, Any] = {}
    for item in overrides:
        name, sep, value = item.partition("=")
        if not sep or name not in names:
            raise UsageError(
                f"--threshold {item!r}: expected NAME=VALUE with NAME one of {', '.join(names)}"
            )
        try:
            changes[name] = int(value) if names[name] in (int, "int") else float(value)
        except ValueError:
            raise UsageError(f"--threshold {item!r}: {value!r} is not a number") from None
    return dataclasses.replace(Thresholds(), **changes)


def run_recommend(source: str, as_json: bool = False, overrides: Sequence[str] = ()
                  ) -> Recommendation:
    """Decide from a run directory (its evidence.json; writes recommendation.json there)
    or from an evidence file; print it as text or JSON."""
    thresholds = thresholds_from(list(overrides))
    if Path(source).is_dir():
        run_dir = RunDir.existing(source)
        ev = run_dir.read_evidence()
        rec = recommend(ev, thresholds)
        rec = dataclasses.replace(rec, deploy=deploy.from_evidence(rec, ev, _model_of(run_dir)))
        run_dir.write_recommendation(rec)
    else:
        rec = recommend(evidence.load(source), thresholds)
    if as_json:
        print(json.dumps(rec.to_json(), indent=2))
    else:
        console.print_recommendation(rec)
    return rec


def _model_of(run_dir: RunDir) -> str | None:
    return (run_dir.read_manifest().get("config") or {}).get("model")


def run_deploy(source: str, gpus: str | None = None, fmt: str = "sh",
               model: str | None = None, ucx_devices: str | None = None) -> Deployment:
    """Print the vLLM commands for a finished sweep's placements (the recommended one
    marked) as a shell script or JSON; UsageError naming the bad flag."""
    if fmt not in ("sh", "json"):
        raise UsageError(f"--format must be sh or json, not {fmt!r}")
    try:
        ids = [int(g) for g in gpus.split(",")] if gpus else None
    except ValueError:
        raise UsageError(f"--gpus {gpus!r}: expected GPU indices such as 0,1") from None
    run_dir = RunDir.existing(source)
    ev = run_dir.read_evidence()
    rec = run_dir.read_recommendation()
    # a plan's placements may need tensor parallelism (its manifest says how much)
    planned = (run_dir.read_manifest().get("plan") or {}).get("candidates") or [{}]
    try:
        out = deploy.from_evidence(rec, ev, model or _model_of(run_dir), ids,
                                   ucx_devices.split(",") if ucx_devices else None,
                                   planned[0].get("tp", 1))
    except ValueError as e:
        raise UsageError(f"--gpus: {e}") from None
    print(json.dumps(out.to_json(), indent=2) if fmt == "json" else deploy.as_shell(out), end="")
    return out
