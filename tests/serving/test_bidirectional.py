"""Bidirectional KV: on turns 2..N the prefiller pulls what the conversation's decoder kept
(prompt and reply) and computes only the new tokens; the output is token-identical to
collocated and to plain P/D, and a diverged history reuses only its matching part."""

import json
import time
import urllib.request

import pytest

from engine.core.sequence import SamplingParams
from engine.llm import LLM
from engine.processes.launch import Topology, launch
from tests.engine.helpers import random_prompts
from tests.serving.helpers import counter

pytestmark = pytest.mark.integration

TURNS, NEW, OUT = 6, 12, 5


def _post(url: str, body: dict, cid: str, path="/v1/completions") -> dict:
    req = urllib.request.Request(url + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json", "X-Conversation-Id": cid})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def conversation(url: str | LLM, cid: str, seed: int = 0, edit_turn: int | None = None):
    """TURNS completions turns (each prompt: the last one + its reply + NEW tokens) on a
    deployment at `url`, or offline on an LLM; with `edit_turn`, that turn's history is
    edited early on (a template dropping something). Returns every turn's output token IDs
    and prompt length."""
    news = random_prompts(TURNS, (NEW, NEW), seed=seed)
    prompt, outs = random_prompts(1, (40, 40), seed=seed + 100)[0], []
    for k in range(TURNS):
        if k == edit_turn:
            prompt = [*prompt[:5], 7, *prompt[6:]]
        if isinstance(url, LLM):
            params = SamplingParams(max_tokens=OUT, temperature=0.0, ignore_eos=True)
            ids = url.generate([prompt], params)[0].token_ids
        else:
            r = _post(url, {"model": "tiny", "prompt": prompt, "max_tokens": OUT,
                            "temperature": 0, "ignore_eos": True}, cid)
            ids = r["choices"][0]["token_ids"]
        outs.append((ids, len(prompt)))
        prompt = prompt + ids + news[k]
    return outs


@pytest.fixture(scope="module")
def reference():
    """The truth: the same conversations on the engine offline (one instance, no server)."""
    llm = LLM("tiny", dtype="float32")
    return conversation(llm, "ref"), conversation(llm, "ref-edited", edit_turn=3)


# NOTE: tcp in the slow tier: the 5-minute tier keeps shm (test_connectors pulls tails over both)
@pytest.mark.parametrize("connector", ["shm", pytest.param("tcp", marks=pytest.mark.slow)])
def test_turns_after_the_first_compute_only_their_new_tokens(reference, connector):
    topo = Topology(mode="disagg", model="tiny", dtype="float32", connector=connector,
                    bidirectional=True)
    with launch(topo) as d:
        pre = d.instance_urls["prefill"][0]
        outs = conversation(d.url, "c1")
        computed = counter(pre, "engine:prefill_tokens_computed")
        reused = counter(pre, "engine:prefill_tokens_reused")
        edited = conversation(d.url, "c2", edit_turn=3)
        mismatch = counter(pre, "engine:kv_reuse_mismatch_tokens")
    assert outs == reference[0] and edited == reference[1]
    first_prompt = outs[0][1]
    # turn 1: the whole prompt; turns 2..N: the reply's last token (sampled, never computed
    # by the decoder) and the new tokens
    assert computed == first_prompt + (TURNS - 1) * (1 + NEW)
    assert reused == sum(n for _, n in outs[1:]) - (TURNS - 1) * (1 + NEW)
    assert mismatch > 0  # the edited turn reused only up to the edit


@pytest.mark.slow  # a P/D deployment over five turns, ~6 s
def test_plain_pd_recomputes_every_turn_with_the_same_output(reference):
    with launch(Topology(mode="disagg", model="tiny", dtype="float32")) as d:
        pre = d.instance_urls["prefill"][0]
        outs = conversation(d.url, "c1")
        computed = counter(pre, "engine:prefill_tokens_computed")
    assert outs == reference[0]
    assert computed > outs[0][1] + (TURNS - 1) * (1 + NEW)  # more than bidirectional's


@pytest.mark.slow  # waits out a lease and restarts a decoder, ~6 s
def test_an_expired_lease_or_a_killed_decoder_between_turns_recomputes(reference):
    """Turn 2 after the kept KV's lease ran out, and turn 3 after the decoder was killed:
    the prefiller's pull fails, it computes everything, and the answers stay the same."""
    topo = Topology(mode="disagg", model="tiny", dtype="float32", bidirectional=True,
                    extra_args=("--decoder-kv-ttl", "0.3"))
    with launch(topo) as d:
        news = random_prompts(TURNS, (NEW, NEW), seed=0)
        prompt = random_prompts(1, (40, 40), seed=100)[0]
        outs = []
        for k in range(3):
            if k == 1:
                time.sleep(1.0)  # past the 0.3 s lease
            if k == 2:
                decoder = next(c for c in d.children if c.name.startswith("decode"))
                decoder.proc.kill()
                decoder.proc.wait()
            r = _post(d.url, {"model": "tiny", "prompt": prompt, "max_tokens": OUT,
                              "temperature": 0, "ignore_eos": True}, "c1")
            ids = r["choices"][0]["token_ids"]
            outs.append((ids, len(prompt)))
            prompt = prompt + ids + news[k]
    assert outs == reference[0][:3]


DROPS_THINK = "tests/fixtures/templates/qwen3_drops_think.jinja"


def chat(url: str, cid: str) -> list[str]:
    """TURNS chat turns, each reply sent back as the assistant's message; the replies."""
    messages, replies = [], []
    for k in range(TURNS):
        messages.append({"role": "user", "content": f"Question {k}: tell me about topic {7 * k}."})
        r = _post(url, {"model": "tiny", "messages": messages, "max_tokens": OUT,
                        "temperature": 0, "ignore_eos": True}, cid, "/v1/chat/completions")
        replies.append(r["choices"][0]["message"]["content"])
        messages.append({"role": "assistant", "content": replies[-1]})
    return replies


def _chat_on(topo: Topology, template: str | None) -> tuple[list[str], float]:
    """(replies, the prefiller's mismatch count; 0 collocated) of one chat on `topo`."""
    topo = topo.with_frontend(("--chat-template", template)) if template else topo
    with launch(topo) as d:
        replies = chat(d.url, "c1")
        pre = d.instance_urls.get("prefill")
        return replies, counter(pre[0], "engine:kv_reuse_mismatch_tokens") if pre else 0.0


@pytest.mark.slow  # three or four deployments per template, six chat turns each
@pytest.mark.parametrize("template, connectors", [(None, ("shm", "tcp")), (DROPS_THINK, ("shm",))],
                         ids=["default", "drops-think"])
def test_chat_turns_are_identical_across_placements_whatever_the_template(template, connectors):
    """Chat: every reply the same collocated, plain P/D and bidirectional P/D (shm, and tcp
    with the default template: the reuse does not depend on the connector). A Qwen3-style
    template (an empty <think> block in the generation prompt, dropped when the turn comes
    back as history) makes each turn diverge from what the decoder kept: only the part
    before is reused, the output stays right, and the count shows it."""
    collocated, _ = _chat_on(Topology(mode="collocated", replicas=1, model="tiny",
                                      dtype="float32"), template)
    plain, _ = _chat_on(Topology(mode="disagg", model="tiny", dtype="float32"), template)
    assert plain == collocated
    mismatch = {}
    for connector in connectors:
        got, mismatch[connector] = _chat_on(Topology(
            mode="disagg", model="tiny", dtype="float32", connector=connector,
            bidirectional=True), template)
        assert got == collocated
    assert len(set(mismatch.values())) == 1
    # the empty block ("<think>\n\n</think>\n\n") is dropped on each of turns 2..N
    per_turn_dropped = 4 * (TURNS - 1)
    if template:
        assert mismatch["shm"] >= per_turn_dropped
    else:
        # NOTE: a random model's reply may re-encode differently from the tokens it sampled,
        # so a few tokens diverge even with a faithful template, never a whole think block
        assert mismatch["shm"] < per_turn_dropped
