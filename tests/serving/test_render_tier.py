"""The render tier against the engine's own chat endpoint: render -> tokens-only generate ->
derender gives the same message as /v1/chat/completions, streaming and not; bad derender
input and front ends configured differently are refused with 400s."""

import pytest

from engine.fronts.render_server import RenderServer
from engine.render.chat import message
from engine.render.frontend import FrontendConfig
from engine.render.parsing import Parsed, parse
from tests.engine.test_render_parsing import TRICKY
from tests.serving.helpers import post, post_stream, running_app, running_server

pytestmark = pytest.mark.integration  # starts servers or runs the CLI

RENDER, DERENDER = "/v1/chat/completions/render", "/v1/chat/completions/derender"
CHAT, GENERATE = "/v1/chat/completions", "/inference/v1/generate"
EOS = 2
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def servers():
    """(engine URL, render URL, engine server): the engine's sampler follows a script per seed."""
    with running_server() as (engine_url, engine), \
            running_app(RenderServer(FrontendConfig(model_dir="tiny"), "tiny").app) as render_url:
        tok = engine.frontend.tokenizer
        scripts = {seed: tok.encode(text) for seed, text in enumerate(TRICKY)}
        sampler = engine.engine.runner.sampler
        real = sampler.sample

        def scripted(logits, reqs):  # the model's choice, except for scripted seeds
            tokens = real(logits, reqs)
            for i, r in enumerate(reqs):
                script = scripts.get(r.params.seed)
                if script is not None:
                    k = len(r.output_token_ids)
                    tokens[i] = script[k] if k < len(script) else EOS
            return tokens

        sampler.sample = scripted
        yield engine_url, render_url, engine


def chat_body(seed: int, stream: bool, **extra) -> dict:
    return {"model": "tiny", "messages": [{"role": "user", "content": f"question {seed} é"}],
            "tools": TOOLS, "max_tokens": 120, "temperature": 0, "seed": seed, "stream": stream,
            **extra}


def merged(deltas: list[dict]) -> dict:
    """The message a client assembles from streamed deltas."""
    out = Parsed()
    for d in deltas:
        calls = [{k: v for k, v in c.items() if k != "index"} for c in d.get("tool_calls") or []]
        out.extend(Parsed(d.get("content") or "", d.get("reasoning") or "", calls))
    return message(out)


def own_chat(engine_url: str, body: dict,
             headers: dict[str, str] | None = None) -> tuple[dict, str, list[int]]:
    """(message, finish_reason, token ids) from the engine's own chat endpoint."""
    if not body["stream"]:
        status, r = post(engine_url, body, CHAT, headers=headers)
        assert status == 200, r
        c = r["choices"][0]
        return c["message"], c["finish_reason"], c["token_ids"]
    choices = [e["choices"][0] for e in post_stream(engine_url, body, CHAT, headers)
               if e["choices"]]
    return (merged([c["delta"] for c in choices]), choices[-1]["finish_reason"],
            [t for c in choices for t in c["token_ids"]])


def via_render_tier(engine_url: str, render_url: str, body: dict) -> tuple[dict, str, list[int]]:
    """The same through render -> tokens-only generate -> derender (chunk by chunk when
    streaming)."""
    status, gen = post(render_url, body, RENDER)
    assert status == 200, gen
    assert all(isinstance(t, int) for t in gen["token_ids"])
    if not body["stream"]:
        status, out = post(engine_url, gen, GENERATE)
        assert status == 200, out
        status, r = post(
            render_url,
            {"generate_response": out, "prompt_tokens": gen["token_ids"], "chat_request": body},
            DERENDER,
        )
        assert status == 200, r
        assert r["usage"]["prompt_tokens"] == len(gen["token_ids"])
        c = r["choices"][0]
        return c["message"], c["finish_reason"], c["token_ids"]
    state, choices = None, []
    for chunk in post_stream(engine_url, gen, GENERATE):
        req = {"generate_chunk": chunk, "stream_state": state}
        if state is None:
            req["chat_request"] = body  # only the first chunk carries it
        status, r = post(render_url, req, DERENDER)
        assert status == 200, r
        state = r["stream_state"]
        assert len(str(state)) < 1000  # the state stays small: no history, no prompt
        choices.append(r["chunk"]["choices"][0])
    return (
        merged([c["delta"] for c in choices]),
        choices[-1]["finish_reason"],
        [t for c in choices for t in c["token_ids"]],
    )


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streaming"])
@pytest.mark.parametrize("seed", range(len(TRICKY)))
def test_render_generate_derender_equals_the_engines_own_chat(servers, seed, stream):
    engine_url, render_url, _ = servers
    body = chat_body(seed, stream)
    own = own_chat(engine_url, body)
    assert own == via_render_tier(engine_url, render_url, body)
    expected = parse(TRICKY[seed])  # the script's text, parsed whole
    msg, reason, _ = own
    assert msg == message(expected)
    assert reason == ("tool_calls" if expected.tool_calls else "stop")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streaming"])
def test_round_trip_with_the_models_own_sampled_output(servers, stream):
    """No script: the model samples (seeded) among markup pieces and multi-byte bytes."""
    engine_url, render_url, engine = servers
    pieces = engine.frontend.tokenizer.encode(
        '<think></think><tool_call>{"name": "f"}</tool_call> é漢🙂'
    )
    body = chat_body(
        10_000, stream, temperature=1.0, max_tokens=60, logit_bias={str(t): 30 for t in set(pieces)}
    )
    own = own_chat(engine_url, body)
    assert len(own[2]) == 60 and set(own[2]) <= set(pieces)
    assert own == via_render_tier(engine_url, render_url, body)


def test_without_tools_in_the_request_tool_markup_stays_content(servers):
    engine_url, render_url, _ = servers
    body = chat_body(2, False, tools=None)
    own = own_chat(engine_url, body)
    assert own == via_render_tier(engine_url, render_url, body)
    assert own[0]["tool_calls"] == [] and "<tool_call>" in own[0]["content"]
    assert own[0]["reasoning"] == "hmm" and own[1] == "stop"


@pytest.mark.parametrize("seed", range(len(TRICKY)))
def test_streaming_derender_over_http_equals_whole_for_every_two_way_split(servers, seed):
    _, render_url, engine = servers
    ids = engine.frontend.tokenizer.encode(TRICKY[seed])
    body = chat_body(seed, False)
    status, whole = post(
        render_url,
        {
            "generate_response": {"token_ids": ids, "finish_reason": "stop"},
            "prompt_tokens": 1,
            "chat_request": body,
        },
        DERENDER,
    )
    assert status == 200, whole
    for cut in range(len(ids) + 1):
        state, choices = None, []
        for k, piece in enumerate((ids[:cut], ids[cut:])):
            chunk = {"request_id": "r", "token_ids": piece, "finish_reason": "stop" if k else None}
            status, r = post(
                render_url,
                {"generate_chunk": chunk, "stream_state": state, "chat_request": body},
                DERENDER,
            )
            assert status == 200, r
            state = r["stream_state"]
            choices.append(r["chunk"]["choices"][0])
        assert merged([c["delta"] for c in choices]) == whole["choices"][0]["message"], cut
        assert choices[-1]["finish_reason"] == whole["choices"][0]["finish_reason"]
