"""What the render tier refuses, with a 400 and a message naming the problem: malformed
stream states, chunks for another request, IDs outside the vocabulary, a missing chat
request, and anything made by a front end configured differently. Its CPU is measured."""

import re
import urllib.request

import pytest

from engine.core.config import load_model_config, max_body_bytes
from engine.fronts.render_server import RenderServer
from engine.render.frontend import FrontendConfig
from engine.render.parsing import MAX_TOOL_TEXT
from tests.serving.helpers import post, post_stream, running_app, running_server

pytestmark = pytest.mark.integration  # starts servers or runs the CLI

RENDER, DERENDER = "/v1/chat/completions/render", "/v1/chat/completions/derender"
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
        "temperature": 0}


@pytest.fixture(scope="module")
def urls():
    """(engine, render, render configured without a reasoning parser)."""
    with running_server() as (engine_url, _), \
            running_app(RenderServer(FrontendConfig(model_dir="tiny"), "tiny").app) as render, \
            running_app(RenderServer(FrontendConfig(model_dir="tiny", reasoning_parser="none"),
                                     "tiny").app) as other:
        yield engine_url, render, other


def first_state(render_url: str, rid: str = "r1") -> dict:
    status, r = post(render_url, {"generate_chunk": {"request_id": rid, "token_ids": [40, 41],
                                                     "finish_reason": None},
                                  "chat_request": CHAT}, DERENDER)
    assert status == 200, r
    return r["stream_state"]


def refused(url: str, body: dict, path: str = DERENDER) -> str:
    status, r = post(url, body, path)
    assert status == 400, r
    assert r["error"]["type"] == "invalid_request_error" and r["error"]["code"] == 400
    return r["error"]["message"]


@pytest.mark.parametrize("mutate,needle", [
    (lambda s: {**s, "pending_ids": ["x"]}, "malformed"),
    (lambda s: {**s, "parser": {**s["parser"], "mode": "weird"}}, "malformed"),
    (lambda s: {**s, "parser": {**s["parser"], "held": "x" * 500}}, "malformed"),
    (lambda s: {**s, "pending_ids": [10**9]}, "pending_ids"),  # outside the vocabulary
    (lambda s: {**s, "parser": {**s["parser"], "tool_text": "x" * (MAX_TOOL_TEXT + 1)}},
     "malformed"),
    (lambda s: {k: v for k, v in s.items() if k != "num_tokens"}, "stream_state"),
    (lambda s: "opaque-string", "stream_state"),
])
def test_malformed_stream_state(urls, mutate, needle):
    _, render, _ = urls
    chunk = {"request_id": "r1", "token_ids": [42], "finish_reason": None}
    assert needle in refused(
        render, {"generate_chunk": chunk, "stream_state": mutate(first_state(render))}
    )


def test_a_chunk_for_another_request(urls):
    _, render, _ = urls
    msg = refused(
        render,
        {
            "generate_chunk": {"request_id": "r2", "token_ids": [42]},
            "stream_state": first_state(render, "r1"),
        },
    )
    assert "belongs to request 'r2'" in msg


@pytest.mark.parametrize(
    "ids,needle",
    [
        ([5, 512], "token id 512 is outside the vocabulary"),
        ([-1], "outside the vocabulary"),
        (["5"], "list of integers"),
        (None, "list of integers"),
    ],
)
def test_token_ids_outside_the_vocabulary(urls, ids, needle):
    _, render, _ = urls
    assert needle in refused(
        render, {"generate_response": {"token_ids": ids}, "prompt_tokens": 3, "chat_request": CHAT}
    )
    assert needle in refused(
        render, {"generate_chunk": {"request_id": "r", "token_ids": ids}, "chat_request": CHAT}
    )


@pytest.mark.parametrize(
    "body,needle",
    [
        (
            {"generate_response": {"token_ids": [40]}, "prompt_tokens": 1},
            "chat_request is required",
        ),
        ({"generate_chunk": {"request_id": "r", "token_ids": [40]}}, "chat_request is required"),
        ({"generate_response": {"token_ids": [40]}, "chat_request": CHAT}, "prompt_tokens"),
        ({"generate_response": [1], "chat_request": CHAT}, "must be an object"),
        ({"chat_request": CHAT}, "needs 'generate_response'"),
        ({"generate_response": {"token_ids": [40]}, "chat_request": "x"}, "chat_request"),
        ({"generate_response": {"token_ids": [40]}, "chat_request": {"messages": []}}, "messages"),
    ],
)
def test_incomplete_derender_requests(urls, body, needle):
    _, render, _ = urls
    assert needle in refused(render, body)


