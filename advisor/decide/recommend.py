"""`advisor recommend`: evidence in, a recommendation out (and into the run directory)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from advisor.decide.table import recommend
from advisor.decide.thresholds import Thresholds
from advisor.deploy.advice import from_evidence
from advisor.errors import UsageError
from advisor.output import console
from advisor.rundata import evidence
from advisor.rundata.recommendation import Recommendation
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
        rec = dataclasses.replace(rec, deploy=from_evidence(rec, ev, _model_of(run_dir)))
        run_dir.write_recommendation(rec)
    else:
        rec = recommend(evidence.load(source), thresholds)
    if as_json:
        print(json.dumps(rec.to_json(), indent=2))
    else:
        console.print_recommendation(rec)
    return rec


def _model_of(run_dir: RunDir) -> str | None:
    return run_dir.read_manifest().model
