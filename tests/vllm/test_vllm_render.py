"""The render split on real vLLM, started as the sweep starts render-split:1 (and `advisor
deploy` prints it): vLLM's render server (`vllm launch render`), a `--tokens-only` engine,
and our render front doing render -> generate -> derender. Chat requests through it get
what vLLM's own OpenAI route answers, streamed and whole; vLLM's render and ours turn the
same chat into the same token IDs, from the same tokenizer and template."""

import json

import pytest

from advisor.engines.processes import started
from advisor.engines.topologies import TopologySpec
from advisor.engines.vllm.placements import placements
from engine.render.frontend import Frontend, FrontendConfig
from engine.render.protocol import parse_request
from tests.vllm.client import CHATS, MAX_TOKENS, MODEL, chat_answers, post

pytestmark = pytest.mark.slow
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look a word up.",
    "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def split(vllm_settings, single, tmp_path_factory):
    """The render split, up (after `single` has stopped: the two would share the cores)."""
    [p] = placements((TopologySpec("render-split", 0, 1),), vllm_settings)
    with started(p, tmp_path_factory.mktemp("logs"), MODEL, None, 300):
        yield p


def test_the_render_split_answers_what_vllms_openai_route_answers(split, single):
    assert chat_answers(split.url) == single.chats


def test_vllms_render_and_ours_give_the_same_token_ids(split, vllm_settings):
    ours = Frontend(FrontendConfig(model_dir=vllm_settings.model_dir))
    render_url = split.instances[-1]
    for messages, tools in [(m, None) for m in CHATS] + [(CHATS[0], TOOLS)]:
        body = {"model": MODEL, "messages": messages, "max_tokens": MAX_TOKENS,
                # "auto" would need vLLM's tool-call flags; with "none" the template still
                # renders the tools
                **({"tools": tools, "tool_choice": "none"} if tools else {})}
        theirs = json.loads(post(render_url, "/v1/chat/completions/render", body))
        assert theirs["token_ids"] == ours.prompt_ids(parse_request(body, True, MODEL))


def test_vllms_render_drops_a_max_tokens_of_16_which_our_front_puts_back(split):
    """vLLM 0.32.0 serializes sampling_params without the fields at their defaults (16 is
    max_tokens'), so its tokens-only engine would generate to the end of the context; the
    chat test above passes max_tokens 16 through our front."""
    body = {"model": MODEL, "messages": CHATS[0], "max_tokens": MAX_TOKENS}
    rendered = json.loads(post(split.instances[-1], "/v1/chat/completions/render", body))
    assert "max_tokens" not in rendered["sampling_params"]
