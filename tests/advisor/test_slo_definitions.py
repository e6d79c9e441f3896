"""The field's SLO definitions, each judged as its users judge it, and a verdict re-judged
from the same records under the others: requests whose gaps are known, so each
definition's answer is known before it is computed."""

import pytest

from advisor.errors import UsageError
from advisor.goodput.outcomes import outcome_of
from advisor.goodput.robustness import rejudge
from advisor.measure.records import RequestRecord
from advisor.measure.stats import is_good, latency, summarize
from advisor.measure.workload_run import record_row
from advisor.rundata.files import RunDataError
from advisor.rundata.result import RunResult
from advisor.rundata.rundir import RunDir
from advisor.rundata.slo import POOLED, Objective, Slo, parse_slo

pytestmark = pytest.mark.unit


def _request(i: int, gaps_ms: list[float], ttft_ms: float = 100.0) -> RequestRecord:
    """A request sent at i s whose first token came `ttft_ms` later, then one per gap."""
    t = [i + ttft_ms / 1000]
    for g in gaps_ms:
        t.append(t[-1] + g / 1000)
    return RequestRecord(i, f"c{i}", 0, False, float(i), float(i), float(i), t, t[-1],
                         prompt_tokens=10, output_tokens=len(t), status=200)


# one stall of 200 ms among 19 gaps of 20 ms: its own p99 gap misses 50 ms, its TPOT
# ((19 x 20 + 200) / 20 = 29 ms) meets it
STALLED = [20.0] * 10 + [200.0] + [20.0] * 9
SMOOTH = [20.0] * 20


def test_p99_itl_is_the_pooled_definition_and_itl_the_per_request_one():
    slo = parse_slo(["ttft:2000", "p99_itl:50"], "--slo")
    assert slo.objectives[1] == Objective("itl", 50.0, POOLED)
    assert slo.text == "ttft:2000 p99_itl:50" and "the p99 of all the run's gaps" in slo.stated
    assert slo.gap_ms == 50.0 and slo.per_request == (Objective("ttft", 2000.0),)
    assert Slo.from_run_file({"objectives": [{"metric": "itl", "ms": 50, "judged": "pooled"}]},
                             "f").pooled == (Objective("itl", 50.0, POOLED),)


@pytest.mark.parametrize("items, said", [
    (["itl:50", "p99_itl:40"], "itl given twice (itl and p99_itl are two definitions"),
    (["p99_tpot:50"], "NAME one of ttft, tpot, e2el, itl, p99_itl"),
])
def test_a_definition_given_twice_or_unknown_is_refused_naming_the_flag(items, said):
    with pytest.raises(UsageError, match=r"--slo.*" + said.replace("(", r"\(")):
        parse_slo(items, "--slo")


def test_a_run_file_cannot_pool_what_is_judged_per_request():
    with pytest.raises(RunDataError, match=r"f\[0\] must be .*pooled \(itl only\)"):
        Slo.from_run_file({"objectives": [{"metric": "tpot", "ms": 5, "judged": "pooled"}]},
                          "f")


def test_each_definition_judges_a_stalled_request_as_its_users_do():
    stalled, smooth = latency(_request(0, STALLED)), latency(_request(1, SMOOTH))
    per_request = parse_slo(["ttft:2000", "itl:50"], "s")
    tpot = parse_slo(["ttft:2000", "tpot:50"], "s")
    pooled = parse_slo(["ttft:2000", "p99_itl:50"], "s")
    assert not is_good(stalled, per_request) and is_good(smooth, per_request)
    assert is_good(stalled, tpot)
    assert is_good(stalled, pooled)  # a request meets the per-request objectives only


def test_the_pooled_p99_is_met_or_missed_by_the_run():
    # 1 stalled request in 100: 1 gap of 200 ms in 2,000 sits above the p99; of 30, 30
    # (1.5% of the gaps) put it at 200 ms
    slo = parse_slo(["ttft:2000", "p99_itl:50"], "s")
    for stalled, met in ((1, True), (30, False)):
        records = [_request(i, STALLED if i < stalled else SMOOTH) for i in range(100)]
        result = RunResult.of(summarize(records, 100.0, slo, [50.0]), num_prompts=100,
                              request_rate=1.0)
        assert result.stats.slo_attainment == 1.0  # every request met its TTFT
        out = outcome_of(result, 1.0, 0.9, slo)
        assert out.meets is met and (out.sure_misses is not met)


def test_definitions_are_the_same_limits_under_each_reading_of_the_gap():
    slo = parse_slo(["ttft:1000", "itl:40", "e2el:9000"], "s")
    assert [s.text for s in slo.definitions()] == [
        "ttft:1000 itl:40 e2el:9000", "ttft:1000 p99_itl:40 e2el:9000",
        "ttft:1000 tpot:40 e2el:9000"]
    both = parse_slo(["ttft:1000", "itl:40", "tpot:30"], "s")
    assert [s.text for s in both.definitions()] == ["ttft:1000 itl:40 tpot:30",
                                                    "ttft:1000 p99_itl:40 tpot:30"]


