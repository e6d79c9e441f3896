"""The project's proxy speaks vLLM's bidirectional protocol in front of vLLM instances: the
decoder's answer (or its stream's last chunk) carries its kv_transfer_params, and the next
turn of the same conversation sends them to the prefiller with do_remote_decode, the
decoder's side-channel host (the proxy's view of the decoder where that is loopback);
conversation_id never reaches the instances.
vLLM's prefiller and decoder are played by two small apps that record what they get."""

import json
import urllib.request

import pytest
from aiohttp import web

from engine.fronts.proxy import PREFILL_KV_PARAMS, Proxy
from tests.serving.helpers import post, running_app

pytestmark = pytest.mark.integration

D_KEPT = {"do_remote_prefill": False, "do_remote_decode": False, "remote_block_ids": [[7, 8]],
          "remote_engine_id": "decoder-engine", "remote_request_id": "d-1",
          "remote_host": "10.9.9.9", "remote_port": 5601, "tp_size": 1}
P_HANDED = {"do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": [[1, 2]],
            "remote_engine_id": "prefill-engine", "remote_request_id": "p-1",
            "remote_host": "127.0.0.1", "remote_port": 5600, "tp_size": 1}


def vllm_instances(seen: dict, kept: dict = D_KEPT) -> tuple[web.Application, web.Application]:
    async def prefill(request):
        seen["prefill"].append(await request.json())
        return web.json_response({"choices": [{"message": {"content": "x"}}],
                                  "kv_transfer_params": P_HANDED})

    async def decode(request):
        body = await request.json()
        seen["decode"].append(body)
        if not body.get("stream"):
            return web.json_response({"choices": [{"message": {"content": "hello"}}],
                                      "kv_transfer_params": kept})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for chunk in ({"choices": [{"delta": {"content": "hel"}}]},
                      {"choices": [{"delta": {"content": "lo"}, "finish_reason": "stop"}],
                       "kv_transfer_params": kept}):
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def health(request):
        return web.json_response({"status": "ok"})

    p, d = web.Application(), web.Application()
    p.add_routes([web.post("/v1/chat/completions", prefill), web.get("/health", health)])
    d.add_routes([web.post("/v1/chat/completions", decode), web.get("/health", health)])
    return p, d


def chat(url: str, cid: str | None, stream: bool) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    if cid:
        body["conversation_id"] = cid
    if not stream:
        status, _ = post(url, body, "/v1/chat/completions")
        assert status == 200
        return
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert b"[DONE]" in r.read()


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("said,reached", [("10.9.9.9", "10.9.9.9"), ("localhost", "127.0.0.1")])
def test_the_next_turn_sends_the_decoders_kept_blocks_to_the_prefiller(stream, said, reached):
    seen = {"prefill": [], "decode": []}
    p_app, d_app = vllm_instances(seen, {**D_KEPT, "remote_host": said})
    with running_app(p_app) as p, running_app(d_app) as d, \
            running_app(Proxy([d], [p], bidirectional=True).app) as url:
        chat(url, "conv-1", stream)  # turn 1: nothing kept yet
        chat(url, "conv-1", stream)  # turn 2: the decoder's blocks go to the prefiller
        chat(url, "conv-2", stream)  # another conversation: nothing of conv-1's
        chat(url, None, stream)  # no conversation: plain P/D
    first, second, other, plain = (b["kv_transfer_params"] for b in seen["prefill"])
    assert first == {**PREFILL_KV_PARAMS} and other == first and plain == first
    assert second == {**D_KEPT, "remote_host": reached, "do_remote_decode": True,
                      "do_remote_prefill": False}
    # the decoder got the prefill's handover; nobody got conversation_id
    assert all(b["kv_transfer_params"]["remote_engine_id"] == "prefill-engine"
               for b in seen["decode"])
    assert not any("conversation_id" in b for b in seen["prefill"] + seen["decode"])


def test_without_bidirectional_nothing_is_kept():
    seen = {"prefill": [], "decode": []}
    p_app, d_app = vllm_instances(seen)
    with running_app(p_app) as p, running_app(d_app) as d, \
            running_app(Proxy([d], [p]).app) as url:
        chat(url, "conv-1", True)
        chat(url, "conv-1", True)
    assert [b["kv_transfer_params"] for b in seen["prefill"]] == [PREFILL_KV_PARAMS] * 2
