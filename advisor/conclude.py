"""The last step of every way to advice (a measured sweep, a plan, an import): the evidence
written, the decision table applied, the deploy commands attached, summary.csv written."""

from __future__ import annotations

import dataclasses
from typing import Any

from advisor.decide.table import recommend
from advisor.decide.thresholds import Thresholds
from advisor.deploy.advice import Where, from_evidence
from advisor.deploy.origin import origin
from advisor.engines.placement import Placement
from advisor.goodput.from_runs import write_summary
from advisor.goodput.outcomes import Outcome
from advisor.goodput.robustness import rejudge
from advisor.rundata.evidence import Evidence
from advisor.rundata.recommendation import Recommendation, Rejudged
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
    robust = _robustness(run_dir, evidence, rec, done)
    rec = dataclasses.replace(rec, deploy=deploy, robustness=robust,
                              reasons=[*rec.reasons, *_said(robust), *more_reasons],
                              measured_on=came.text if came else None, **extra)
    run_dir.write_recommendation(rec)
    write_summary(run_dir, placements, done)
    return rec


def _robustness(run_dir: RunDir, ev: Evidence, rec: Recommendation,
                done: dict[str, list[Outcome]]) -> list[Rejudged] | None:
    """The measured comparison under each SLO definition the field uses (None where
    the verdict compared no two placements' goodputs)."""
    dis = ev.bidirectional if rec.action == "disaggregate-bidirectional" else ev.disaggregated
    col = ev.collocated.placement
    if rec.comparison is None or dis is None or col is None or dis.placement is None \
            or not done.get(col) or not done.get(dis.placement):
        return None
    rates = {p: [o.rate for o in done[p]] for p in (col, dis.placement)}
    return rejudge(run_dir, ev.slo, ev.attainment, col, dis.placement, rates,
                   Thresholds().goodput_margin)


def _said(robust: list[Rejudged] | None) -> list[str]:
    """The re-judged comparisons as reasons, the verdict's own definition left out."""
    if not robust:
        return []
    return [f"{r.line} ({'the same' if r.holds else 'not the same'} as by "
            f"{robust[0].slo})" for r in robust[1:]]
