"""Running an aiohttp application until cancelled (engine servers, the proxy, the render
server), optionally behind an API key."""

from __future__ import annotations

import argparse
import asyncio
import gc
import hmac
import os
import signal
import socket
from typing import Any

import aiohttp
from aiohttp import web, web_protocol
from aiohttp.typedefs import Handler, Middleware

from engine.core import deployment
from engine.core.config import API_KEY_ENV, DEFAULT_BODY_BYTES
from engine.render.protocol import error_body
from engine.serve import connections

# a decoder keeping a conversation's turn says where, as kv_transfer_params (JSON); only the
# proxy reads it, and never passes it on to clients
KEPT_HEADER = "X-Advisor-Kept-KV"
PROTECTED = ("/v1/", "/inference/")  # /health and /metrics stay open, as in vLLM
# inside a deployment, a front sends a nonce with each request to an instance, and the
# instance answers with its proof of holding the secret (engine.core.deployment.proof)
NONCE_HEADER, PROOF_HEADER = "X-Advisor-Nonce", "X-Advisor-Proof"
OFFLOAD_BYTES = 64 << 10  # a body past this is parsed and tokenized off the event loop


def add_api_key_flag(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--api-key", default=None,
                    help=f"require 'Authorization: Bearer KEY' on {' and '.join(PROTECTED)} "
                         f"(default: ${API_KEY_ENV}, else none)")


def add_max_body_flag(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--max-body-bytes", type=int, default=DEFAULT_BODY_BYTES,
                    help="a larger request body is a 413 before it is read whole")


def api_key_of(args: argparse.Namespace) -> str | None:
    return args.api_key or os.environ.get(API_KEY_ENV) or None


def require_api_key(key: str) -> Middleware:
    """Middleware: a 401 with an OpenAI-style body unless the request carries the key."""
    want = f"Bearer {key}".encode()

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith(PROTECTED):
            got = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(got, want):
                return web.json_response(
                    error_body("invalid or missing API key", "authentication_error", 401),
                    status=401)
        return await handler(request)

    return check


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own refusals (no such route 404, wrong method 405, body too large 413) as
    OpenAI-style error bodies, as every other error here is."""
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        body = error_body(f"{e.reason}: {request.method} {request.path}",
                          "invalid_request_error" if e.status < 500 else "server_error",
                          e.status)
        allow = {"Allow": e.headers["Allow"]} if "Allow" in e.headers else None
        return web.json_response(body, status=e.status, headers=allow)


def application(max_body: int = DEFAULT_BODY_BYTES,
                *middlewares: Middleware) -> web.Application:
    """An app whose every refusal, aiohttp's own included, is an OpenAI-style error body,
    taking request bodies of up to `max_body` bytes (a larger one is a 413 before it is read
    whole)."""
    app = web.Application(client_max_size=max_body, middlewares=[json_errors, *middlewares])
    app.on_response_prepare.append(_prove)
    return app


def served_port(request: web.Request) -> int:
    """The port this server took the request on (its socket's, never what a header says)."""
    return request.transport.get_extra_info("sockname")[1] if request.transport else 0


async def _prove(request: web.Request, response: web.StreamResponse) -> None:
    nonce = request.headers.get(NONCE_HEADER)  # first: most responses carry none
    secret = deployment.current() if nonce else None
    if secret and nonce:
        response.headers[PROOF_HEADER] = deployment.proof(secret, nonce, served_port(request))


async def run_app(app: web.Application, host: str, port: int, banner: str,
                  api_key: str | None = None, sock: socket.socket | None = None) -> None:
    """Serve `app` on host:port (or on `sock`, listening already) until cancelled or sent
    SIGTERM (behind `api_key` if given). Handlers are cancelled when their client
    disconnects, which is what aborts an abandoned request."""
    if api_key:
        app.middlewares.append(require_api_key(api_key))
    # NOTE: aiohttp answers what its HTTP parser refuses (a bad request line or header, a
    # body past the limit while reading) before any middleware runs, as text/plain echoing
    # the request line; our servers answer those as every other error: OpenAI-style JSON
    web_protocol.RequestHandler.handle_error = _json_error  # type: ignore[method-assign]
    # a full collection over what torch and the model leave behind took ~150 ms, an ITL
    # spike to every request in flight, so the startup objects are frozen, as vLLM does
    gc.collect()
    gc.freeze()
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                           keepalive_timeout=connections.IDLE_S)
    await runner.setup()
    site = web.SockSite(runner, sock) if sock else web.TCPSite(runner, host, port)
    await site.start()
    assert runner.server is not None  # made by setup()
    watcher = asyncio.create_task(connections.watch(runner.server))
    print(f"{banner} ready on http://{host}:{sock.getsockname()[1] if sock else port}",
          flush=True)
    # NOTE: SIGTERM ends the server like Ctrl-C, so that the app's cleanup runs and a
    # prefiller unlinks its shared-memory KV cache itself
    stopped = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopped.set)
    try:
        await stopped.wait()
    finally:
        watcher.cancel()
        await runner.cleanup()


_aiohttp_error = web_protocol.RequestHandler.handle_error


def _json_error(self: web_protocol.RequestHandler, request: web.BaseRequest, status: int = 500,
                exc: BaseException | None = None, message: str | None = None
                ) -> web.StreamResponse:
    """aiohttp's own handling (it logs, and refuses where a response has begun), answered
    as an OpenAI-style error body that says what failed without echoing the request."""
    _aiohttp_error(self, request, status, exc, message)
    client = status < 500
    what = ("the request is not HTTP this server reads (its request line, headers or "
            "framing)" if client else "the server failed")
    out = web.json_response(error_body(what, "invalid_request_error" if client
                                       else "server_error", status), status=status)
    out.force_close()
    return out


def health(request: web.Request, **body: Any) -> web.Response:
    """/health: `body` with status ok; asked `?proof=NONCE` inside a deployment, also the
    proof that this process holds its secret (engine.core.deployment)."""
    secret, nonce = deployment.current(), request.query.get("proof")
    proof = {"proof": deployment.proof(secret, nonce, served_port(request))} \
        if secret and nonce else {}
    return web.json_response({"status": "ok", **body, **proof})


def server_key(args: argparse.Namespace, internal: bool = True) -> str | None:
    """The key a server requires: the user's API key (flag or environment), else, for a
    process that serves only its deployment (`internal`), the deployment's instance key."""
    secret = deployment.current()
    return api_key_of(args) or (deployment.instance_key(secret) if internal and secret
                                else None)


def upstream_headers() -> dict[str, str]:
    """What this process, a front, sends its deployment's instances (none outside one)."""
    return deployment.upstream_headers(deployment.current())


class Upstream:
    """A front's client session to its deployment's instances, open while its app runs:
    no cap on connections (streams whose clients stopped reading would hold aiohttp's
    default 100 and leave every later request waiting), the deployment's headers on each."""

    TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=120)

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def open(self, trace_configs: list[aiohttp.TraceConfig] | None = None) -> None:
        self._session = aiohttp.ClientSession(timeout=self.TIMEOUT, headers=upstream_headers(),
                                              connector=aiohttp.TCPConnector(limit=0),
                                              trace_configs=trace_configs)

    @property
    def http(self) -> aiohttp.ClientSession:
        """The session (opened when the app starts)."""
        assert self._session is not None, "the app has not started"
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

