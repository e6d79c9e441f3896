"""The SLO is one type, parsed from NAME:MS text in one place (`parse_slo`) and read back
from run files in every form they were ever written in; an engine's name is one typed value
parsed in one place (`parse_engine`)."""

import pytest

from advisor.errors import UsageError
from advisor.flag_groups import parse_engine
from advisor.rundata.evidence import Evidence
from advisor.rundata.files import RunDataError
from advisor.rundata.manifest import Manifest, RunConfig
from advisor.rundata.slo import DEFAULT_SLO, Objective, Slo, parse_slo
from advisor.rundata.typed_json import to_json

pytestmark = pytest.mark.unit


def test_items_are_parsed_once_into_objectives_in_the_order_given():
    slo = parse_slo(["ttft:2000", "itl:50,tpot:30"], "--slo")
    assert slo.objectives == (Objective("ttft", 2000.0), Objective("itl", 50.0),
                              Objective("tpot", 30.0))
    assert (slo.ttft_ms, slo.gap_ms, slo.get("e2el")) == (2000.0, 50.0, None)
    assert slo.text == "ttft:2000 itl:50 tpot:30"
    assert "each request's own p99 gap" in slo.stated and "each request's TPOT" in slo.stated
    assert slo.with_limit("itl", 80).gap_ms == 80 and slo.gap_ms == 50  # a new value


@pytest.mark.parametrize("bad,needle", [
    ("ttft", "expected NAME:MS"), ("speed:3", "expected NAME:MS"), ("ttft:abc", "not a number"),
    ("ttft:-1", "> 0"), ("ttft:nan", "> 0"), ("ttft:inf", "> 0"), ("ttft:0", "> 0")])
def test_a_bad_item_is_named_with_its_flag(bad, needle):
    with pytest.raises(UsageError, match=f"--slo item {bad!r}.*{needle}"):
        parse_slo([bad], "--slo")


def test_a_metric_given_twice_is_refused():
    with pytest.raises(UsageError, match="--slo: itl given twice"):
        parse_slo(["itl:50", "ttft:100", "itl:60"], "--slo")


@pytest.mark.parametrize("written", [
    {"objectives": [{"metric": "ttft", "ms": 2000, "judged": "per_request"},
                    {"metric": "itl", "ms": 50, "judged": "per_request"}]},
    ["ttft:2000", "itl:50"],  # manifests before format 5
    {"ttft": 2000, "itl": 50},  # result.json's goodput_slos before format 5
])
def test_every_form_a_run_file_held_reads_as_the_same_slo(written):
    # each judged ITL per request: the default until p99_itl (pooled) became it
    assert Slo.from_run_file(written, "f: slo") == Slo.of(ttft=2000, itl=50) != DEFAULT_SLO


@pytest.mark.parametrize("written", [
    {"objectives": []}, {"objectives": [{"metric": "speed", "ms": 1}]},
    {"objectives": [{"metric": "itl", "ms": -1}]}, {"objectives": [{"metric": "itl", "ms": True}]},
    {"objectives": [{"metric": "itl", "ms": 5, "judged": "pooled?"}]}, "ttft:2000", 7,
    ["ttft:2000", "ttft:100"]])
def test_a_malformed_slo_in_a_file_is_a_run_data_error_naming_where(written):
    with pytest.raises(RunDataError, match="f: slo"):
        Slo.from_run_file(written, "f: slo")


def test_evidence_of_the_older_form_reads_with_its_attainment_beside_the_slo():
    old = {"slo": {"ttft_ms": 1500, "itl_ms": 40, "attainment": 0.95, "tpot_ms": None},
           "collocated": {}, "workload": {"mean_prompt_tokens": 100, "concurrency": 1}}
    ev = Evidence.from_json(old)
    assert ev.slo == Slo.of(1500, 40) and ev.attainment == 0.95
    again = Evidence.from_json(ev.to_json())
    assert again == ev and again.to_json()["slo"] == to_json(Slo.of(1500, 40))


def test_the_manifest_config_is_typed_and_keeps_every_other_option():
    m = Manifest.new(0, {"model": "tiny", "slo": DEFAULT_SLO, "rates": (1.0, 2.0),
                         "api_key": "sk-secret", "collocated_url": None})
    assert m.config == RunConfig(model="tiny", slo=DEFAULT_SLO,
                                 more={"rates": [1.0, 2.0], "api_key": "<redacted>"})
    assert not m.by_url and m.model == "tiny"
    back = Manifest.from_json(m.to_json(), "manifest.json")
    assert back.config == m.config
    old = {**m.to_json(), "config": {"model": "tiny", "slo": [], "scale": None}}
    assert Manifest.from_json(old, "old").config == RunConfig(model="tiny")  # default SLO
    with pytest.raises(RunDataError, match=r"config\.model"):
        Manifest.from_json({**m.to_json(), "config": {"model": 3}}, "bad")


def test_an_engine_is_one_of_two_names():
    assert [parse_engine(t) for t in ("bundled", "vllm")] == ["bundled", "vllm"]
    with pytest.raises(UsageError, match="--engine must be bundled or vllm, not 'none'"):
        parse_engine("none")
