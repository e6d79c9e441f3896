"""`advisor plan`: placements on GPUs we lack, the guide's L40S case predicted (transfer,
tails, the advice with and without P2P), bad input, labels, and `--calibrate` re-predicting
a sweep whose timing is known."""

import json
import re
from pathlib import Path

import pytest

from advisor.engines.placement import Placement
from advisor.errors import UsageError
from advisor.plan import candidates, hardware, sim_runs
from advisor.plan.calibrated import run_calibrated
from advisor.plan.loadfit import PROXY_MS, scaled
from advisor.plan.options import PlanOptions
from advisor.plan.plan import _setup, label, run_plan
from advisor.plan.steptime import FittedStep, Step, prefill_step
from advisor.plan.system import EngineSpec, System
from advisor.probe.links import LINKS, Link
from advisor.probe.shapes import shape_of
from advisor.rundata.evidence import (
    Calibration,
    Evidence,
    KVTransferEvidence,
    PlacementEvidence,
    WorkloadEvidence,
)
from advisor.rundata.manifest import DtypeRan, Manifest
from advisor.rundata.rundir import RunDir
from advisor.rundata.slo import Slo
from tests.cli import advisor, advisor_here
from tests.reports import browser
from workloads.presets import preset_spec

FIX = Path(__file__).parent / "fixtures"
GUIDE = {"model": "qwen2.5-7b", "gpu": "l40s", "gpus": 2, "link": "pcie4",
         "workload": "long-prompt", "rates": (0.2, 0.4, 0.6, 1.0, 2.0), "num_prompts": 300}


# placements on N GPUs for a model that fits one: collocated at TP 1, 2, 4, ...; P/D at
# every (prefill TP, decode TP) pair with X*A + Y*B = N, X and Y >= 1
EXPECTED = {2: (2, 1), 4: (3, 6), 8: (4, 21)}


@pytest.mark.parametrize("gpus", sorted(EXPECTED))
def test_placements_are_every_split_at_every_tp_per_role_once(gpus):
    h100 = hardware.gpu("h100-sxm")
    found = candidates.candidates(shape_of("llama-3.1-8b"), h100, gpus)
    kinds = [c.kind for c in found]
    assert (kinds.count("collocated"), kinds.count("disagg")) == EXPECTED[gpus]
    assert len({c.name for c in found}) == len(found)  # each once
    assert len({(c.kind, c.tp, c.dtp, c.replicas, c.prefill, c.decode) for c in found}) \
        == len(found)
    assert all(c.gpus == gpus for c in found)
    assert found[0].name == f"collocated-{gpus}" and f"disagg-1p{gpus - 1}d" in \
        [c.name for c in found]


def test_per_role_tp_builds_each_tier_at_its_own_size_and_smallest_tp_is_the_floor():
    h100 = hardware.gpu("h100-sxm")
    found = {c.name: c for c in candidates.candidates(shape_of("llama-3.1-8b"), h100, 8)}
    mixed = found["disagg-1p2d-tp4-2"]
    assert (mixed.tp, mixed.dtp, mixed.gpus, mixed.tp_text) == (4, 2, 8, "TP 4 P, 2 D")
    system = candidates.system(mixed, shape_of("llama-3.1-8b"), h100, LINKS["nvlink"])
    assert [e.step.tp for e in system.prefill] == [4]
    assert [e.step.tp for e in system.decode] == [2, 2]
    assert system.decode[0].kv_tokens < system.prefill[0].kv_tokens  # half the memory
    big = candidates.candidates(shape_of("llama-3.1-70b"), h100, 4)  # 141 GB of weights
    assert {c.tp for c in big} == {4} and [c.name for c in big] == ["collocated-1"]
    with pytest.raises(ValueError, match=r"GB missing"):
        candidates.candidates(shape_of("llama-3.1-70b"), hardware.gpu("l40s"), 2)


