"""Metric definitions on hand-made records whose answers are known."""

import pytest

from advisor.errors import UsageError
from advisor.measure.records import RequestRecord
from advisor.measure.stats import parse_percentiles, summarize
from advisor.rundata.slo import Slo, parse_slo


def rec(chunks, sent=0.0, tokens=None, ok=True, warmup=False):
    r = RequestRecord(0, "c", 0, warmup, scheduled=sent, sent=sent, chunks=list(chunks),
                      end=chunks[-1] if chunks else sent, status=200 if ok else 500,
                      error=None if ok else "boom")
    r.output_tokens = len(chunks) if tokens is None else tokens
    return r


def test_ttft_itl_tpot_e2el_follow_their_definitions():
    a = rec([0.100, 0.110, 0.130])          # ttft 100, gaps 10 and 20, e2el 130
    b = rec([1.200, 1.210], sent=1.0)       # ttft 200, gap 10, e2el 210
    s = summarize([a, b], 2.0, None, [50, 100], ("ttft", "tpot", "itl", "e2el"))
    assert s["mean_ttft_ms"] == pytest.approx(150)
    assert s["median_itl_ms"] == pytest.approx(10) and s["p100_itl_ms"] == pytest.approx(20)
    assert s["mean_tpot_ms"] == pytest.approx(((130 - 100) / 2 + 10) / 2)
    assert s["p100_e2el_ms"] == pytest.approx(210)
    assert s["output_throughput"] == pytest.approx(5 / 2.0)


def test_tpot_uses_usage_token_counts_when_chunks_carry_several_tokens():
    r = rec([0.1, 0.2], tokens=11)  # 2 chunks, 11 tokens
    assert summarize([r], 1.0, None, [50])["mean_tpot_ms"] == pytest.approx(100 / 10)


def test_itl_slo_is_judged_on_each_requests_own_p99_gap():
    steady = rec([0.1 + 0.02 * i for i in range(50)])            # all gaps 20 ms
    stalled = rec([0.1 + 0.02 * i for i in range(49)] + [2.0])   # one 1 s stall
    s = summarize([steady, stalled], 3.0, parse_slo(["itl:50"], "test"), [99])
    assert s["good_requests"] == 1 and s["slo_attainment"] == 0.5
    # pooled, the one stall is under the 99th percentile of all gaps
    assert s["p99_itl_ms"] < 50


def test_failed_requests_count_against_attainment_and_warmups_count_nowhere():
    good, bad = rec([0.05, 0.06]), rec([], ok=False)
    warm = rec([9.0, 9.5], warmup=True)
    s = summarize([good, bad, warm], 1.0, parse_slo(["ttft:100"], "test"), [50])
    assert (s["num_requests"], s["completed"], s["failed"]) == (2, 1, 1)
    assert s["slo_attainment"] == 0.5 and s["request_goodput"] == 1.0
    assert s["mean_ttft_ms"] == pytest.approx(50)


@pytest.mark.parametrize("bad", ["ttft", "ttft:", "ttft:abc", "speed:3", "ttft:-1", "ttft=5"])
def test_bad_goodput_items_are_named(bad):
    with pytest.raises(UsageError, match="--goodput item"):
        parse_slo([bad], "--goodput")


def test_goodput_accepts_spaces_and_commas_and_percentiles_are_checked():
    assert parse_slo(["ttft:2000", "itl:50,tpot:30"], "--goodput") == Slo.of(2000, 50, tpot=30)
    assert parse_percentiles("50,99.9") == [50, 99.9]
    for bad in ("", "0", "50,x", "101"):
        with pytest.raises(UsageError, match="--metric-percentiles"):
            parse_percentiles(bad)


def test_kv_blocks_in_use_sums_every_instance_in_a_scrape():
    from advisor.measure.prom import kv_blocks_in_use

    def instance(free, total):
        return (f'# TYPE engine:kv_blocks_free gauge\nengine:kv_blocks_free{{model_name="t"}} '
                f'{free}\n# TYPE engine:kv_blocks_total gauge\n'
                f'engine:kv_blocks_total{{model_name="t"}} {total}\n')

    assert kv_blocks_in_use(instance(30, 32)) == 2
    assert kv_blocks_in_use(instance(30, 32) + instance(20, 32)) == 14  # the proxy's concat
    assert kv_blocks_in_use(instance(32, 32)) == 0 and kv_blocks_in_use("") == 0


def test_multi_turn_runs_are_summarized_turn_by_turn():
    def turn(k, ttft, prompt, cached, kv=None, ok=True):
        r = rec([ttft, ttft + 0.01], ok=ok)
        r.turn, r.prompt_tokens, r.cached_tokens, r.kv_transfer_ms = k, prompt, cached, kv
        return r

    records = [turn(0, 0.10, 100, 0), turn(0, 0.30, 100, 0),
               turn(1, 0.05, 300, 290, kv=2.0), turn(1, 0.07, 300, 250, kv=4.0),
               turn(1, 0.0, 300, 0, ok=False)]
    s = summarize(records, 1.0, None, [50])
    first, second = s.per_turn
    assert (first.turn, first.requests, first.failed) == (1, 2, 0)
    assert first.median_ttft_ms == pytest.approx(200)
    assert first.mean_reused_tokens == 0 and first.mean_computed_tokens == 100
    assert (second.turn, second.requests, second.failed) == (2, 3, 1)
    assert second.median_ttft_ms == pytest.approx(60)
    assert second.mean_reused_tokens == 270 and second.mean_computed_tokens == 30
    assert second.mean_kv_transfer_ms == 3.0 and first.mean_kv_transfer_ms is None
    assert "per_turn" not in summarize(records[:2], 1.0, None, [50])  # single-turn: none
