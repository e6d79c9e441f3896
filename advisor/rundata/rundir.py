"""A sweep's run directory: the only code that knows its layout.

    RUN_DIR/manifest.json            versions, host, probe, options, command line, seed, format
    RUN_DIR/runs/<placement>/rate-<r>/result.json, requests.jsonl   (RunResult)
    RUN_DIR/summary.csv              one row per placement x rate
    RUN_DIR/evidence.json            what the decision rests on (Evidence)
    RUN_DIR/recommendation.json      the decision
    RUN_DIR/report.html, report.md, report-*.png

Every file is written atomically and validated where it is read; a damaged file is a
RunDataError naming it and the field.
"""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path
from typing import Any

from advisor.rundata.evidence import Evidence
from advisor.rundata.files import RunDataError, read_json_object, write_atomic, write_json
from advisor.rundata.manifest import Manifest
from advisor.rundata.recommendation import Recommendation
from advisor.rundata.result import RESULT, RunResult

# 1: before the manifest said its format (the same files); 2: the manifest says "format";
# 3: evidence.json carries `p2p` (the GPUs' P2P matrix and the pairs a placement uses);
# 4: evidence.json carries `imported` (runs another tool measured: `advisor import`);
# 5: the SLO is a list of objectives (metric, ms, what it is judged on), the attainment
# beside it in evidence.json; result.json's goodput_slos and the manifest's alike.
# 6: an objective may be judged "pooled" (p99_itl); each placement's evidence carries its
# output tokens/s at its max goodput and its GPUs (a plan's); recommendation.json its
# `robustness` (the comparison under each SLO definition).
FORMAT = 6
MANIFEST, EVIDENCE, RECOMMENDATION, SUMMARY = ("manifest.json", "evidence.json",
                                               "recommendation.json", "summary.csv")


class RunDir:
    """One run directory on disk."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @classmethod
    def create(cls, parent: str | Path, label: str) -> RunDir:
        """A new directory `<parent>/<timestamp>-<label>` (made when first written)."""
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        return cls(Path(parent) / f"{stamp}-{label}")

    @classmethod
    def existing(cls, path: str | Path) -> RunDir:
        """An existing run directory whose format this code reads; RunDataError otherwise."""
        run = cls(path)
        if not run.path.is_dir():
            raise RunDataError(f"{run.path} is not a directory")
        manifest = run.path / MANIFEST
        try:
            version = read_json_object(manifest).get("format", 1)
        except RunDataError:
            version = 1  # a missing or damaged manifest is its readers' to name
        if not isinstance(version, int) or not 1 <= version <= FORMAT:
            raise RunDataError(f"{manifest}: run-directory format {version!r} is not one this "
                               f"advisor reads (1 to {FORMAT}); use a newer advisor")
        return run

    def __str__(self) -> str:
        return str(self.path)

    @property
    def name(self) -> str:
        return self.path.name

    # ---- manifest, evidence, decision, summary -------------------------------------------------
    def write_manifest(self, manifest: Manifest) -> Manifest:
        """Write a new run's manifest, in this code's format; that manifest."""
        manifest = dataclasses.replace(manifest, format=FORMAT)
        write_json(self.path / MANIFEST, manifest.to_json())
        return manifest

    def read_manifest(self) -> Manifest:
        path = self.path / MANIFEST
        return Manifest.from_json(read_json_object(path), str(path))

    def update_manifest(self, **learnt: Any) -> Manifest:
        """Add what is learnt after the start (calibration, sizing) to the manifest; the
        manifest as now written."""
        manifest = dataclasses.replace(self.read_manifest(), **learnt)
        write_json(self.path / MANIFEST, manifest.to_json())
        return manifest

    def write_evidence(self, evidence: Evidence) -> None:
        write_json(self.path / EVIDENCE, evidence.to_json())

    def read_evidence(self) -> Evidence:
        path = self.path / EVIDENCE
        return Evidence.from_json(read_json_object(path), str(path))

    def write_recommendation(self, rec: Recommendation) -> None:
        write_json(self.path / RECOMMENDATION, rec.to_json())

    def read_recommendation(self) -> Recommendation:
        path = self.path / RECOMMENDATION
        return Recommendation.from_json(read_json_object(path), str(path))

    def write_summary(self, csv_text: str) -> None:
        write_atomic(self.path / SUMMARY, csv_text)

    def file(self, name: str) -> Path:
        """Where a report file (report.html, report-itl.png, ...) goes."""
        return self.path / name

    # ---- runs ------------------------------------------------------------------------------------
    def run_path(self, placement: str, rate: float) -> Path:
        return self.path / "runs" / placement / f"rate-{rate:g}"

    def has_run(self, placement: str, rate: float) -> bool:
        """Whether this placement x rate finished (a resumed sweep re-runs what did not)."""
        return (self.run_path(placement, rate) / RESULT).is_file()

    def write_run(self, result: RunResult) -> None:
        """Store a placement's run at its rate (both named in it)."""
        if result.placement is None or result.rate is None:
            raise ValueError("a run to store names its placement and its rate")
        result.write(self.run_path(result.placement, result.rate))

    def read_run(self, placement: str, rate: float, records: bool = False) -> RunResult:
        return RunResult.read(self.run_path(placement, rate), records)

    def read_runs(self, problems: list[str]) -> list[RunResult]:
        """Every readable run with its records; what is damaged goes into `problems`."""
        runs = []
        for path in sorted((self.path / "runs").glob(f"*/rate-*/{RESULT}")):
            try:
                run = RunResult.read(path.parent, records=True, problems=problems)
            except RunDataError as e:
                problems.append(str(e).replace(str(self.path) + "/", ""))
                continue
            missing = [k for k in ("request_rate", "topology") if run.get(k) is None]
            if missing:
                problems.append(
                    f"{path.parent.name} of {path.parent.parent.name}: "
                    f"result.json lacks {missing[0]}"
                )
                continue
            runs.append(run)
        return runs
