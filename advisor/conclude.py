"""The last step of every way to advice (a measured sweep, a plan, an import): the evidence
written, the decision table applied, the deploy commands attached, summary.csv written."""

from __future__ import annotations

import dataclasses
from typing import Any

from advisor.decide.table import recommend
from advisor.deploy.advice import Where, from_evidence
from advisor.deploy.origin import origin
from advisor.engines.placement import Placement
from advisor.goodput.from_runs import write_summary
from advisor.goodput.outcomes import Outcome
from advisor.rundata.evidence import Evidence
from advisor.rundata.recommendation import Recommendation
from advisor.rundata.rundir import MANIFEST, RunDir


def conclude(run_dir: RunDir, evidence: Evidence, placements: list[Placement],
             done: dict[str, list[Outcome]],
             model: str | None, where: Where | None = None, more_reasons: tuple[str, ...] = (),
             **extra: Any) -> Recommendation:
    """Write `evidence`, decide on it, attach the deploy commands for `model` (and
    `more_reasons` after the table's, and `extra` fields of the Recommendation), write the
    recommendation and summary.csv (one row per run of `placements`); the recommendation."""
    run_dir.write_evidence(evidence)
    rec = recommend(evidence)
    came = origin(run_dir.read_manifest()) if (run_dir.path / MANIFEST).exists() else None
    deploy = from_evidence(rec, evidence, model, where or Where(), came, str(run_dir.path))
    rec = dataclasses.replace(rec, deploy=deploy, reasons=[*rec.reasons, *more_reasons],
                              measured_on=came.text if came else None, **extra)
    run_dir.write_recommendation(rec)
    write_summary(run_dir, placements, done)
    return rec
