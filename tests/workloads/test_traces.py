"""Traces: every format round-trips, bad rows are named, workloads are reproducible."""

import pytest

from workloads import traces
from workloads.presets import PRESETS, preset
from workloads.traces import TraceRow

ROWS = [TraceRow(0.0, 1200, 30, (1, 2, 3)), TraceRow(0.25, 700, 12, (1, 4)),
        TraceRow(1.5, 64, 200, (9,))]


@pytest.mark.parametrize("fmt", traces.FORMATS)
def test_export_then_import_gives_the_same_requests(tmp_path, fmt):
    path = tmp_path / ("t.jsonl" if fmt == "mooncake" else "t.csv")
    traces.save(ROWS, path, fmt)
    got = traces.load(path)
    keep_hashes = fmt == "mooncake"
    assert [(r.timestamp, r.input_length, r.output_length) for r in got] == \
        [(r.timestamp, r.input_length, r.output_length) for r in ROWS]
    assert [r.hash_ids for r in got] == ([r.hash_ids for r in ROWS] if keep_hashes else [()] * 3)


def test_time_scale_and_truncation(tmp_path):
    path = tmp_path / "t.jsonl"
    traces.save(ROWS, path, "mooncake")
    assert [r.timestamp for r in traces.load(path, time_scale=2.0)] == [0.0, 0.5, 3.0]
    assert len(traces.load(path, max_requests=2)) == 2
    assert len(traces.load(path, max_duration_s=1.0)) == 2


def test_shared_hash_ids_share_prefix_tokens_and_the_rest_is_unique():
    w = traces.to_workload(ROWS, seed=7)
    a, b = (c.turns[0].new_tokens for c in w.conversations[:2])
    assert len(a) == 1200 and len(b) == 700
    assert a[:512] == b[:512]  # hash id 1 in both
    assert a[512:700] != b[512:700]
    assert traces.to_workload(ROWS, seed=7).conversations[2].turns[0].new_tokens == \
        w.conversations[2].turns[0].new_tokens


@pytest.mark.parametrize("name,text,row", [
    ("bad.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 3}\n{"timestamp": 1}\n', 2),
    ("bad.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 3}\nnot json\n', 2),
    ("bad.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-01-01 00:00:00,5,3\n"
                "2024-01-01 00:00:01,five,3\n", 3),
    ("bad.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                "0.0,m,5,3,8,x\n1.0,m,5,-3,2,x\n", 3),
])
def test_a_bad_row_is_named(tmp_path, name, text, row):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=f"row {row}"):
        traces.load(path)


def test_presets_are_reproducible_and_scaled():
    for name in PRESETS:
        a, b = preset(name, 3, num_prompts=10), preset(name, 3, num_prompts=10)
        assert a.num_requests == 10
        assert [t.new_tokens for c in a.conversations for t in c.turns] == \
            [t.new_tokens for c in b.conversations for t in c.turns]
    long = preset("long-prompt", 0, scale=0.05, num_prompts=20)
    lens = [len(c.turns[0].new_tokens) for c in long.conversations]
    assert all(380 <= n <= 435 for n in lens) and long.conversations[0].turns[0].max_tokens == 13
    prompts = [tuple(c.turns[0].new_tokens) for c in long.conversations]
    assert len(set(prompts)) == len(prompts)  # unique: no prefix-cache hits


def test_only_the_hash_blocks_a_prompt_covers_are_expanded(monkeypatch):
    made = []
    real = traces.np.random.default_rng
    monkeypatch.setattr(traces.np.random, "default_rng", lambda s=None: made.append(s) or real(s))
    rows = [TraceRow(0.0, 600, 4, tuple(range(100_000)))]  # far more ids than 600 tokens use
    w = traces.to_workload(rows, seed=1)
    assert len(w.conversations[0].turns[0].new_tokens) == 600
    assert len([s for s in made if isinstance(s, list)]) == 2  # ceil(600 / 512) blocks
