"""A model whose vocabulary is larger than its tokenizer's (padded rows, as Qwen's): its own
IDs derender (to nothing where the tokenizer has no token) on the engine and the render
server alike; IDs past the model's vocabulary are refused. A failure while streaming ends
the stream with an error event and aborts the request."""

import dataclasses
import json
import time

import pytest

from engine.core.config import PRESETS
from engine.fronts.render_server import RenderServer
from engine.render.frontend import FrontendConfig
from tests.serving.helpers import post, post_stream, running_app, running_server
from tests.serving.test_render_tier import CHAT, DERENDER, chat_body, own_chat, via_render_tier

pytestmark = pytest.mark.integration  # starts servers or runs the CLI

VOCAB = 1024  # the bundled tokenizer has 512


@pytest.fixture(scope="module")
def padded_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("padded")
    cfg = dataclasses.asdict(PRESETS["tiny"]) | {
        "vocab_size": VOCAB,
        "architectures": ["LlamaForCausalLM"],
        "torch_dtype": "float32",
    }
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def test_ids_past_the_tokenizer_but_inside_the_model_derender_alike(padded_model):
    with (
        # "tiny": the served name both sides use
        running_server(model=padded_model, served_model="tiny") as (engine_url, _engine),
        running_app(RenderServer(FrontendConfig(model_dir=padded_model), "tiny").app) as render,
    ):
        for stream in (False, True):
            body = chat_body(3, stream, temperature=1.0, max_tokens=40, ignore_eos=True)
            own = own_chat(engine_url, body)
            assert len(own[2]) == 40 and max(own[2]) >= 512  # the model uses its padded rows
            assert via_render_tier(engine_url, render, body) == own
        status, r = post(
            render,
            {
                "generate_response": {"token_ids": [5, VOCAB - 1]},
                "prompt_tokens": 1,
                "chat_request": body,
            },
            DERENDER,
        )
        assert status == 200, r
        status, r = post(
            render,
            {"generate_response": {"token_ids": [VOCAB]}, "prompt_tokens": 1, "chat_request": body},
            DERENDER,
        )
        assert status == 400 and f"size {VOCAB}" in r["error"]["message"]


def test_a_failure_mid_stream_ends_it_with_an_error_event_and_aborts_the_request():
    with running_server() as (url, server):
        calls = {"n": 0}
        real = server.frontend.derender_chunk

        def failing(*args):
            calls["n"] += 1
            if calls["n"] == 3:
                raise RuntimeError("injected")
            return real(*args)

        server.frontend.derender_chunk = failing
        events = post_stream(url, chat_body(0, True, max_tokens=200, ignore_eos=True), CHAT)
        assert "injected" in events[-1]["error"]["message"] and len(events) == 3
        bm = server.engine.block_manager
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and server.engine.has_unfinished():
            time.sleep(0.05)
        assert not server.engine.has_unfinished() and bm.num_free_blocks == bm.num_blocks
