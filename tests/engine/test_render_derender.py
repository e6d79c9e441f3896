"""Derendering token IDs in chunks equals derendering them whole, for every cut; bad chunks
and states are refused."""

import json

import pytest

from engine.render.derender import DerenderError, StreamState, derender, derender_chunk
from engine.render.tokenizer import TextTokenizer
from tests.engine.test_render_parsing import TRICKY

TOK = TextTokenizer.load()


def chunked(ids, cuts, rid="r1"):
    state, out = StreamState.start(rid), None
    points = sorted(set(cuts))
    pieces = [ids[a:b] for a, b in zip([0, *points], [*points, len(ids)])]
    for k, piece in enumerate(pieces):
        state = StreamState.from_json(
            json.loads(json.dumps(state.to_json()))
        )  # as a client echoes it
        got, state = derender_chunk(TOK, state, rid, piece, finished=k == len(pieces) - 1)
        out = got if out is None else (out.extend(got) or out)
    return out


@pytest.mark.parametrize("text", TRICKY)
def test_every_two_way_cut_of_the_token_ids_matches(text):
    ids = TOK.encode(text)
    assert TOK.decode(ids) == text  # the tokenizer round-trips these (byte-level BPE)
    whole = derender(TOK, ids)
    for i in range(len(ids) + 1):
        assert chunked(ids, [i]) == whole, i
    assert chunked(ids, list(range(1, len(ids)))) == whole  # one token per chunk


def test_multibyte_characters_split_across_tokens_never_come_out_broken():
    ids = TOK.encode("🙂漢字é")
    assert len(ids) > 4  # each character is several byte tokens here
    state, text = StreamState.start("r"), ""
    for k, t in enumerate(ids):
        got, state = derender_chunk(TOK, state, "r", [t], finished=k == len(ids) - 1)
        assert "\ufffd" not in got.content
        text += got.content
    assert text == "🙂漢字é"


@pytest.mark.parametrize(
    "mutate,needle",
    [
        (lambda s: {**s, "pending_ids": "x"}, "malformed"),
        (lambda s: {**s, "parser": {"mode": "weird"}}, "malformed"),
        (lambda s: {k: v for k, v in s.items() if k != "num_tokens"}, "stream_state"),
        (lambda s: "opaque", "stream_state"),
    ],
)
def test_malformed_states_are_refused(mutate, needle):
    with pytest.raises(DerenderError, match=needle):
        StreamState.from_json(mutate(StreamState.start("r").to_json()))


def test_a_chunk_for_another_request_and_ids_outside_the_vocabulary_are_refused():
    state = StreamState.start("r1")
    with pytest.raises(DerenderError, match="belongs to request 'r2'"):
        derender_chunk(TOK, state, "r2", [5], finished=False)
    with pytest.raises(DerenderError, match="outside the vocabulary"):
        derender_chunk(TOK, state, "r1", [TOK.vocab_size + 7], finished=False)
    with pytest.raises(DerenderError, match="list of integers"):
        derender_chunk(TOK, state, "r1", ["5"], finished=False)