def test_links_name_their_source_and_no_p2p_stages_through_the_host():
    g = hardware.gpu("l40s")
    assert hardware.link("pcie4", True, g).gbps == 25
    staged = hardware.link("pcie4", False, g)
    assert staged.name == "host-staged" and "1.3 s" in staged.source
    assert staged.seconds(470e6) == pytest.approx(1.35, abs=0.1)
    assert hardware.link("25GBps", True, g).gbps == 25
    assert hardware.link(None, True, hardware.gpu("h100-sxm")).name == "nvlink"
    with pytest.raises(ValueError, match="--link 'pcie9'"):
        hardware.link("pcie9", True, g)


def test_p2p_auto_reads_the_matrix_and_places_each_pd_on_a_pair_with_p2p():
    none = _setup(PlanOptions(**GUIDE, p2p_matrix=str(FIX / "p2p_2gpu_ansi.txt")))
    (pd,) = [c for c in none.candidates if c.kind == "disagg"]
    link, placed = none.link_for(pd)
    assert link.name == "host-staged" and placed.pairs[0].status == "CNS"
    assert "P2P from " in label(none) and "host-staged" in label(none)
    # two GPUs planned on a host of four whose GPU0-GPU1 lack P2P: 1P1D on 0 and 2
    pairs = _setup(PlanOptions(**GUIDE, p2p_matrix=str(FIX / "p2p_4gpu_pairs.txt")))
    (pd,) = [c for c in pairs.candidates if c.kind == "disagg"]
    link, placed = pairs.link_for(pd)
    assert link.name == "pcie4" and placed.gpus == [0, 2]
    # eight on two switches: every split of TP-1 instances has P->D pairs across them;
    # TP-2 instances can be placed with each rank's pair on one switch
    wide = _setup(PlanOptions(**{**GUIDE, "gpus": 8},
                              p2p_matrix=str(FIX / "p2p_and_topo_8gpu.txt")))
    assert {wide.link_for(c)[0].name for c in wide.candidates
            if c.kind == "disagg" and c.tp == c.dtp == 1} == {"host-staged"}
    assert wide.link_for(next(c for c in wide.candidates
                              if c.name == "disagg-2p2d-tp2-2"))[0].name == "pcie4"
    assumed = _setup(PlanOptions(**GUIDE))  # no matrix here, no nvidia-smi
    assert assumed.matrix is None and "P2P assumed" in label(assumed)


