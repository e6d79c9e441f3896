"""Finding 5: lists a request may send are bounded, and a stop check is O(1) per token. Three
million stop_token_ids once took 11.8 s for 300 tokens and slowed every other request; now
past the limit they are a 400 naming the field, at the HTTP level, before any work."""

import time

import pytest

from engine.core.sequence import MAX_LOGIT_BIAS, MAX_STOP_TOKEN_IDS, SamplingParams
from tests.serving.helpers import post, running_server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def url():
    with running_server() as (base, _server):
        yield base


@pytest.mark.parametrize("field,value", [
    ("stop_token_ids", list(range(100_000))),  # under the body limit: parsed, refused
    ("stop_token_ids", list(range(MAX_STOP_TOKEN_IDS + 1))),
    ("logit_bias", {str(t): 1 for t in range(MAX_LOGIT_BIAS + 1)}),
])
def test_a_list_past_its_limit_is_a_400_naming_it(url, field, value):
    t = time.monotonic()
    status, err = post(url, {"prompt": "hi", "max_tokens": 3, field: value})
    assert status == 400 and err["error"]["param"] == field, err
    assert "at most" in err["error"]["message"] and time.monotonic() - t < 5


def test_at_the_limit_the_request_is_served_and_stops_on_any_of_its_ids(url):
    ids = list(range(3, 3 + MAX_STOP_TOKEN_IDS))
    status, out = post(url, {"prompt": "hi", "max_tokens": 50, "temperature": 0,
                             "stop_token_ids": ids})
    assert status == 200, out
    got = out["choices"][0]["token_ids"]
    assert out["choices"][0]["finish_reason"] == "length" or got[-1] in set(ids)
    assert not any(t in set(ids) for t in got[:-1])  # it stopped at the first one


def test_the_stop_check_is_a_set_lookup():
    p = SamplingParams(stop_token_ids=range(100))
    assert p.stop_set == frozenset(range(100)) and p.stop_token_ids == tuple(range(100))
    assert SamplingParams(stop_token_ids=(5,)) == SamplingParams(stop_token_ids=[5])
