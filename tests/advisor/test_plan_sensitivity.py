"""Where a plan's verdict would turn: each flip point stated is one the simulation itself
turns at (screened again independently), and the plan's manifest lists what P/D is charged
with the source of each part."""

import dataclasses
import json

import pytest

from advisor.decide.thresholds import Thresholds
from advisor.plan import candidates as cands
from advisor.plan.options import PlanOptions
from advisor.plan.plan import _setup, run_plan
from advisor.plan.screen import scale_at, screened
from advisor.plan.sensitivity import INPUTS, flips
from advisor.rundata.rundir import RunDir

TIE = Thresholds().goodput_margin
pytestmark = pytest.mark.slow  # plans and screens, ~20 s

# the guide's L40S case with P2P: disaggregate
GUIDE = {"model": "qwen2.5-7b", "gpu": "l40s", "gpus": 2, "link": "pcie4",
         "workload": "long-prompt", "rates": (0.2, 0.4, 0.6, 1.0, 2.0), "num_prompts": 300,
         "p2p": "yes", "report": False}


def _verdict(col, dis, o, s) -> str:
    best = [screened(x, s.spec, list(o.rates), o.slo, o.attainment, o.seed)[0]
            for x in (col, dis)]
    if best == [0.0, 0.0]:  # neither meets it: the nearer at the lowest rate
        best = [1 / scale_at(x, s.spec, o.rates[0], o.slo, o.attainment, o.seed)
                for x in (col, dis)]
    if best[1] > best[0] * (1 + TIE) and best[1] > 0:
        return "disaggregate"
    if best[0] > best[1] * (1 + TIE) and best[0] > 0:
        return "stay-collocated"
    return "within noise"


def test_each_flip_point_is_where_the_simulation_turns():
    o = PlanOptions(**GUIDE)
    s = _setup(o)
    col, dis = (cands.system(c, s.shape, s.gpu, s.link_for(c)[0], s.weights, kv_dtype=s.kv)
                for c in s.candidates if c.name in ("collocated-2", "disagg-1p1d"))
    found = flips(col, dis, s.spec, list(o.rates), o.slo, o.attainment, o.seed)
    assert {f.input for f in found} == {name for name, _, _ in INPUTS}
    planned = _verdict(col, dis, o, s)
    assert planned == "disaggregate"
    scale = {name: how for name, _, how in INPUTS}
    for f in found:
        if f.factor is None:
            assert "disaggregated ahead with" in f.said
            continue
        turned = _verdict(scale[f.input](col, f.factor), scale[f.input](dis, f.factor), o, s)
        assert turned == f.becomes != planned
        assert f"{f.factor:.2g}x" in f.said


def test_a_plan_lists_what_pd_is_charged_and_where_its_verdict_turns(tmp_path):
    rec = run_plan(dataclasses.replace(PlanOptions(**GUIDE), out=str(tmp_path))).to_json()
    (run_dir,) = tmp_path.iterdir()
    plan = json.loads((run_dir / "manifest.json").read_text())["plan"]
    parts = {c["part"]: c for c in plan["pd_costs"]}
    assert set(parts) == {"proxy hops", "prefill tier", "KV pull", "KV transfer",
                          "decoder KV capacity"}
    assert all(c["source"] for c in parts.values())
    assert "NixlConnector" in parts["KV pull"]["source"]
    assert "pcie4" in parts["KV transfer"]["value"]
    said = [r for r in rec["reasons"] if r.startswith("simulated sensitivity: ")]
    assert len(said) == len(plan["sensitivity"]) == 2
    assert RunDir.existing(run_dir).read_manifest().plan.sensitivity[0].said in said[0]
