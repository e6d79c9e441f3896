"""The client's self-check: every run records whether the measuring client kept up; a run
where it was the bottleneck is marked, said so, and no decision rests on it."""

import json

import pytest

from advisor.goodput.outcomes import goodput_interval, max_goodput_rate, outcome_of
from advisor.measure.records import ClientRun, RequestRecord
from advisor.measure.selfcheck import LOOP_LAG_P99_MS, client_check, pooled
from advisor.rundata.result import RunResult
from advisor.rundata.slo import Slo
from advisor.rundata.stats import RunStats
from tests.advisor.helpers import scripted
from tests.cli import advisor


def _read(stats: dict) -> RunStats:
    """Statistics as a result.json holds them."""
    return RunStats.from_json(stats, "a test")


def _run(lags_ms: list[float], late_ms: list[float], cpu_s: float = 9.0) -> ClientRun:
    records = [RequestRecord(i, f"c{i}", 0, False, 10.0 + i, dispatched=10.0 + i + late / 1000)
               for i, late in enumerate(late_ms)]
    return ClientRun(records, 10.0, 20.0, cpu_s=cpu_s, loop_lags=[x / 1000 for x in lags_ms])


def test_the_check_names_each_sign_past_its_bound_and_pools_the_worst():
    calm = client_check(_run([0.5] * 100, [1.0] * 100))
    assert calm["bound"] is None and calm["cpu_share"] == 0.9
    lagging = client_check(_run([0.5] * 90 + [20.0] * 10, [1.0] * 100))
    assert "event loop woke 20.0 ms late" in lagging["bound"]
    # late while the client idles: the host's cores were held by others, sends on time
    assert client_check(_run([0.5] * 90 + [20.0] * 10, [1.0] * 100, cpu_s=0.3))["bound"] is None
    late = client_check(_run([0.5] * 100, [50.0] * 100))
    assert "behind schedule" in late["bound"]
    assert client_check(_run([0.5] * 100, [50.0] * 100), capped=True)["bound"] is None
    assert pooled([calm, lagging])["loop_lag_p99_ms"] == lagging["loop_lag_p99_ms"]
    assert pooled([calm, lagging])["bound"] == lagging["bound"]
    assert pooled([calm, None]) is None  # one part not recorded: nothing claimed


def _result(rate: float, attainment: float, bound: str | None) -> RunResult:
    stats = {"completed": 100, "failed": 0, "slo_attainment": attainment, "duration": 50.0,
             "p99_itl_ms": 10.0, "ci95": {"slo_attainment": [attainment, attainment]}}
    return RunResult.of(_read(stats), num_prompts=100, request_rate=rate,
                        client_check={"cpu_share": 1.0, "loop_lag_p99_ms": 30.0,
                                      "send_late_p99_ms": None, "bound": bound})


def test_a_client_bound_run_is_neither_met_nor_missed():
    runs = [_result(1.0, 1.0, None), _result(2.0, 0.2, "the measuring client did not "
                                                       "keep up: ..."),
            _result(4.0, 0.1, None)]
    outcomes = [outcome_of(r, r.rate, 0.9, Slo.of(ttft=2000, itl=50)) for r in runs]
    assert outcomes[1].client_bound and not outcomes[1].meets
    assert not outcomes[1].sure_misses and not outcomes[1].sure_meets
    # the interval runs from the last sure meet to the next sure miss, past the marked run
    assert goodput_interval(outcomes) == (1.0, 4.0) and max_goodput_rate(outcomes) == 1.0


@pytest.mark.integration
@pytest.mark.slow  # a load drill of 10 s or more
def test_a_client_driven_past_its_capacity_is_marked_and_said(tmp_path):
    """The known-timing server asked for more streams at once than one client core keeps:
    the run is marked, and the console says so."""
    with scripted(ttft_ms=1, itl_ms=1) as url:
        p = advisor("bench", "--base-url", url, "--num-prompts", "1500", "--request-rate",
                    "inf", "--random-input-len", "8", "--random-output-len", "16",
                    "--ignore-eos", "--result-dir", str(tmp_path))
    assert p.returncode == 0, p.stderr
    check = json.loads((tmp_path / "result.json").read_text())["client_check"]
    assert check["bound"], check
    assert "the measuring client did not keep up" in " ".join(p.stdout.split())


@pytest.mark.integration
def test_a_light_run_is_not_marked(tmp_path):
    with scripted(ttft_ms=10, itl_ms=5) as url:
        p = advisor("bench", "--base-url", url, "--num-prompts", "20", "--request-rate", "10",
                    "--random-input-len", "8", "--random-output-len", "4", "--ignore-eos",
                    "--result-dir", str(tmp_path))
    assert p.returncode == 0, p.stderr
    check = json.loads((tmp_path / "result.json").read_text())["client_check"]
    assert check["bound"] is None and check["loop_lag_p99_ms"] < LOOP_LAG_P99_MS, check


def test_a_client_bound_run_measured_again_is_not_measured_a_third_time():
    # the decode-heavy sweep of 2026-12-07 measured one such rate eight times over, until
    # its time budget ran out: each pooled run came out client bound, never marked as
    # measured again
    from advisor.goodput.outcomes import TOPPED_UP
    from advisor.sweep.rate_search import top_up

    met = outcome_of(_result(8.96, 1.0, None), 8.96, 0.9, Slo.of(ttft=2000, itl=50))
    bound = _result(12.67, 1.0, "the measuring client did not keep up: ...")
    first = outcome_of(bound, 12.67, 0.9, Slo.of(ttft=2000, itl=50))
    assert top_up([met, first]) == 12.67
    again = RunResult.of(bound.stats, num_prompts=200, request_rate=12.67,
                         client_check=bound.described.client_check,
                         workload_params={TOPPED_UP: True})
    second = outcome_of(again, 12.67, 0.9, Slo.of(ttft=2000, itl=50))
    assert second.client_bound and second.topped_up
    assert top_up([met, second]) is None
