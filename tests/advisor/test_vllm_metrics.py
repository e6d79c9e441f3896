"""Reading vLLM's metrics: a recorded /metrics text of a decoder and a prefiller (written
from vLLM's documented NIXL metric names and histogram shapes), before and after a run."""

from pathlib import Path

import pytest

from advisor.decide.table import Row
from advisor.engines.placement import Placement
from advisor.goodput.from_runs import _frontend
from advisor.goodput.outcomes import Outcome
from advisor.measure.prom import Sample, read, recognised, transfer_of
from advisor.measure.transfer import verdict
from advisor.rundata.result import RunResult
from advisor.rundata.stats import RunStats

FIX = Path(__file__).parent / "fixtures"


def page(role: str, when: str) -> str:
    return (FIX / f"vllm_{role}_metrics_{when}.txt").read_text()


def run_delta() -> Sample:
    """What the run did on both instances (their pages summed, after minus before)."""
    before = read(page("decoder", "before") + page("prefiller", "before"))
    after = read(page("decoder", "after") + page("prefiller", "after"))
    return after.minus(before)


def test_transfers_of_a_run_come_from_the_nixl_histograms():
    t = transfer_of(run_delta())
    assert t.source == "vllm"
    assert (t.count, t.seconds, t.nbytes) == pytest.approx((20, 1.4, 2.0e9))
    assert t.failures == 1 and t.expired == 2  # expired: counted on the prefiller
    assert t.overhead_s == pytest.approx(0.02)  # vLLM's post time
    assert t.quantile(0.9) == 0.1  # 18 of 20 within 100 ms


def test_the_verdict_is_the_guides():
    v = verdict(transfer_of(run_delta()), "fast")
    assert v["mean_ms"] == pytest.approx(70.0) and v["p90_ms"] == pytest.approx(100.0)
    assert v["mean_mb"] == pytest.approx(100.0) and v["gbps"] == pytest.approx(2.0 / 1.4)
    assert v["throughput_ok"] is True and v["overhead_ms"] == pytest.approx(1.0)
    assert v["verdict"].startswith("marginal")  # 50 ms <= mean < 200 ms
    assert "1 failed" in v["verdict"] and "2 leases expired" in v["verdict"]
    slow = transfer_of(run_delta())
    slow.seconds *= 10  # 0.14 GB/s: under InfiniBand's 1 GB/s, over TCP's 100 MB/s
    assert verdict(slow, "fast")["throughput_ok"] is False
    assert "under the 1 GB/s" in verdict(slow, "fast")["verdict"]
    assert verdict(slow, "tcp")["throughput_ok"] is True


def test_a_delta_survives_json_and_sums_over_runs():
    d = run_delta()
    back = Sample.from_json(d.to_json())
    assert transfer_of(back) == transfer_of(d)
    twice = transfer_of(back.plus(d))
    assert (twice.count, twice.failures, twice.buckets[0.1]) == (40, 2, 36)
    assert d.gauges["vllm:kv_cache_usage_perc"] == pytest.approx(0.50)  # summed, as last read


def test_a_page_without_serving_metrics_is_not_recognised():
    assert recognised(page("decoder", "after"))
    assert not recognised("# TYPE go_goroutines gauge\ngo_goroutines 12\n")


class _Runs:
    """A run directory's reads, fabricated: one run per rate."""

    def __init__(self, runs):
        self.runs = runs

    def read_run(self, name, rate):
        return self.runs[rate]


def _run(frontend_cpu=None, metrics=None):
    return RunResult.of(RunStats(0, 0, 0.0, duration=10.0), num_prompts=20,
                        frontend_cpu=frontend_cpu, metrics=metrics)


def test_without_our_counters_the_api_servers_process_cpu_stands_in():
    runs = _Runs({1.0: _run(metrics={"values": {"process_cpu_seconds_total": 5.0}})})
    done = [Outcome(1.0, True, False)]
    local = _frontend(runs, Placement("collocated-url", "collocated",
                                      url="http://127.0.0.1:8000"), done)
    assert local.source == "process_cpu_seconds_total" and local.cores_busy == 0.5
    assert local.cpu_ms_per_request == 250.0 and local.cpu_share is not None
    remote = _frontend(runs, Placement("collocated-url", "collocated",
                                       url="http://gpu-host:8000"), done)
    assert remote.cpu_share is None and "core count is unknown" in remote.undecided
    none = _frontend(_Runs({1.0: _run()}), Placement("collocated-url", "collocated",
                                                     url="http://gpu-host:8000"), done)
    assert none.undecided == "no CPU counters at http://gpu-host:8000"


def test_a_row_without_evidence_says_undecided_not_no():
    row = Row("frontend_cpu_heavy", "s", "split-render-tier", False,
              undecided="no CPU counters at http://x")
    assert row.verdict == "undecided: no CPU counters at http://x"
    assert Row("r", "s", "a", False).verdict == "no" and Row("r", "s", "a", True).verdict == "yes"
