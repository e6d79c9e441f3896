"""Traces someone hands over (issue 67, items 2 and 3), at the scale each was found: every
number in them is bounded where it is read, so each is one line naming the file and row
(or the flag), within seconds and a few tens of MB, never a hang, a traceback or gigabytes.
Before: two timestamps of +-1e308 hung `advisor bench` forever; one row of 3e7 tokens took
1.08 GB; 300k rows of 100 hash ids 621 MB; a row of 10M hash ids 745 MB."""

import json
import math
import time
import tracemalloc

import pytest

from tests.adversarial.memory_cap import memory_cap  # noqa: F401  (a fixture)
from tests.cli import advisor, said
from workloads import traces
from workloads.traces import TraceRow

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("memory_cap")]
ROW = '{{"timestamp": {ts}, "input_length": {inp}, "output_length": 8, "hash_ids": {ids}}}\n'
LIMIT_S, LIMIT_MB = 10.0, 300


def rows(path, *lines):
    path.write_text("".join(lines))
    return path


def refused(path, needle, **kw):
    """`traces.load(path)` refused with `needle` in its one line, in bounded time and memory."""
    tracemalloc.start()
    start = time.monotonic()
    try:
        with pytest.raises(ValueError, match=needle) as e:
            traces.load(path, **kw)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert time.monotonic() - start < LIMIT_S and peak < LIMIT_MB << 20, peak
    assert "\n" not in str(e.value)
    return str(e.value)


def test_timestamps_that_overflow_when_subtracted_are_refused_by_row(tmp_path):
    f = rows(tmp_path / "t.jsonl", ROW.format(ts=1e308, inp=10, ids=[]),
             ROW.format(ts=-1e308, inp=10, ids=[]))
    assert "row 1: the time must be finite" in refused(f, "finite")


@pytest.mark.parametrize("scale", [math.inf, math.nan, -1.0, 0.0])
def test_a_time_scale_that_is_not_finite_and_positive_is_refused(tmp_path, scale):
    f = rows(tmp_path / "t.jsonl", ROW.format(ts=0, inp=10, ids=[]),
             ROW.format(ts=1, inp=10, ids=[]))
    refused(f, "time scale must be a finite number > 0", time_scale=scale)


def test_a_replay_that_would_last_past_a_day_names_its_span_and_the_flags(tmp_path):
    f = rows(tmp_path / "t.jsonl", ROW.format(ts=0, inp=10, ids=[]),
             ROW.format(ts=1, inp=10, ids=[]))
    assert "--trace-time-scale" in refused(f, "would last 1e\\+297 s", time_scale=1e300)


@pytest.mark.parametrize("tokens", [30_000_000, 10**12])
def test_one_row_of_tens_of_millions_of_tokens_is_refused(tmp_path, tokens):
    f = rows(tmp_path / "t.jsonl", ROW.format(ts=0, inp=tokens, ids=[]))
    refused(f, f"row 1: lengths must be 1 to {traces.MAX_ROW_TOKENS}")


def test_300k_rows_of_100_hash_ids_stop_at_the_traces_hash_id_budget(tmp_path):
    line = ROW.format(ts=0, inp=51200, ids=list(range(100_000, 100_100)))
    f = rows(tmp_path / "t.jsonl", line * 300_000)
    last = traces.MAX_HASH_IDS // 100 + 1
    assert f"row {last}: over the {traces.MAX_HASH_IDS} hash ids" in refused(f, "hash ids")


def test_a_row_of_10m_hash_ids_is_refused_before_it_is_parsed(tmp_path):
    f = rows(tmp_path / "t.jsonl", ROW.format(ts=0, inp=10, ids="[" + "12345678," * 10**7
                                              + "1]"))
    refused(f, "row 1: longer than")


@pytest.mark.parametrize("ids,needle", [
    ([-5], "hash ids must be integers from 0"),
    ("[" + "9" * 5000 + "]", "row 1: .*digits"),
    ("[true]", "not an integer"),
    ("[" * 100_000 + "]" * 100_000, "row 1: nested deeper")])
def test_hostile_hash_ids_are_named_by_row(tmp_path, ids, needle):
    text = ids if isinstance(ids, str) else "[" + ",".join(map(str, ids)) + "]"
    f = rows(tmp_path / "t.jsonl", ROW.format(ts=0, inp=10, ids=text))
    refused(f, needle)


def test_a_workload_past_its_token_budget_is_refused_before_it_is_built():
    many = [TraceRow(i * 0.01, traces.MAX_ROW_TOKENS, 8)
            for i in range(traces.MAX_WORKLOAD_TOKENS // traces.MAX_ROW_TOKENS + 1)]
    with pytest.raises(ValueError, match="prompt tokens in all, over the"):
        traces.to_workload(many, 0)


def test_an_export_is_strict_json(tmp_path):
    out = tmp_path / "t.jsonl"
    traces.save([TraceRow(0.5, 10, 8, (1, 2))], out, "mooncake")
    json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"bare {c}"))
    with pytest.raises(ValueError):
        traces.save([TraceRow(math.inf, 10, 8)], out, "mooncake")


@pytest.mark.integration
@pytest.mark.parametrize("flags,needle", [
    ((), "row 1: the time must be finite"),
    (("--trace-time-scale", "nan"), "--trace-time-scale must be a finite number > 0")])
def test_bench_refuses_such_a_trace_in_one_line_without_asking_the_server(tmp_path, flags,
                                                                          needle):
    f = rows(tmp_path / "t.jsonl", ROW.format(ts=1e308, inp=10, ids=[]),
             ROW.format(ts=-1e308, inp=10, ids=[]))
    r = advisor("bench", "--trace", str(f), "--base-url", "http://127.0.0.1:9", *flags,
                timeout=60)
    assert r.returncode == 2 and len(said(r.stderr)) == 1 and needle in r.stderr, r.stderr