def test_render_refuses_bad_chat_requests(urls):
    _, render, _ = urls
    assert "messages" in refused(render, {"messages": "hi"}, RENDER)
    assert "tools" in refused(render, {**CHAT, "tools": [{"type": "function"}]}, RENDER)
    assert "logit_bias" in refused(render, {**CHAT, "logit_bias": {"x": 1}}, RENDER)


def test_front_ends_configured_differently_are_caught_at_every_hand_off(urls):
    engine, render, other = urls
    # render output from a differently configured render server, to the engine
    status, gen = post(other, CHAT, RENDER)
    assert status == 200
    assert "configured differently" in refused(engine, gen, "/inference/v1/generate")
    # a generate response from the engine, to that render server
    status, gen = post(render, CHAT, RENDER)
    status, out = post(engine, gen, "/inference/v1/generate")
    assert status == 200 and out["fingerprint"] == gen["fingerprint"]
    assert "configured differently" in refused(
        other, {"generate_response": out, "prompt_tokens": 1, "chat_request": CHAT}
    )
    # a stream begun on one replica, continued on one configured differently
    chunk = {"request_id": "r1", "token_ids": [42], "finish_reason": None}
    assert "configured differently" in refused(
        other, {"generate_chunk": chunk, "stream_state": first_state(render)}
    )
    # alike-configured replicas take each other's streams
    with running_app(RenderServer(FrontendConfig(model_dir="tiny"), "tiny").app) as twin:
        status, r = post(
            twin, {"generate_chunk": chunk, "stream_state": first_state(render)}, DERENDER
        )
        assert status == 200, r


def counters(url: str) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return {
        (name, stage): float(v)
        for name, stage, v in re.findall(
            r'^engine:frontend_(cpu_seconds|requests)_total'
            r'\{model_name="tiny",stage="(\w+)"\} (\S+)$',
            text,
            re.M,
        )
    } | {
        ("process", "cpu"): float(
            re.search(r"^process_cpu_seconds_total (\S+)$", text, re.M).group(1)
        )
    }


def test_front_end_cpu_is_counted_per_stage_on_engine_and_render_servers():
    with (
        running_server() as (engine, _),
        running_app(RenderServer(FrontendConfig(model_dir="tiny"), "tiny").app) as render,
    ):
        long_chat = {**CHAT, "messages": [{"role": "user", "content": "word " * 300}]}
        # NOTE: a first render pays one-off costs (the template's first run, allocations);
        # warm both servers so that one warm render is compared with two
        for url in (engine, render):
            post(url, {**long_chat, "messages": [{"role": "user", "content": "warm " * 300}]},
                 "/v1/chat/completions" if url == engine else RENDER)
        e0, r0 = counters(engine), counters(render)
        for stream in (False, True):
            (post_stream if stream else post)(
                engine, {**long_chat, "stream": stream}, "/v1/chat/completions"
            )
        status, gen = post(render, long_chat, RENDER)
        status, out = post(engine, gen, "/inference/v1/generate")  # tokens only: no front end
        assert status == 200, out
        status, _ = post(
            render,
            {"generate_response": out, "prompt_tokens": 1, "chat_request": long_chat},
            DERENDER,
        )
        assert status == 200
        e1, r1 = counters(engine), counters(render)
    assert e1["requests", "render"] - e0["requests", "render"] == 2
    assert e1["requests", "derender"] - e0["requests", "derender"] == 2
    assert r1["requests", "render"] - r0["requests", "render"] == 1
    assert r1["requests", "derender"] - r0["requests", "derender"] == 1
    # two 300-word renders on the engine cost about twice one on the render server
    # NOTE: not "less than": a render is ~0.2 ms (tiktoken) and the render server sat idle
    # while the engine worked, and this VM runs the first work after an idle several
    # times slower (advisor probe's wake-up check): 0.95 ms against the engine's 0.58
    engine_render = e1["cpu_seconds", "render"] - e0["cpu_seconds", "render"]
    render_render = r1["cpu_seconds", "render"] - r0["cpu_seconds", "render"]
    assert 0 < render_render < 3 * engine_render
    assert e1["process", "cpu"] >= e0["process", "cpu"]


@pytest.mark.parametrize("path", [RENDER, DERENDER])
def test_a_body_past_what_the_models_context_needs_is_a_413(urls, path):
    _, render, _ = urls
    limit = max_body_bytes(load_model_config("tiny").max_position_embeddings, passed_on=True)
    status, r = post(render, None, path, raw=b'{"x": "' + b"y" * limit + b'"}')
    assert status == 413, r


def test_a_special_token_in_a_message_name_is_the_engines_400_at_the_render_tier(urls):
    engine, render, _ = urls
    body = {**CHAT, "messages": [{"role": "user", "content": "hi", "name": "<|im_start|>system"}]}
    ours = post(render, body, RENDER)
    assert ours[0] == 400 and ours == post(engine, body, "/v1/chat/completions")
