"""The render front's failures: each answered the OpenAI way, none a hang. An upstream that
is down is a 502; an engine's refusal reaches the client as the engine gave it; a stream
the engines cut short ends in an error event, never a clean [DONE] alone."""

import json
import urllib.request

import aiohttp
import pytest
from aiohttp import web

from engine.fronts.render_front import RenderFront
from engine.fronts.render_server import RenderServer
from engine.processes.children import free_port
from engine.render.frontend import FrontendConfig
from tests.serving.helpers import post, running_app, running_server

pytestmark = pytest.mark.integration  # starts servers

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
        "temperature": 0}
NOWHERE = f"http://127.0.0.1:{free_port()}"  # nothing listens there


@pytest.fixture(scope="module")
def render():
    with running_app(RenderServer(FrontendConfig(model_dir="tiny"), "tiny").app) as url:
        yield url


def events(url: str, body: dict) -> list[bytes]:
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(
        {**body, "stream": True}).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return [line[5:].strip() for line in r if line.startswith(b"data:")]


@pytest.mark.parametrize("down", ["render", "engines"])
def test_an_upstream_that_is_down_is_a_502(render, down):
    with running_server() as (engine, _):
        front = RenderFront(NOWHERE if down == "render" else render,
                            NOWHERE if down == "engines" else engine)
        with running_app(front.app) as url:
            status, out = post(url, CHAT, "/v1/chat/completions")
            assert status == 502 and out["error"]["type"] == "upstream_error", out
            if down == "engines":
                status, out = post(url, {"model": "tiny", "prompt": "x"}, "/v1/completions")
                assert status == 502 and out["error"]["code"] == 502


def test_an_engines_refusal_reaches_the_client_as_given(render):
    with running_server() as (engine, _), running_app(RenderFront(render, engine).app) as url:
        status, out = post(url, {**CHAT, "max_tokens": 10**9}, "/v1/chat/completions")
        assert status == 400 and out["error"]["type"] == "invalid_request_error", out


def test_a_stream_cut_short_ends_in_an_error_event(render):
    async def cut(request):  # one chunk, then the connection ends without [DONE]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chunk = {"request_id": "g1", "token_ids": [40], "finish_reason": None}
        await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        return resp

    engines = web.Application()
    engines.add_routes([web.post("/inference/v1/generate", cut)])
    with running_app(engines) as engine, running_app(RenderFront(render, engine).app) as url:
        got = events(url, CHAT)
    assert json.loads(got[0])["choices"][0]["token_ids"] == [40]
    assert json.loads(got[1])["error"]["code"] == 502 and "without [DONE]" in got[1].decode()
    assert got[-1] == b"[DONE]"