def _write(run_dir: RunDir, placement: str, rate: float, stalled_share: float,
           slo: Slo) -> None:
    n = 60
    records = [_request(i, STALLED if i < stalled_share * n else SMOOTH) for i in range(n)]
    rows = [record_row(r, 0.0) for r in records]
    result = RunResult.of(summarize(records, float(n), slo, [50.0, 99.0]), rows,
                          topology=placement, kind=placement.split("-", maxsplit=1)[0],
                          request_rate=rate, num_prompts=n)
    run_dir.write_run(result)


def test_a_verdict_is_rejudged_from_the_same_records_under_each_definition(tmp_path):
    # collocated's requests stall more as the rate grows, P/D's never: per request, each
    # stalled request misses (15% of them at 1 req/s: 85% met); pooled, a run misses once
    # more than 1% of its gaps stall (0.75% at 1 req/s: met); by TPOT no request misses,
    # so both placements meet at every rate tried: a tie
    slo = parse_slo(["ttft:2000", "itl:50"], "s")
    rd = RunDir.create(tmp_path, "rejudged")
    shares = {0.5: 0.0, 1.0: 0.15, 2.0: 0.3, 4.0: 0.6}
    for rate, share in shares.items():
        _write(rd, "collocated-2", rate, share, slo)
        _write(rd, "disagg-1p1d", rate, 0.0, slo)
    rates = {"collocated-2": list(shares), "disagg-1p1d": list(shares)}
    got = rejudge(rd, slo, 0.9, "collocated-2", "disagg-1p1d", rates, 0.1)
    assert [r.slo for r in got] == ["ttft:2000 itl:50", "ttft:2000 p99_itl:50",
                                    "ttft:2000 tpot:50"]
    per_request, pooled, tpot = got
    assert per_request.verdict == "disaggregate" and per_request.collocated_rps == 0.5
    assert pooled.verdict == "disaggregate" and pooled.collocated_rps == 1.0
    assert pooled.holds and per_request.holds
    assert tpot.verdict == "within noise" and not tpot.holds
    assert tpot.collocated_rps == tpot.disaggregated_rps == 4.0
    assert "collocated surely missed it at no rate tried (up to 4 req/s)" in tpot.line


def test_an_slo_without_itl_is_checked_against_its_floors_and_told_unreachable():
    # ttft and tpot only, as vLLM's --goodput: the floor check and the verdict that no
    # rate met it read the TPOT limit where ITL's was, and name the objective
    from advisor.decide.table import recommend
    from advisor.rundata.evidence import Calibration, Evidence, PlacementEvidence, WorkloadEvidence

    slo = parse_slo(["ttft:2000", "tpot:20"], "s")
    cal = Calibration(prompt_tokens=[16, 1024], ttft_ms=[20.0, 600.0], batches=[1, 8],
                      step_ms=[30.0, 40.0], prefill_ms_per_token=0.57, prefill_base_ms=11.0)
    assert {m for m, v in cal.floors(100).items() if m in slo and v > slo.ms(m)} == {"tpot"}
    ev = Evidence(slo=slo, attainment=0.9, collocated=PlacementEvidence(placement="c"),
                  workload=WorkloadEvidence(mean_prompt_tokens=100, concurrency=0.0),
                  calibration=cal)
    rec = recommend(ev)
    assert rec.action == "measure-first"
    assert "tpot:20 is binding, the unloaded decode step is 30 ms" in rec.reasons[0]


def test_without_an_itl_limit_the_p99_itl_row_is_undecided_not_fired():
    # a TPOT limit is a request's mean gap: the guide's first row reads an ITL limit, and
    # a tie in goodput under tpot:50 was decided "disaggregate" by that row on the TPOT's
    # number (the decode-heavy sweep of 2026-12-07)
    from advisor.decide.table import recommend
    from advisor.rundata.evidence import Evidence, PlacementEvidence, WorkloadEvidence

    def evidence(slo):
        return Evidence(slo=slo, attainment=0.9,
                        collocated=PlacementEvidence(placement="c", p99_itl_ms=80.0,
                                                     max_goodput_rps=9.0),
                        disaggregated=PlacementEvidence(placement="d", max_goodput_rps=9.0),
                        workload=WorkloadEvidence(mean_prompt_tokens=32, concurrency=0.5))

    by_tpot = recommend(evidence(parse_slo(["ttft:2000", "tpot:50"], "s")))
    row = by_tpot.row("itl_p99_misses_slo")
    assert not row.fired and "the SLO sets no ITL limit" in row.undecided
    assert by_tpot.action == "stay-collocated"
    by_itl = recommend(evidence(parse_slo(["ttft:2000", "p99_itl:50"], "s")))
    assert by_itl.row("itl_p99_misses_slo").fired and by_itl.action == "disaggregate"
