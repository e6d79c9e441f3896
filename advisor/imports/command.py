"""`advisor import`: runs other tools measured (vLLM's bench, aiperf, guidellm), one
placement and rate per run, into a run directory, decided exactly as a sweep's own runs:
the same statistics, goodput intervals, evidence and decision table.

Every run, the evidence and the recommendation say which tool measured them; what the
files do not say (KV transfer times, the front end's CPU, ...) is named as unknown.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from advisor.conclude import conclude
from advisor.engines.placement import Placement
from advisor.errors import UsageError
from advisor.goodput.outcomes import Outcome, outcome_of
from advisor.imports.discover import runs_at
from advisor.imports.options import ImportOptions, parse_placement
from advisor.imports.tool_runs import NEVER_KEPT, Found
from advisor.measure.stats import parse_percentiles, summarize
from advisor.measure.workload_run import record_row
from advisor.output import console
from advisor.rundata.evidence import ImportedEvidence
from advisor.rundata.manifest import ImportedTools, Manifest
from advisor.rundata.model_name import checked_model
from advisor.rundata.recommendation import Recommendation
from advisor.rundata.result import RunResult
from advisor.rundata.rundir import RunDir

PERCENTILES = parse_percentiles("50,90,99")


@dataclasses.dataclass(frozen=True)
class Imported:
    """What `advisor import` wrote and what it recommends; the runs it left out, and why."""

    run_dir: RunDir
    recommendation: Recommendation
    skipped: list[str]

    def to_json(self) -> dict[str, Any]:
        return {**self.recommendation.to_json(), "run_dir": str(self.run_dir),
                "skipped": self.skipped}


def run_import(opts: ImportOptions, argv: list[str] | None = None) -> Imported:
    """Read every --placement's runs, write them as a sweep's, decide; UsageError naming
    the flag or the file at fault."""
    opts.validate()
    given = [parse_placement(p) for p in opts.placement]
    names = [g.name for g in given]
    if len(set(names)) != len(names) or len({g.kind for g in given}) != len(given):
        raise UsageError("--placement: give at most one collocated and one disagg placement")
    runs, skipped = {}, []
    for g in given:
        runs[g.name], left = runs_at(g.path, g.rate)
        skipped += left
        rates = [f.rate for f in runs[g.name]]
        if len(set(rates)) != len(rates):
            raise UsageError(f"--placement {g.name}: two runs at one rate ({g.path})")
    found = [f for fs in runs.values() for f in fs]
    placements = sorted((Placement(g.name, g.kind) for g in given),
                        key=lambda p: p.kind != "collocated")
    run_dir = RunDir.create(opts.out, "import")
    tools = sorted({f.tool for f in found})
    unknown = [*NEVER_KEPT, *dict.fromkeys(u for f in found for u in f.unknown)]
    model = opts.model or _model(found)
    config = {k: v for k, v in dataclasses.asdict(opts).items() if k != "as_json"}
    run_dir.write_manifest(Manifest.new(0, {**config, "model": model, "workload": "imported"},
                                        argv, imported=ImportedTools(tools, unknown, skipped)))
    done: dict[str, list[Outcome]] = {p.name: [] for p in placements}
    for p in placements:
        for f in runs[p.name]:
            result = _result(f, p, opts)
            run_dir.write_run(result)
            assert f.rate is not None  # discover refuses a run without one
            done[p.name].append(outcome_of(result, f.rate, opts.attainment, opts.slo))
    # imported here: pandas takes ~0.5 s, and a bad flag must answer before that
    from advisor.goodput.from_runs import build_evidence

    grid = sorted({f.rate for f in found if f.rate is not None})
    ev = build_evidence(opts, placements, done, grid, run_dir, None, None)
    ev = dataclasses.replace(ev, imported=ImportedEvidence(
        tools=tools, sources=sorted({f.source for f in found}), unknown=unknown))
    said = f"measured by {', '.join(tools)}; unknown: " + "; ".join(unknown)
    rec = conclude(run_dir, ev, placements, done, model, imported=said)
    if opts.report:
        from advisor.output.report import run_report  # matplotlib: ~1 s to import

        run_report(str(run_dir))
    imported = Imported(run_dir, rec, skipped)
    if opts.as_json:
        print(json.dumps(imported.to_json(), indent=2, default=str))
    else:
        for line in skipped:
            print(f"left out: {line}")
        console.print_recommendation(rec)
        print(f"run directory: {run_dir}: {'report.html, report.md, ' if opts.report else ''}"
              "evidence.json, recommendation.json")
    return imported


def _result(f: Found, p: Placement, opts: ImportOptions) -> RunResult:
    """One imported run as a sweep's RunResult (times from its first request's schedule)."""
    start = f.start
    rows = [record_row(r, start) for r in f.records]
    firsts = sorted(r.scheduled for r in f.records if r.turn == 0)
    return RunResult.of(
        summarize(f.records, f.duration, opts.slo, PERCENTILES), rows, topology=p.name,
        kind=p.kind, request_rate=f.rate, num_prompts=len(f.records), workload="imported",
        workload_params={"tool": f.tool, "max_concurrency": f.max_concurrency},
        multi_turn=any(r.turn > 0 for r in f.records),
        arrival_offsets=[t - start for t in firsts], imported=f"{f.tool}: {f.source}")


def _model(found: list[Found]) -> str | None:
    """The model the runs name, where they agree on one; RunDataError naming the file whose
    model is no model name."""
    models = {checked_model(f.model, f"{f.source}: its model") for f in found if f.model}
    return models.pop() if len(models) == 1 else None