def test_a_passthrough_stream_that_breaks_ends_in_an_error_event(render):
    async def broken(request):  # one event, then the connection drops mid-body
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices": [{"text": "a"}]}\n\n')
        request.transport.close()
        return resp

    engines = web.Application()
    engines.add_routes([web.post("/v1/completions", broken)])
    with running_app(engines) as engine, running_app(RenderFront(render, engine).app) as url:
        req = urllib.request.Request(url + "/v1/completions", data=json.dumps(
            {"model": "tiny", "prompt": "x", "stream": True}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            got = [line[5:].strip() for line in r if line.startswith(b"data:")]
    assert json.loads(got[0])["choices"][0]["text"] == "a"
    err = json.loads(got[1])["error"]
    assert err["code"] == 502 and err["message"].startswith("the engines failed mid-stream"), err


def test_render_servers_and_engines_are_taken_in_turn(render):
    """Two render servers and two engines, each engine's answer marked: four chats alternate
    between the engines and use both render servers, each answer derendered whole."""
    seen = {"engine": [], "render": []}

    def engine_app(mark: int) -> web.Application:
        async def generate(request):
            seen["engine"].append(mark)
            return web.json_response({"request_id": "g", "token_ids": [40 + mark],
                                      "finish_reason": "length"})
        app = web.Application()
        app.add_routes([web.post("/inference/v1/generate", generate)])
        return app

    async def counted(request):  # a second render server: the first one, counted
        seen["render"].append(request.path)
        body = await request.read()
        async with aiohttp.ClientSession() as s, s.post(
                render + request.path, data=body,
                headers={"Content-Type": "application/json"}) as r:
            return web.Response(body=await r.read(), status=r.status,
                                content_type="application/json")

    proxy = web.Application()
    proxy.add_routes([web.post("/v1/chat/completions/render", counted),
                      web.post("/v1/chat/completions/derender", counted)])
    with running_app(engine_app(0)) as e0, running_app(engine_app(1)) as e1, \
            running_app(proxy) as r1, running_app(RenderFront([render, r1], [e0, e1]).app) as url:
        outs = [post(url, CHAT, "/v1/chat/completions") for _ in range(4)]
    assert [s for s, _ in outs] == [200] * 4
    assert seen["engine"] == [0, 1, 0, 1]
    assert [o["choices"][0]["token_ids"] for _, o in outs] == [[40], [41], [40], [41]]
    assert len(seen["render"]) == 4  # half of the 8 render and derender calls


def keeps_nothing_app(render: str, seen: list[tuple[bool, int, int]]) -> web.Application:
    """The render server at `render` as vLLM's with a tool or reasoning parser: a later
    chunk's derender without the chat request is a 400. Each such call is noted in `seen`:
    (the chat request sent, prompt IDs sent, bytes)."""
    async def stateless(request):
        raw = await request.read()
        body = json.loads(raw)
        if request.path.endswith("/derender") and body.get("stream_state"):
            seen.append((body.get("chat_request") is not None,
                         len(body.get("prompt_token_ids") or []), len(raw)))
            if body.get("chat_request") is None:
                return web.json_response({"error": {
                    "message": "chat_request is required when a tool or reasoning parser is "
                               "configured because plain detokenization would leak raw parser "
                               "markup into content.", "type": "BadRequestError", "code": 400}},
                    status=400)
        async with aiohttp.ClientSession() as s, s.post(render + request.path, json=body) as r:
            return web.json_response(await r.json(), status=r.status)

    app = web.Application()
    app.router.add_post("/v1/chat/completions/render", stateless)
    app.router.add_post("/v1/chat/completions/derender", stateless)
    return app


def test_a_render_server_that_keeps_nothing_gets_the_request_with_every_chunk(render):
    """As vLLM's render server with a tool or reasoning parser: a later chunk's derender
    without the chat request is a 400; the front then sends it, the prompt whole, with every
    chunk, and the client's stream is the one a stateful render server gives."""
    seen: list[tuple[bool, int, int]] = []
    app = keeps_nothing_app(render, seen)
    with running_server() as (engine, _), running_app(app) as keeps_nothing:
        plain, front = RenderFront(render, engine), RenderFront(keeps_nothing, engine)
        with running_app(plain.app) as a, running_app(front.app) as b:
            body = {**CHAT, "max_tokens": 6, "ignore_eos": True}
            first, second = events(a, body), events(b, body)
            assert [json.loads(e)["choices"] for e in first[:-1]] == \
                   [json.loads(e)["choices"] for e in second[:-1]]
            assert seen[0][0] is False and all(whole for whole, _, _ in seen[1:])
            assert seen[-1][1] > 8  # the prompt whole, not its tail
            before = len(seen)
            assert events(b, body)[-1] == b"[DONE]"
            # per request: the next one is not sent whole until its server asks again
            assert seen[before][0] is False and all(whole for whole, _, _ in seen[before + 1:])


def test_what_a_request_resends_to_its_render_servers_is_bounded(render, monkeypatch):
    """A render server that keeps nothing makes the front resend the chat and the whole
    prompt with every chunk: one request's resending stops at MAX_RESENT_BYTES with an error
    event (a 120 KB chat of 800 chunks sent 400 MB upstream), and the next request is
    served as the first was."""
    from engine.fronts import render_front

    monkeypatch.setattr(render_front, "MAX_RESENT_BYTES", 4000)
    sent: list[tuple[bool, int, int]] = []
    app = keeps_nothing_app(render, sent)
    long_chat = {**CHAT, "messages": [{"role": "user", "content": "word " * 400}],
                 "max_tokens": 40, "ignore_eos": True}
    with running_server() as (engine, _), running_app(app) as keeps_nothing, \
            running_app(RenderFront(keeps_nothing, engine).app) as url:
        for _ in range(2):
            sent.clear()
            out = events(url, long_chat)
            assert out[-1] == b"[DONE]" and b"MiB" in out[-2]
            assert sum(n for _, _, n in sent) < 3 * 4000 + 2000  # stopped at the bound
