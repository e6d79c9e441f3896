"""Streaming parsing equals whole-text parsing for every way of cutting the text."""

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.render.chat import message
from engine.render.parsing import StreamParser, parse
from engine.render.protocol import RequestError, parse_request
from engine.render.tokenizer import TextTokenizer

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
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]
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


@pytest.mark.parametrize("reply", [
    'Calling.<tool_call>{"name": "f", "arguments": {"a": [1, {"b": "}"}]}}</tool_call>',
    '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", '
    '"arguments": {"x": "y"}}</tool_call>',
])
def test_a_replys_tool_calls_given_back_render_as_they_were_generated(reply):
    """The next turn's history holds the assistant message the client got (content and
    tool calls apart); the template must give the model back the text it generated."""
    history = [{"role": "user", "content": "q"}, message(parse(reply)),
               {"role": "tool", "tool_call_id": "call_0", "content": "42"}]
    req = parse_request({"messages": history}, True, "tiny")
    assert req.messages[2] == history[2]
    text = TextTokenizer.load().render_chat(req.messages, add_generation_prompt=False)
    assert f"<|im_start|>assistant\n{reply}<|im_end|>\n<|im_start|>tool\n42" in text


@pytest.mark.parametrize("msg", [
    {"role": "user", "content": "x", "tool_calls": []},  # only an assistant calls tools
    {"role": "assistant", "content": None, "tool_calls": [{"function": {"arguments": "{}"}}]},
    {"role": "assistant", "content": "x", "tool_calls": "f()"},
    {"role": "tool", "content": "42", "tool_call_id": 7},
])
def test_malformed_tool_history_is_refused(msg):
    with pytest.raises(RequestError) as e:
        parse_request({"messages": [msg]}, True, "tiny")
    assert e.value.param == "messages"


def test_a_piece_of_many_tool_calls_parses_each_in_order():
    call = '<tool_call>{"name": "f", "arguments": {"i": %d}}</tool_call>x'
    out = parse("".join(call % i for i in range(500)))
    assert [json.loads(c["function"]["arguments"])["i"] for c in out.tool_calls] == \
        list(range(500))
    assert out.content == "x" * 500
