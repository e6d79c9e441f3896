"""Bidirectional P/D on real vLLM (NixlConnector's bidirectional_kv_xfer) through advisor
proxy --bidirectional: a later turn's prefiller pulls the earlier turn's KV, its reply
included, back from the decoder instead of computing it, read from vLLM's own counters, and
the turn's tokens are still the bundled engine's on the same weights."""

import json
import random
import urllib.request

import pytest

from advisor.measure.prom import scrape_text
from advisor.sweep.deployments import started
from advisor.sweep.on_vllm import placements
from advisor.sweep.topologies import parse_topologies
from engine import SamplingParams
from tests.engine.helpers import make_llm
from tests.vllm.conftest import MODEL

pytestmark = pytest.mark.slow
REPLY = 320  # tokens: far over vLLM's recompute threshold (64), so they are pulled back


def turn(url, prompt, max_tokens, cid):
    body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True, "return_token_ids": True,
                       "conversation_id": cid}).encode()
    req = urllib.request.Request(url + "/v1/completions", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())["choices"][0]["token_ids"]


def computed(metrics_url) -> float:
    """Prompt tokens the instance computed itself, all requests so far."""
    for line in scrape_text([metrics_url]).splitlines():
        if line.startswith("vllm:request_prefill_kv_computed_tokens_sum"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no vllm:request_prefill_kv_computed_tokens in " + metrics_url)


def test_a_later_turn_pulls_the_reply_back_instead_of_computing_it(vllm_settings, tmp_path):
    [p] = placements(parse_topologies("disagg-bidi:1p1d"), vllm_settings)
    assert "bidirectional_kv_xfer" in p.cmd and "--bidirectional" in p.cmd
    rng = random.Random(5)
    first = [rng.randrange(3, 512) for _ in range(200)]
    new = [rng.randrange(3, 512) for _ in range(24)]
    with started(p, tmp_path, MODEL, None, 300):
        reply = turn(p.url, first, REPLY, "conv-1")
        second = first + reply + new
        before = computed(p.metrics[0])
        out = turn(p.url, second, 16, "conv-1")
        on_prefiller = computed(p.metrics[0]) - before
    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    assert out == make_llm(model=MODEL).generate([second], params)[0].token_ids
    assert on_prefiller < REPLY / 2, f"the prefiller computed {on_prefiller} of the turn's tokens"
