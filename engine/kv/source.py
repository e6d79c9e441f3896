"""Prefill side of the KV side channel: serves held KV to decoders that pull it.

A threaded TCP server with blocking sockets (one thread per pull, so a large send never
waits on the event loop). Ops, one header frame each: {"op": "pull", "request_id", "mode":
NAME} -> KV header (+ the bytes, for tcp), NAME a connector (engine.kv.connectors); and
{"op": "release", "request_id"} -> {"ok": true}. Every op carries the request's "token" (an
HMAC of its id under a secret of this process, handed out in kv_transfer_params) and,
inside a deployment (engine.core.deployment), its "admit" key; the params handed out are
signed there. A connection that shows no valid request by its deadline, or is the oldest
such when every slot is taken, is dropped: strangers hold no slot a puller needs.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import secrets
import socket
import socketserver
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from engine.core import deployment
from engine.core.kv_layout import KVLayout
from engine.kv import connectors, frame
from engine.kv.connector import KVConnector
from engine.model.kv_cache import KVCache

# NOTE: the side channel is reachable by anything on the host, so what a peer says is bounded
# before it costs anything
REQUEST_MAX_BYTES = 64 << 10
TIMEOUT_S = 10.0
REQUEST_DEADLINE_S = 5.0  # for a whole request frame, however it trickles in
MAX_CONNECTIONS = 64

# (request_id) -> (block ids, prompt token ids) of held KV; renews its lease.
LendFn = Callable[[str], tuple[list[int], list[int]]]


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = 128  # the default 5 makes a burst of decoders wait on SYN retries


def kv_header(request_id: str, layout: KVLayout, token_ids: list[int], start: int = 0,
              **extra: Any) -> dict[str, Any]:
    """The header that describes a request's KV from token `start` on:
    [layers, 2, tokens - start, kv_heads, head_dim]."""
    n = len(token_ids) - start
    shape = [layout.num_layers, 2, n, layout.num_kv_heads, layout.head_dim]
    return {"request_id": request_id, "dtype": layout.dtype, "shape": shape,
            "nbytes": layout.bytes_per_token * n, "token_ids": token_ids, "start": start,
            **extra}


class KVSource:
    """Serves held KV blocks of `cache` over the side channel, by any connector a decoder
    asks for. `lend(request_id)` names the blocks; `release(request_id)` frees them."""

    def __init__(self, lend: LendFn, release: Callable[[str], None], cache: KVCache,
                 layout: KVLayout, host: str = "127.0.0.1", port: int = 0,
                 deployment_secret: bytes | None = None) -> None:
        self.lend, self.release, self.cache, self.layout = lend, release, cache, layout
        self.engine_id = uuid.uuid4().hex
        self._connectors: dict[str, KVConnector] = {}
        # NOTE: only who was handed a request's kv_transfer_params (its token) may pull or
        # release it; the secret never leaves this process
        self._secret = secrets.token_bytes(32)
        self._deployment = deployment_secret
        self._lock = threading.Lock()
        # open connections, oldest first: True once it showed a valid request
        self._open: OrderedDict[socket.socket, bool] = OrderedDict()
        source = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                if not source._admit(self.request):
                    return  # every slot busy with pullers of ours: closed at once
                try:
                    self.request.settimeout(TIMEOUT_S)
                    source._handle(self.request)
                finally:
                    with source._lock:
                        source._open.pop(self.request, None)

        self.server = _Server((host, port), Handler)
        self.host, self.port = self.server.server_address[:2]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def _admit(self, sock: socket.socket) -> bool:
        """A slot for `sock`: a free one, else the oldest connection yet to show a valid
        request is dropped for it; False when every slot holds a puller of ours."""
        with self._lock:
            if len(self._open) >= MAX_CONNECTIONS:
                stranger = next((s for s, ok in self._open.items() if not ok), None)
                if stranger is None:
                    return False
                del self._open[stranger]
                with contextlib.suppress(OSError):
                    stranger.shutdown(socket.SHUT_RDWR)
            self._open[sock] = False
            return True

    def _token(self, request_id: str) -> str:
        return hmac.new(self._secret, request_id.encode(), hashlib.sha256).hexdigest()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def transfer_params(self, request_id: str, block_ids: list[int]) -> dict[str, Any]:
        """The kv_transfer_params a prefill response carries (vLLM's field names), signed
        inside a deployment."""
        params = {"do_remote_prefill": True, "do_remote_decode": False,
                  "remote_engine_id": self.engine_id, "remote_request_id": request_id,
                  "remote_request_token": self._token(request_id),
                  "remote_block_ids": block_ids, "remote_host": self.host,
                  "remote_port": self.port, "tp_size": 1}
        return deployment.sign(self._deployment, params) if self._deployment else params

    def _connector(self, name: object) -> KVConnector:
        """One instance per connector for this source (it may keep per-cache state)."""
        if name not in connectors.NAMES:
            raise frame.FrameError(f"unknown connector {name!r}")
        with self._lock:
            if name not in self._connectors:
                self._connectors[name] = connectors.get(name)
            return self._connectors[name]

    # ---- connection handling (server threads) ----------------------------------------------------
    def _handle(self, sock: socket.socket) -> None:
        try:
            req = frame.read(sock, REQUEST_MAX_BYTES, time.monotonic() + REQUEST_DEADLINE_S)
            sock.settimeout(TIMEOUT_S)
            rid = req.get("request_id")
            if not isinstance(rid, str):
                raise frame.FrameError("request_id missing")
            admit = req.get("admit")
            if self._deployment is not None and not (isinstance(admit, str) and hmac.compare_digest(
                    admit, deployment.side_channel_key(self._deployment))):
                raise frame.FrameError("not authorized: not a member of this deployment")
            token = req.get("token")
            if not isinstance(token, str) or not hmac.compare_digest(token, self._token(rid)):
                raise frame.FrameError("not authorized: the request's token does not match")
            with self._lock:
                if sock in self._open:
                    self._open[sock] = True
            if req.get("op") == "release":
                self.release(rid)
                sock.sendall(frame.encode({"ok": True}))
            elif req.get("op") == "pull":
                self._serve_pull(sock, rid, self._connector(req.get("mode")), req.get("from"))
            else:
                raise frame.FrameError(f"unknown op {req.get('op')!r}")
        except (KeyError, frame.FrameError, OSError) as e:
            with contextlib.suppress(OSError):
                sock.sendall(frame.encode({"error": str(e)}))

    def _serve_pull(self, sock: socket.socket, rid: str, connector: KVConnector,
                    want_from: int | None = None) -> None:
        block_ids, tokens = self.lend(rid)
        # A puller that holds a prefix asks for the rest: from a whole block of ours,
        # never past the end (token_ids still name every token, for its comparison).
        bs = self.cache.block_size
        skip = 0
        if isinstance(want_from, int) and not isinstance(want_from, bool) and want_from > 0:
            skip = min(want_from, len(tokens)) // bs
        where = connector.describe(self.cache, block_ids[skip:])
        sock.sendall(frame.encode(kv_header(rid, self.layout, tokens, skip * bs, **where)))
        connector.send(sock, self.cache, block_ids[skip:], len(tokens) - skip * bs)
