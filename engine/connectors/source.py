"""Prefill side of the KV side channel: serves held KV to decoders that pull it.

A threaded TCP server with blocking sockets (one thread per pull, so a large
send never waits on the event loop). Ops, each one header frame:
  {"op": "pull", "request_id", "mode": "tcp" | "shm"} -> KV header (+ bytes for tcp)
  {"op": "release", "request_id"}                   -> {"ok": true}
"""

from __future__ import annotations

import socketserver
import threading
import uuid
from collections.abc import Callable
from multiprocessing import shared_memory

import torch

from engine.config import DTYPE_BYTES
from engine.connectors import frame
from engine.kv_transfer import KVLayout, KVPayload

ExportFn = Callable[..., KVPayload]
# Segments created by this process: a puller in the same process must leave their
# resource-tracker registration alone.
LOCAL_SEGMENTS: set[str] = set()  # (request_id, out_factory=None) -> KVPayload


def kv_header(payload: KVPayload, padded_tokens: int | None = None, **extra) -> dict:
    lay = payload.layout
    return {"request_id": payload.request_id, "dtype": lay.dtype,
            "shape": [lay.num_layers, 2, payload.num_tokens, lay.num_kv_heads, lay.head_dim],
            "nbytes": payload.nbytes, "token_ids": payload.token_ids,
            "padded_tokens": padded_tokens, **extra}


class KVSource:
    """Serves `export(request_id)` over the side channel; `release(request_id)` frees blocks."""

    def __init__(self, export: ExportFn, release: Callable[[str], None], layout: KVLayout,
                 host: str = "127.0.0.1", port: int = 0):
        self.export, self.release, self.layout = export, release, layout
        self.engine_id = uuid.uuid4().hex
        self._segments: dict[str, shared_memory.SharedMemory] = {}
        self._lock = threading.Lock()
        source = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                source._handle(self.request)

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.host, self.port = self.server.server_address[:2]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        for rid in list(self._segments):
            self.drop_segment(rid)

    def transfer_params(self, request_id: str, block_ids: list[int]) -> dict:
        """The kv_transfer_params a prefill response carries (vLLM's field names)."""
        return {"do_remote_prefill": True, "do_remote_decode": False,
                "remote_engine_id": self.engine_id, "remote_request_id": request_id,
                "remote_block_ids": block_ids, "remote_host": self.host,
                "remote_port": self.port, "tp_size": 1}

    def drop_segment(self, request_id: str) -> None:
        with self._lock:
            seg = self._segments.pop(request_id, None)
        if seg is not None:
            LOCAL_SEGMENTS.discard(seg.name)
            seg.close()
            seg.unlink()

    # ---- connection handling (server threads) ----------------------------------------------------
    def _handle(self, sock) -> None:
        try:
            req = frame.read(sock)
            rid = req.get("request_id")
            if not isinstance(rid, str):
                raise frame.FrameError("request_id missing")
            if req.get("op") == "release":
                self.release(rid)
                self.drop_segment(rid)
                sock.sendall(frame.encode({"ok": True}))
            elif req.get("op") == "pull" and req.get("mode") == "tcp":
                self._send_tcp(sock, rid)
            elif req.get("op") == "pull" and req.get("mode") == "shm":
                self._send_shm(sock, rid)
            else:
                raise frame.FrameError(f"unknown op {req.get('op')!r} / mode {req.get('mode')!r}")
        except (KeyError, frame.FrameError, OSError) as e:
            try:
                sock.sendall(frame.encode({"error": str(e)}))
            except OSError:
                pass

    def _send_tcp(self, sock, rid: str) -> None:
        payload = self.export(rid)
        kv = payload.kv  # [L, 2, T, kvh, hd], a view of a block-padded buffer
        sock.sendall(frame.encode(kv_header(payload)))
        for chunk in kv.flatten(0, 1):  # [T, kvh, hd] each, contiguous
            sock.sendall(memoryview(chunk.contiguous().view(torch.uint8).numpy()))

    def _send_shm(self, sock, rid: str) -> None:
        lay = self.layout
        dtype = getattr(torch, lay.dtype)
        elt = DTYPE_BYTES[lay.dtype]
        per_token = lay.bytes_per_token // elt  # elements per token
        box: dict = {}

        def into_shm(numel: int) -> torch.Tensor:
            box["seg"] = shared_memory.SharedMemory(create=True, size=max(numel * elt, 1))
            LOCAL_SEGMENTS.add(box["seg"].name)
            box["padded"] = numel // per_token
            return torch.frombuffer(box["seg"].buf, dtype=dtype, count=numel)

        payload = self.export(rid, out_factory=into_shm)
        header = kv_header(payload, box["padded"], shm_name=box["seg"].name)
        del payload  # NOTE: a live view of the segment would block its close()
        with self._lock:
            old = self._segments.pop(rid, None)
            self._segments[rid] = box["seg"]
        if old is not None:
            LOCAL_SEGMENTS.discard(old.name)
            old.close()
            old.unlink()
        sock.sendall(frame.encode(header))
