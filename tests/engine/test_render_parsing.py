"""Streaming parsing equals whole-text parsing for every way of cutting the text."""

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.render.parsing import StreamParser, parse

TRICKY = [
    "plain answer",
    "<think>step 1, then 2</think>The answer is 4.",
    '<think>hmm</think>Calling.<tool_call>{"name": "f", "arguments": {"a": {"b": [1, {"c": "}"}]}}}'
    '</tool_call>',
    '<tool_call>{"name": "q", "arguments": {"s": "say \\"hi\\" </tool"}}</tool_call> after',
    "é<think>ünïcødé 漢字 🙂</think>done 🙂",
    "unterminated <think>still thinking",
    'unterminated <tool_call>{"name": "f"',
    "<tool_call>not json</tool_call>tail",
    "a < b and <thinking> is not a tag </thin",
    '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", '
    '"arguments": "{\\"x\\": 1}"}</tool_call>',
]


def streamed(pieces, roundtrip_state=True):
    p, out = StreamParser(), None
    for piece in pieces:
        if roundtrip_state:  # any replica can serve any chunk: the state travels as JSON
            p = StreamParser.from_json(json.loads(json.dumps(p.to_json())))
        got = p.feed(piece)
        out = got if out is None else (out.extend(got) or out)
    out.extend(p.finish())
    return out


@pytest.mark.parametrize("text", TRICKY)
def test_every_two_and_three_way_split_matches(text):
    whole = parse(text)
    for i in range(len(text) + 1):
        assert streamed([text[:i], text[i:]]) == whole
    for i, j in itertools.combinations(range(0, len(text) + 1, 3), 2):
        assert streamed([text[:i], text[i:j], text[j:]]) == whole


@given(st.sampled_from(TRICKY), st.lists(st.integers(0, 200), max_size=12))
@settings(max_examples=300, deadline=None)
def test_any_cut_into_many_pieces_matches(text, cuts):
    points = sorted({c % (len(text) + 1) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0] + points, points + [len(text)])]
    assert streamed(pieces) == parse(text)


def test_what_the_markup_parses_into():
    out = parse(TRICKY[2])
    assert out.reasoning == "hmm" and out.content == "Calling."
    (call,) = out.tool_calls
    assert call["function"]["name"] == "f"
    assert json.loads(call["function"]["arguments"]) == {"a": {"b": [1, {"c": "}"}]}}
    assert parse(TRICKY[5]).reasoning == "still thinking"
    assert parse(TRICKY[6]).content == 'unterminated <tool_call>{"name": "f"'
    assert parse(TRICKY[7]).content == "<tool_call>not json</tool_call>tail"
    assert [c["id"] for c in parse(TRICKY[9]).tool_calls] == ["call_0", "call_1"]


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"mode": "x", "held": "", "tool_text": "", "num_tool_calls": 0},
        {"mode": "content", "held": "x" * 50, "tool_text": "", "num_tool_calls": 0},
        "state",
    ],
)
def test_malformed_state_is_refused(bad):
    with pytest.raises(ValueError):
        StreamParser.from_json(bad)
