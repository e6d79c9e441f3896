"""The front door of a topology: vLLM's P/D proxy protocol, or round-robin over replicas.

disagg: prefill leg (non-streaming, max_tokens=1, do_remote_decode) to the next prefiller,
then the request with the returned kv_transfer_params to the next decoder, streamed back as
it comes. collocated: each request whole to the next replica. Upstream failures become
OpenAI-style errors, never a hang; a tier that is down is served around (the FALLBACK
header says so). Bidirectional transfer speaks the bundled engine's protocol (a header
names the decoder's kept turn) and vLLM's (its decoder's last chunk carries
kv_transfer_params for the next turn's prefiller, as vLLM's disagg_proxy_multiturn.py
does). `advisor proxy` runs it.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import sys
import urllib.parse
import uuid
from collections.abc import Mapping
from typing import Any, cast

import aiohttp
import uvloop
from aiohttp import web

from engine.core import deployment
from engine.core.config import DEFAULT_BODY_BYTES
from engine.fronts.liveness import Impostor, Liveness, UpstreamDown
from engine.fronts.recent import Recent
from engine.render.protocol import RequestError, error_body, parse_json
from engine.serve.http_app import (
    KEPT_HEADER,
    Upstream,
    add_api_key_flag,
    add_max_body_flag,
    application,
    health,
    run_app,
    server_key,
)
from engine.serve.sse import EventTail, error_event, relay

PREFILL_KV_PARAMS = {"do_remote_decode": True, "do_remote_prefill": False,
                     "remote_engine_id": None, "remote_block_ids": None, "remote_host": None,
                     "remote_port": None}
# NOTE: set on a response served around a down tier (decoder-prefills, prefiller-decodes)
FALLBACK = "X-Advisor-Fallback"
CONVERSATION = "X-Conversation-Id"
MAX_CONVERSATION_ID = 256
LOOPBACK = ("localhost", "127.0.0.1", "::1")
# NOTE: a decoder keeps a turn's KV 480 s by default (as vLLM does): later, the proxy's
# note of where is worth nothing
KEPT_TTL_S = 480.0
KEPT_BYTES = 64 << 20  # the notes kept, all conversations together, in memory
STREAMING = web.RequestKey("streaming", web.StreamResponse)  # a response already under way


def _err(message: str, status: int, err_type: str = "upstream_error") -> web.Response:
    return web.json_response(error_body(message, err_type, status), status=status)


class Proxy:
    """Round-robin over prefillers and decoders (disagg) or replicas (collocated)."""

    def __init__(self, decode_urls: list[str], prefill_urls: list[str] | None = None,
                 bidirectional: bool = False, max_body: int = DEFAULT_BODY_BYTES) -> None:
        self.prefill_urls, self.decode_urls = prefill_urls or [], decode_urls
        # bidirectional KV: conversation -> where its decoder kept the last turn, and in
        # whose protocol ("engine" or "vllm")
        self.bidirectional = bidirectional
        self._kept: Recent[tuple[str, str]] = Recent(
            KEPT_TTL_S, KEPT_BYTES, lambda cid, kept: sum(map(sys.getsizeof, (cid, kept, kept[1]))))
        self._prefill = itertools.cycle(self.prefill_urls) if self.prefill_urls else None
        self._decode = itertools.cycle(decode_urls)
        self.upstream = Upstream()
        self.liveness = Liveness(self.prefill_urls + decode_urls, deployment.current())
        self.app = application(max_body)
        self.app.add_routes([
            web.get("/health", self.health), web.get("/v1/models", self.models),
            web.get("/metrics", self.metrics),
            web.post("/v1/completions", self.handle),
            web.post("/v1/chat/completions", self.handle),
            web.post("/inference/v1/generate", self.handle),
        ])
        self.app.on_startup.append(self._start)
        self.app.on_cleanup.append(self._stop)

    async def _start(self, _app: web.Application) -> None:
        self.upstream.open([self.liveness.trace()])
        self.liveness.start()

    async def _stop(self, _app: web.Application) -> None:
        await self.liveness.close()
        await self.upstream.close()

    async def health(self, request: web.Request) -> web.Response:
        """Up once an instance is (it is open without the key; the instances stay
        unnamed): a client told it is healthy earlier would get 503s."""
        if not self.liveness.serving():
            return _err("no instance is up yet", 503)
        return health(request)

    async def models(self, _req: web.Request) -> web.Response:
        try:
            async with self.upstream.http.get(self.decode_urls[0] + "/v1/models") as r:
                return web.Response(body=await r.read(), status=r.status,
                                    content_type="application/json")
        except aiohttp.ClientError as e:
            return _err(f"upstream unreachable: {e}", 502)

    async def metrics(self, _req: web.Request) -> web.Response:
        """Every decoder's (or replica's) Prometheus text, one after the other, each under a
        comment naming it: a client sums the samples (the KV-transfer ones live there)."""
        parts = []
        for url in self.decode_urls:
            try:
                async with self.upstream.http.get(url + "/metrics") as r:
                    parts.append(f"# instance {url}\n" + (await r.text()))
            except aiohttp.ClientError as e:
                return _err(f"upstream {url} unreachable: {e}", 502)
        return web.Response(text="".join(parts), content_type="text/plain")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        rid = request.headers.get("X-Request-Id") or uuid.uuid4().hex
        headers = {"X-Request-Id": rid}
        try:
            body = parse_json(await request.read())
            cid = _conversation(body, request.headers)
        except RequestError as e:
            return web.json_response(e.body(), status=e.status, headers=headers)
        body.pop("conversation_id", None)  # the proxy's, as in vLLM's: never the engines'
        if cid:
            headers[CONVERSATION] = cid
        if self._prefill is not None:
            prefilled = await self._prefill_leg(path, body, headers)
            if isinstance(prefilled, web.Response):
                return prefilled
            body = prefilled
            if self.bidirectional and cid:  # the decoder keeps this turn for the next
                body = {**body, "kv_transfer_params": {
                    **(body.get("kv_transfer_params") or {}), "keep_as": cid}}
        # NOTE: a second try only when the instance refused or reset the connection, or went
        # down before anything reached the client
        for _ in range(2):
            base, leg, leg_headers = self._decoder(body, headers)
            if base is None:
                return _err("no instance is up to decode", 503)
            try:
                async with self.liveness.guard(base):
                    return await self._forward(request, base, path, leg, leg_headers)
            except aiohttp.ClientOSError:
                self.liveness.lost(base)
            except Impostor:
                pass  # out of the rotation already: the next try goes elsewhere
            except UpstreamDown as e:
                resp = request.get(STREAMING)
                if resp is not None:
                    await resp.write(error_event(f"decode instance failed mid-stream: {e}"))
                    return cast(web.StreamResponse, resp)
        return _err("no instance that is up accepted the request", 502)

    def _decoder(self, body: dict[str, Any], headers: dict[str, Any]) -> tuple[str | None,
                 dict[str, Any], dict[str, Any]]:
        """(the next live decoder, body, headers), or with every decoder down a live
        prefiller told to decode too (degraded, still up)."""
        base = self.liveness.pick_for(headers.get(CONVERSATION), self.decode_urls, self._decode)
        if base is not None or self._prefill is None:
            return base, body, headers
        base = self.liveness.pick(self._prefill, len(self.prefill_urls))
        return base, {**body, "kv_transfer_params": {"do_remote_decode": False}}, \
            {**headers, FALLBACK: "prefiller-decodes"}

    async def _prefill_leg(self, path: str, body: dict[str, Any], headers: dict[str,
                           Any]) -> dict[str, Any] | web.Response:
        """`body` with the kv_transfer_params of its prefill on the next live prefiller, or
        the prefiller's own non-200 answer. With no prefiller up, or the one picked dying on
        it, `body` without them: the decoder then prefills itself (slower, never refused)."""
        cid = headers.get(CONVERSATION)
        assert self._prefill is not None  # only a front with prefillers has a prefill leg
        base = self.liveness.pick_for(cid, self.prefill_urls, self._prefill)
        if base is None:
            headers[FALLBACK] = "decoder-prefills"
            return body
        leg = {k: v for k, v in body.items() if k != "stream_options"}
        leg.update(stream=False, max_tokens=1, kv_transfer_params=dict(PREFILL_KV_PARAMS),
                   return_token_ids=True)
        noted = self._kept.pop(cid) if self.bidirectional and cid else None
        if noted is not None:  # pull the last turn back, reuse it
            style, kept = noted[0], json.loads(noted[1])
            if style == "vllm":
                leg["kv_transfer_params"] = {**kept, "do_remote_decode": True,
                                             "do_remote_prefill": False}
            else:
                leg["kv_transfer_params"]["reuse"] = kept
        if "max_completion_tokens" in leg:
            leg["max_completion_tokens"] = 1
        if isinstance(leg.get("sampling_params"), dict):  # tokens-only requests nest them
            leg["sampling_params"] = {**leg["sampling_params"], "max_tokens": 1}
        sent = {**headers, **self.liveness.nonce()}
        try:
            async with self.liveness.guard(base), self.upstream.http.post(
                    base + path, json=leg, headers=sent) as r:
                self.liveness.ours(base, sent, r)
                data = await r.read()
                if r.status != 200:
                    return web.Response(body=data, status=r.status, headers=headers,
                                        content_type="application/json")
                return {**body, "kv_transfer_params": _handed_over(json.loads(data))}
        except TimeoutError as e:  # a prefiller that is slow (busy, a huge body) is not gone
            return _err(f"prefill instance timed out: {e}", 502)
        except (aiohttp.ClientConnectionError, UpstreamDown, Impostor) as e:
            # NOTE: the prefiller is gone (never reached, dropped the connection, or not
            # ours): the request, idempotent, goes to the decoder; on no other failure
            if isinstance(e, aiohttp.ClientConnectorError):
                self.liveness.lost(base)
            headers[FALLBACK] = "decoder-prefills"
            return body
        except (aiohttp.ClientError, ValueError) as e:
            return _err(f"prefill instance failed: {type(e).__name__}: {e}", 502)

    async def _forward(self, request: web.Request, base: str, path: str, body: dict[str, Any],
                       headers: dict[str, Any]) -> web.StreamResponse:
        url, sent = base + path, {**headers, **self.liveness.nonce()}
        try:
            upstream = await self.upstream.http.post(url, json=body, headers=sent)
        except (aiohttp.ClientOSError, Impostor):
            raise  # nothing (of ours) listens there: the caller tries another instance
        except (TimeoutError, aiohttp.ClientError) as e:
            return _err(f"decode instance unreachable: {e}", 502)
        cid = headers.get(CONVERSATION) if self.bidirectional else None
        async with upstream:
            self.liveness.ours(base, sent, upstream)  # before anything reaches the client
            kept = upstream.headers.get(KEPT_HEADER) if cid else None
            self._remember_kept(cid, kept)
            cid = None if kept else cid  # the bundled engine's header said it all
            if not body.get("stream") or upstream.status != 200:
                try:
                    data = await upstream.read()
                except (TimeoutError, aiohttp.ClientError) as e:
                    return _err(f"decode instance failed: {e}", 502)
                if cid and upstream.status == 200 and b"kv_transfer_params" in data:
                    self._remember_vllm(cid, _loads(data), url)
                return web.Response(
                    body=data,
                    status=upstream.status,
                    headers=headers,
                    content_type="application/json",
                )
            resp = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream"})
            await resp.prepare(request)
            request[STREAMING] = resp  # headers are out: a failure is an error event now
            tail = EventTail(b"kv_transfer_params") if cid else None
            await relay(upstream, resp, "decode instance", tail)
            if tail is not None and cid:
                self._remember_vllm(cid, tail.found, url)
            return resp

    def _remember_kept(self, cid: str | None, kept: str | None) -> None:
        """Where the bundled engine's decoder kept this conversation's turn (its header)."""
        if cid and kept:
            self._remember(cid, "engine", _loads(kept.encode()))

    def _remember_vllm(self, cid: str, answer: dict[str, Any] | None, url: str) -> None:
        """Where vLLM's decoder kept this turn: the kv_transfer_params of its answer (or of
        its stream's last chunk). Its side-channel host as it says it, unless that is
        loopback (vLLM's default): then the decoder's host as the proxy reaches it."""
        params = (answer or {}).get("kv_transfer_params")
        if isinstance(params, dict) and params.get("remote_block_ids"):
            host = params.get("remote_host")
            if not isinstance(host, str) or host in LOOPBACK:
                host = urllib.parse.urlsplit(url).hostname
            self._remember(cid, "vllm", {**params, "remote_host": host})

    def _remember(self, cid: str, style: str, params: object) -> None:
        if not isinstance(params, dict):
            return
        self._kept.put(cid, (style, json.dumps(params)))


def _loads(data: bytes) -> dict[str, Any] | None:
    try:
        out = json.loads(data)
    except ValueError:
        return None
    return out if isinstance(out, dict) else None


def _conversation(body: dict[str, Any], headers: Mapping[str, str]) -> str | None:
    """The conversation a request belongs to: the X-Conversation-Id header, else a
    `conversation_id` body field (vLLM's bidirectional proxy keys turns by it); RequestError
    (400) for one that is no short printable ASCII string, since it goes on into headers to
    the instances, whose parsers would answer a bare 400 of their own."""
    cid = headers.get(CONVERSATION) or body.get("conversation_id")
    if cid is None or cid == "":
        return None
    if not (isinstance(cid, str) and len(cid) <= MAX_CONVERSATION_ID and cid.isascii()
            and cid.isprintable()):
        raise RequestError(f"a conversation id is printable ASCII of at most "
                           f"{MAX_CONVERSATION_ID} characters", "conversation_id")
    return cid


def _handed_over(prefilled: dict[str, Any]) -> dict[str, Any] | None:
    """The prefill answer's kv_transfer_params, with the prompt's token IDs in them (from
    return_token_ids: top level for chat, in the choice for completions) so that the
    decoder does not render and tokenize the prompt again."""
    params = prefilled.get("kv_transfer_params")
    choices = prefilled.get("choices") or [{}]
    ids = prefilled.get("prompt_token_ids") or (choices[0] or {}).get("prompt_token_ids")
    if isinstance(params, dict) and ids:
        return {**params, "prompt_token_ids": ids}
    return params


def serve(decode: list[str], prefill: list[str] | None = None, bidirectional: bool = False,
          host: str = "127.0.0.1", port: int = 8192, api_key: str | None = None,
          max_body: int = DEFAULT_BODY_BYTES) -> None:
    """Run the proxy in front of `prefill` and `decode` instances (only `decode`: a
    round-robin front over replicas) until interrupted or sent SIGTERM."""
    proxy = Proxy(decode, prefill, bidirectional, max_body)
    with contextlib.suppress(KeyboardInterrupt):
        # uvloop: 15% less CPU per relayed chunk than asyncio's loop (benchmarks/proxy_cpu.py)
        uvloop.run(run_app(proxy.app, host, port, "proxy", api_key))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="P/D proxy (with --prefill) or round-robin front.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8192)
    ap.add_argument("--prefill", nargs="*", default=[], help="prefiller base URLs")
    ap.add_argument("--decode", nargs="+", required=True, help="decoder (or replica) base URLs")
    ap.add_argument("--bidirectional", action="store_true",
                    help="P/D: prefillers pull a conversation's earlier turns back from its "
                    "decoder and compute only the new tokens")
    add_max_body_flag(ap)
    ap.add_argument("--internal", action="store_true",
                    help="serve only the deployment's own processes: require its instance key")
    add_api_key_flag(ap)
    a = ap.parse_args(argv)
    serve(a.decode, a.prefill, a.bidirectional, a.host, a.port, server_key(a, a.internal),
          a.max_body_bytes)


if __name__ == "__main__":
    main()
