"""evidence.json and recommendation.json keep their shape: the files a sweep and a plan wrote
before the recommendation became a dataclass (tests/fixtures/schema) are read and written
again, and decided again, with every key path and JSON kind as they were. A change here is
a change of the run-directory format (advisor.rundata.rundir.FORMAT)."""

import json
import shutil
from pathlib import Path

import pytest

from advisor.decide.recommend import run_recommend
from advisor.rundata.evidence import Evidence
from advisor.rundata.manifest import Manifest
from advisor.rundata.recommendation import Recommendation
from advisor.rundata.rundir import FORMAT, RunDir

pytestmark = pytest.mark.unit

SCHEMA = Path(__file__).resolve().parents[1] / "fixtures" / "schema"
# what each run-directory format after the fixtures' (2) added to evidence.json, and took
ADDED = {3: {".p2p:null"}, 4: {".imported:null"},
         5: {".attainment:number", ".slo.objectives:list", ".slo.objectives[]:object",
             ".slo.objectives[].metric:string", ".slo.objectives[].ms:number",
             ".slo.objectives[].judged:string"},
         6: {f".{side}.{field}:null" for side in ("collocated", "disaggregated")
             for field in ("output_tps_at_best", "gpus")}}
TAKEN = {5: {".slo.ttft_ms:number", ".slo.itl_ms:number", ".slo.attainment:number",
             ".slo.tpot_ms:null", ".slo.e2el_ms:null"}}


def shape(obj, path: str = "") -> set[str]:
    """Every key path with its JSON kind; a list's items pooled under `[]`."""
    if isinstance(obj, dict):
        return {p for k, v in obj.items() for p in shape(v, f"{path}.{k}")} | {f"{path}:object"}
    if isinstance(obj, list):
        return {p for v in obj for p in shape(v, f"{path}[]")} | {f"{path}:list"}
    kind = {bool: "bool", int: "number", float: "number", str: "string"}.get(type(obj), "null")
    return {f"{path}:{kind}"}


def load(name: str) -> dict:
    return json.loads((SCHEMA / name).read_text())


@pytest.mark.parametrize("name", ["evidence.json", "plan-evidence.json"])
def test_evidence_reads_and_writes_back_in_the_same_shape(name):
    before = load(name)
    assert set(ADDED) == set(range(3, FORMAT + 1))  # a new format says what it added
    added, taken = set().union(*ADDED.values()), set().union(*TAKEN.values())
    assert shape(Evidence.from_json(before, name).to_json()) == (shape(before) - taken) | added


@pytest.mark.parametrize("name", ["recommendation.json", "plan-recommendation.json"])
def test_a_recommendation_reads_and_writes_back_unchanged(name):
    before = load(name)
    assert Recommendation.from_json(before, name).to_json() == before


def test_deciding_the_same_evidence_again_writes_the_same_shape(tmp_path, capsys):
    run = RunDir(tmp_path / "run")
    run.write_manifest(Manifest.new(0, {"model": "small"}))
    shutil.copy(SCHEMA / "evidence.json", run.path / "evidence.json")
    run_recommend(str(run.path))
    capsys.readouterr()
    after = json.loads((run.path / "recommendation.json").read_text())
    assert shape(after) == shape(load("recommendation.json"))
    assert after["action"] == load("recommendation.json")["action"]