@pytest.fixture(scope="module")
def guide_no_p2p(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan")
    return run_plan(PlanOptions(**GUIDE, p2p="no", out=str(out))).to_json(), out


def _series(out, name: str) -> dict:
    (run_dir,) = out.iterdir()
    return {json.loads(p.read_text())["request_rate"]: json.loads(p.read_text())
            for p in (run_dir / "runs" / name).glob("rate-*/result.json")}


@pytest.mark.slow  # a plan with its report, ~10 s
def test_the_guides_l40s_case_without_p2p_is_fix_the_transfer(guide_no_p2p):
    rec, out = guide_no_p2p
    assert rec["action"] == "fix-transfer" and rec["simulated"]
    col, pd = _series(out, "collocated-2"), _series(out, "disagg-1p1d")
    # collocated p99 ITL jumps from about its median to several times it by 0.6 req/s
    assert col[0.2]["p99_itl_ms"] < 1.5 * col[0.2]["p50_itl_ms"]
    assert col[0.6]["p99_itl_ms"] > 4 * col[0.6]["p50_itl_ms"]
    # P/D's tail stays under 2.5x its median up to 2 req/s
    assert all(r["p99_itl_ms"] < 2.5 * r["p50_itl_ms"] for r in pd.values())
    # ~470 MB over the host-staged path: 1-2 s; P/D median TTFT 1.5-3 s at low rates
    (run_dir,) = out.iterdir()
    ev = json.loads((run_dir / "evidence.json").read_text())
    assert 1000 <= ev["kv_transfer"]["mean_ms"] <= 2000
    assert 1500 <= pd[0.2]["median_ttft_ms"] <= 3000
    assert ev["simulated"] and all(r["simulated"] for r in pd.values())


@pytest.mark.slow  # a plan with its report, ~10 s
def test_with_p2p_the_same_case_is_disaggregate(tmp_path):
    rec = run_plan(PlanOptions(**GUIDE, p2p="yes", out=str(tmp_path))).to_json()
    assert rec["action"] == "disaggregate"
    assert rec["ranking"][0]["placement"] == "disagg-1p1d"
    assert rec["reasons"][0].startswith("simulated by ttft:")
    assert ": disaggregated sustains" in rec["reasons"][0]
    assert "--kv-transfer-config" in json.dumps(rec["deploy"])
    # judged again from the same simulated runs under the field's other definitions
    assert [r["slo"] for r in rec["robustness"]] == ["ttft:2000 p99_itl:50", "ttft:2000 itl:50",
                                                     "ttft:2000 tpot:50"]
    assert sum(r.startswith("under ttft:2000 tpot:50 ms") for r in rec["reasons"]) == 1


def test_a_capped_plan_never_has_more_in_flight_than_its_cap(tmp_path):
    o = PlanOptions(**{**GUIDE, "rates": (50.0,), "num_prompts": 40}, max_concurrency=4,
                    placements=("collocated-2", "disagg-1p1d"), report=False,
                    out=str(tmp_path))
    run_plan(o)
    for name in ("collocated-2", "disagg-1p1d"):
        (r,) = _series(tmp_path, name).values()
        assert r["workload_params"]["max_concurrency"] == 4
        (run_dir,) = tmp_path.iterdir()
        rows = [json.loads(line) for line in
                (run_dir / "runs" / name / "rate-50" / "requests.jsonl").read_text().splitlines()]
        sends = [row["sent"] for row in rows]
        assert max(sum(row["sent"] <= t < row["end"] for row in rows) for t in sends) == 4


@pytest.mark.slow  # a plan with its report, ~8 s
def test_a_matrix_without_p2p_plans_as_no_p2p_and_the_advice_names_the_pair(tmp_path):
    o = PlanOptions(**GUIDE, p2p_matrix=str(FIX / "p2p_2gpu_ansi.txt"), out=str(tmp_path))
    rec = run_plan(o).to_json()
    assert rec["action"] == "fix-transfer"
    said = " ".join(rec["reasons"])
    assert "GPU0->GPU1 (CNS: chipset not supported) lack P2P" in said
    assert "it explains the slow transfer" in said and "GPU pairs with P2P: none" in said
    (run_dir,) = tmp_path.iterdir()
    p2p = json.loads((run_dir / "evidence.json").read_text())["p2p"]
    assert p2p["used"] == [{"prefill_gpu": 0, "decode_gpu": 1, "status": "CNS"}]
    assert 450 < p2p["kv_mb"] < 480 and p2p["source"].endswith("p2p_2gpu_ansi.txt")
    md = (run_dir / "report.md").read_text()  # the report shows the matrix and the pair
    assert "### P2P read matrix" in md and "| GPU0 | X | CNS |" in md
    assert "P->D pairs used: GPU0->GPU1 CNS (no GPU pair here has P2P" in md
    assert "GPU0-&gt;GPU1 CNS" in (run_dir / "report.html").read_text()


@pytest.mark.slow  # the L40S plan above
def test_every_report_and_file_says_simulated(guide_no_p2p):
    _, out = guide_no_p2p
    (run_dir,) = out.iterdir()
    md = (run_dir / "report.md").read_text()
    assert "SIMULATED" in md and "host-staged" in md
    assert "SIMULATED" in (run_dir / "report.html").read_text()
    assert json.loads((run_dir / "manifest.json").read_text())["simulated"]
    # collocated-2, collocated-1-tp2 and disagg-1p1d, at each rate
    assert (run_dir / "summary.csv").read_text().count("\n") == 1 + 3 * len(GUIDE["rates"])


@pytest.mark.slow  # the L40S plan above, and a headless Chromium (~6 s)
def test_the_pareto_view_is_in_the_json_the_reasons_and_the_report(guide_no_p2p):
    rec, out = guide_no_p2p
    (run_dir,) = out.iterdir()
    pareto = json.loads((run_dir / "recommendation.json").read_text())["pareto"]
    assert pareto == rec["pareto"] and 0 < len(pareto) <= 3 * len(GUIDE["rates"])
    front = [p for p in pareto if p["frontier"]]
    for p in pareto:  # a point off the frontier is beaten on both axes by one on it
        if not p["frontier"]:
            assert any(q["tokens_per_s_per_user"] >= p["tokens_per_s_per_user"]
                       and q["tokens_per_s_per_gpu"] >= p["tokens_per_s_per_gpu"]
                       for q in front)
    assert "report-pareto.png" in (run_dir / "report.md").read_text()
    html = run_dir / "report.html"
    assert "simulated: throughput per GPU against speed per user" in html.read_text()
    if browser.CHROMIUM is None:
        pytest.skip("chromium is not installed (.ci/setup installs it)")
    seen = browser.inspect(html.as_uri(), str(run_dir / "shot.png"))
    assert seen["console_errors"] == [] and seen["exceptions"] == []


BAD = [
    (["--gpu", "v100"], "--gpu 'v100': expected one of l40s"),
    (["--link", "carrier-pigeon"], "--link 'carrier-pigeon'"),
    (["--model", "llama-3.1-70b"], "GB missing"),
    (["--p2p", "maybe"], "--p2p must be auto, yes or no"),
    (["--p2p", "yes", "--p2p-matrix", "topo.txt"], "--p2p yes and --p2p-matrix: give one"),
    (["--gpus", "4", "--p2p-matrix", str(FIX / "p2p_2gpu_ansi.txt")], "2 GPUs, but --gpus 4"),
    (["--workload", "chat-multiturn"], "multi-turn workloads are not simulated"),
    (["--gpus", "0"], "advisor: error: --gpus must be 1 to 72, not 0\n"),  # that flag alone
    (["--slo", "ttft:soon", "itl:50"], "--slo item 'ttft:soon': 'soon' is not a number"),
    (["--topology", "disagg-url=disagg:1p1d"], "--topology names a measured deployment's shape"),
    (["--scale", "0"], "--scale 0: expected a finite number above 0"),
    (["--output-scale", "nan"], "--output-scale nan: expected a finite number above 0"),
]


def test_placements_meeting_no_rate_are_ranked_by_how_near_they_came():
    from types import SimpleNamespace

    from advisor.goodput.outcomes import Outcome
    from advisor.plan.plan import _ranking

    found = candidates.candidates(shape_of("qwen2.5-7b"), hardware.gpu("l40s"), 2)
    places = [Placement(c.name, c.kind) for c in found]
    done = {p.name: [Outcome(0.5, False, False), Outcome(1.0, False, False)] for p in places}
    near = {(p.name, 0.5): share for p, share in zip(places, (0.2, 0.7, 0.4))}
    ranked = _ranking(SimpleNamespace(candidates=found), places, done, near)
    assert [r.placement for r in ranked] == [places[i].name for i in (1, 2, 0)]
    done[places[0].name][1] = Outcome(1.0, True, False)  # a rate met outranks any nearness
    ranked = _ranking(SimpleNamespace(candidates=found), places, done, near)
    assert ranked[0].placement == places[0].name


def test_the_workload_scales_as_a_sweeps_does():
    # the llm-d guide's suggested shape, 10k-token prompts and 1k outputs, from long-prompt's
    s = _setup(PlanOptions(**GUIDE, scale=1.25, output_scale=4))
    base = preset_spec("long-prompt")
    assert s.spec.input.mean == base.input.mean * 1.25 == 10240
    assert s.spec.output.mean == base.output.mean * 4 == 1024


@pytest.mark.integration
@pytest.mark.parametrize("args,needle", BAD)
def test_bad_input_is_one_line_and_exit_2(args, needle, tmp_path):
    cli = advisor if args is BAD[0][0] else advisor_here
    r = cli("plan", "--out", str(tmp_path), *args)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr
    assert not any(tmp_path.iterdir())  # nothing written


def test_an_slo_below_the_unloaded_floor_is_measure_first_with_the_floor(tmp_path):
    slo = Slo.of(100, 50)
    rec = run_plan(PlanOptions(**{**GUIDE, "slo": slo}, out=str(tmp_path))).to_json()
    assert rec["action"] == "measure-first"
    assert "ttft:100 is binding, unloaded TTFT is" in rec["reasons"][0]
    (run_dir,) = tmp_path.iterdir()
    assert not (run_dir / "runs").exists()


# ---- --calibrate: a "measured" sweep made by a known engine is predicted back ---------------
TRUTH = FittedStep(18.0, 0.15, 18.0, 0.6, 2e-5, "truth")
TRUTH_FRONT_MS = 2.0  # the request's way in and out, outside the steps
RATES = (1.0, 3.0, 6.0)


def _measured_sweep(parent, collocated_prefill: float = 1.0, contention: float = 0.0,
                    jitter: float = 0.0, collocated_rates=RATES,
                    by_url: bool = False) -> RunDir:
    """A run directory as the bundled sweep writes it, whose engine is TRUTH exactly (its
    prefill `collocated_prefill` times slower in the collocated runs; each step
    `contention` of itself slower per other engine stepping, and `jitter` its lognormal
    noise); P/D runs at RATES, collocated at `collocated_rates`. `by_url`: as a sweep of
    two deployments given by URL writes it (collocated-url: 2 replicas, disagg-url: 1P1D)."""
    run_dir = RunDir.create(parent, "long-prompt")
    prompts = [64, 256, 1024]
    cal = Calibration(prompts, [TRUTH_FRONT_MS + TRUTH.ms(prefill_step(p)) for p in prompts],
                      [1, 8],
                      [TRUTH.ms(Step(decodes=b, pairs=b * 28, kv_read_tokens=b * 28))
                       for b in (1, 8)], 0.15, 20.0, "bfloat16", "collocated-2")
    urls = {"collocated_url": "http://127.0.0.1:9/v1", "disagg_url": "http://127.0.0.1:10/v1"}
    ran = "auto" if by_url else "bfloat16"  # as a sweep records it: by URL, the deployment's
    run_dir.write_manifest(Manifest.new(0, {"model": "small", "workload": "long-prompt",
                                            "slo": ["ttft:2000", "itl:100"], "seed": 0,
                                            **(urls if by_url else {})},
                                        dtype=DtypeRan("auto", ran, "as the test says"),
                                        calibration=cal))
    shape = shape_of("small")
    engine = EngineSpec(TRUTH, 10**6, jitter=jitter)
    kv = shape.kv_bytes
    link = Link("measured", 0.5, 0.0, 0.0, "test")
    spec = preset_spec("long-prompt", scale=0.06, output_scale=0.1)
    slos = Slo.of(2000, 100)
    mixed = scaled(engine, collocated_prefill, 1.0)
    names = ("collocated-url", "disagg-url") if by_url else ("collocated-2", "disagg-1p1d")
    for p, system in ((Placement(names[0], "collocated"),
                       System((mixed, mixed), front_ms=TRUTH_FRONT_MS, contention=contention)),
                      (Placement(names[1], "disagg"),
                       System((engine,), (engine,), link, kv, TRUTH_FRONT_MS, PROXY_MS,
                              contention=contention))):
        for rate in collocated_rates if p.kind == "collocated" else RATES:
            sim = sim_runs.run(system, sim_runs.requests(spec, rate, 200, int(rate)), p, rate,
                               slos, 0.9, "truth", "long-prompt", {})
            run_dir.write_run(sim.result)
    run_dir.write_evidence(Evidence(
        slo=Slo.of(2000, 100), collocated=PlacementEvidence(), workload=WorkloadEvidence(
            500, 1.0), kv_transfer=KVTransferEvidence(mean_ms=1.0, gbps=0.5, connector="shm")))
    return run_dir


def test_calibrate_predicts_a_sweep_of_known_timing_back(tmp_path):
    measured = _measured_sweep(tmp_path / "measured")
    rec = run_calibrated(str(measured.path), None, str(tmp_path / "plans"), as_json=True,
                         report=False).to_json()
    assert rec["simulated"].startswith("simulated by advisor plan --calibrate")
    assert not list(Path(rec["run_dir"]).glob("report*"))  # report=False: none drawn
    # a simulated run's gaps come from the calibration: no host slowed down in them
    ev = json.loads((Path(rec["run_dir"]) / "evidence.json").read_text())
    assert ev["collocated"]["slowdown"] is None and ev["disaggregated"]["slowdown"] is None
    assert len(rec["compare"]) == 6
    for row in rec["compare"]:
        for k in ("median_ttft_ms", "p99_itl_ms"):
            assert row[f"predicted_{k}"] == pytest.approx(row[f"measured_{k}"], rel=0.02), row
            lo, hi = row[f"measured_{k}_ci95"]  # the measurement's own chance, beside it
            assert lo <= row[f"measured_{k}"] <= hi and lo < hi, row


def test_a_deployment_measured_by_url_is_simulated_as_the_shape_named(tmp_path):
    """A sweep of URLs names its placements collocated-url and disagg-url: the user says
    what stands behind each, and the fit predicts its runs back as for the bundled one."""
    measured = _measured_sweep(tmp_path / "measured", by_url=True)
    rec = run_calibrated(str(measured.path), None, str(tmp_path / "plans"), as_json=True,
                         report=False, topologies=("collocated-url=collocated:2",
                                                   "disagg-url=disagg:1p1d")).to_json()
    assert "collocated-url as collocated-2" in rec["simulated"]
    assert "KV not limited" in rec["simulated"]
    assert "KV bytes in bfloat16 (the deployment's dtype, auto, is not known here)" \
        in rec["simulated"]
    assert {row["placement"] for row in rec["compare"]} == {"collocated-url", "disagg-url"}
    for row in rec["compare"]:
        for k in ("median_ttft_ms", "p99_itl_ms"):
            assert row[f"predicted_{k}"] == pytest.approx(row[f"measured_{k}"], rel=0.02), row


@pytest.mark.parametrize("topologies,needle", [
    ((), "--topology collocated-url=collocated:2"),
    (("collocated-url=disagg:1p1d",), "--topology 'collocated-url=disagg:1p1d'"),
    (("collocated-url=collocated:two",), "expected NAME=collocated:N"),
    (("nowhere=collocated:2",), "NAME one of collocated-url, disagg-url"),
])
def test_a_url_sweeps_shape_must_be_given_and_make_sense(tmp_path, topologies, needle):
    measured = _measured_sweep(tmp_path / "measured", collocated_rates=(1.0,), by_url=True)
    with pytest.raises(UsageError) as e:
        run_calibrated(str(measured.path), None, str(tmp_path / "plans"), as_json=True,
                       report=False, topologies=topologies)
    assert needle in str(e.value)


@pytest.mark.slow  # fits and replays a sweep, ~6 s
def test_a_prefiller_faster_than_collocateds_prefill_is_fitted_to_its_own_ttft(tmp_path):
    """Collocated prefills share their steps with decodes; P/D's prefiller runs alone. A
    prefill scale taken from collocated alone would fill the prefiller's queue too soon."""
    measured = _measured_sweep(tmp_path / "measured", collocated_prefill=1.3)
    rec = run_calibrated(str(measured.path), None, str(tmp_path / "plans"), as_json=True,
                         report=False).to_json()
    fitted = re.search(r"disagg-1p1d: prefill x([0-9.]+)", rec["simulated"])
    assert float(fitted[1]) == pytest.approx(1.0, abs=0.02), rec["simulated"]
    for row in rec["compare"]:
        for k in ("median_ttft_ms", "p99_itl_ms"):
            assert row[f"predicted_{k}"] == pytest.approx(row[f"measured_{k}"], rel=0.03), row


@pytest.mark.slow  # fits and replays a sweep, ~10 s
def test_engines_slowing_each_other_down_are_fitted_to_the_median_itl_across_rates(tmp_path):
    """Instances sharing a host's cores step slower while the others step: the decoder's
    median ITL grows with its prefiller's load beyond what its batch explains."""
    measured = _measured_sweep(tmp_path / "measured", contention=0.3)
    rec = run_calibrated(str(measured.path), None, str(tmp_path / "plans"), as_json=True,
                         report=False).to_json()
    fitted = [float(k) for k in re.findall(r"\+([0-9.]+) of a step", rec["simulated"])]
    assert fitted == [pytest.approx(0.3, abs=0.03)] * 2, rec["simulated"]
    for row in rec["compare"]:
        for k in ("median_ttft_ms", "p50_itl_ms", "p99_itl_ms"):
            assert row[f"predicted_{k}"] == pytest.approx(row[f"measured_{k}"], rel=0.03), row


@pytest.mark.slow  # fits and replays a sweep, ~8 s
def test_a_placement_measured_only_past_collapse_takes_the_jitter_fitted_below_it(tmp_path):
    """Past collapse, p99 ITL is a long prompt's stall: fitted there, the step noise would
    be whatever the stall leaves of it (here nothing). P/D's runs show the host's own."""
    truth = 0.2
    measured = _measured_sweep(tmp_path / "measured", collocated_prefill=3.0, jitter=truth,
                               collocated_rates=(3.0, 6.0))
    rec = run_calibrated(str(measured.path), None, str(tmp_path / "plans"), as_json=True,
                         report=False).to_json()
    col = next(r for r in rec["compare"] if r["placement"] == "collocated-2" and r["rate"] == 3)
    assert col["measured_p99_itl_ms"] > 2 * 100  # past collapse, as meant
    fitted = re.search(r"disagg-1p1d: .*jitter ([0-9.]+) \(at 1 req/s\)", rec["simulated"])
    assert float(fitted[1]) == pytest.approx(truth, abs=0.03), rec["simulated"]
    assert f"(at 3 req/s), jitter {fitted[1]} (the host's, fitted where its noise showed)" \
        in rec["simulated"]


@pytest.mark.slow  # fits and replays a sweep, ~8 s
def test_a_placement_whose_stalls_alone_reach_its_p99_takes_the_hosts_jitter(tmp_path):
    """Below collapse too, collocated's p99 ITL can be a prompt's stall: the fit finds no
    room for noise there (jitter 0), which says nothing of the host's. Replayed on short
    prompts, that 0 put collocated's p99 ITL at half the measured."""
    truth = 0.2
    measured = _measured_sweep(tmp_path / "measured", collocated_prefill=2.0, jitter=truth,
                               collocated_rates=(3.0, 6.0))
    rec = run_calibrated(str(measured.path), None, str(tmp_path / "plans"), as_json=True,
                         report=False).to_json()
    col = [r for r in rec["compare"] if r["placement"] == "collocated-2"]
    assert all(100 < r["measured_p99_itl_ms"] <= 2 * 100 for r in col)  # stalls, below collapse
    fitted = re.search(r"collocated-2: .*?jitter ([0-9.]+) \(([^)]*)\)", rec["simulated"])
    assert float(fitted[1]) == pytest.approx(truth, abs=0.03), rec["simulated"]
    assert fitted[2] == "the host's, fitted where its noise showed"
    for row in col:
        assert row["predicted_p99_itl_ms"] == pytest.approx(row["measured_p99_itl_ms"], rel=0.06)


def test_calibrate_needs_a_bundled_sweeps_calibration(tmp_path):
    run_dir = RunDir.create(tmp_path, "x")
    run_dir.write_manifest(Manifest.new(0, {}))
    with pytest.raises(UsageError, match="no calibration"):
        run_calibrated(str(run_dir.path), None, str(tmp_path), as_json=True)


@pytest.mark.slow  # two plans over the default grid, ~10 s
def test_a_capped_plan_runs_a_collapsed_placement_on_to_its_saturated_throughput(tmp_path):
    # uncapped, collocated is skipped past FALLEN rates in a row it collapsed at (it surely
    # misses higher); a closed loop's comparison is of throughput at saturation, so every
    # rate of the grid is run
    def runs(out, **capped) -> int:
        run_plan(PlanOptions(**{**GUIDE, "rates": (), "num_prompts": 200}, p2p="yes",
                             placements=("collocated-2",), report=False, out=str(out),
                             **capped))
        return len(_series(out, "collocated-2"))

    assert runs(tmp_path / "open") < 10
    assert runs(tmp_path / "capped", max_concurrency=64) == 10
