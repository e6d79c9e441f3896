"""Prefill side of the KV side channel: serves held KV to decoders that pull it.

A threaded TCP server with blocking sockets (one thread per pull, so a large
send never waits on the event loop). Ops, each one header frame:
  {"op": "pull", "request_id", "mode": "tcp"} -> KV header + bytes, layer by layer
  {"op": "pull", "request_id", "mode": "shm" | "cuda"} -> KV header naming the cache and blocks
  {"op": "release", "request_id"}                   -> {"ok": true}
"""

from __future__ import annotations

import socketserver
import threading
import uuid
from collections.abc import Callable

import torch

from engine.connectors import cuda, frame
from engine.kv_cache import KVCache, gather_blocks
from engine.kv_transfer import KVLayout

# (request_id) -> (block ids, prompt token ids) of held KV; renews its lease.
LendFn = Callable[[str], tuple[list[int], list[int]]]


def kv_header(request_id: str, layout: KVLayout, token_ids: list[int], **extra) -> dict:
    """The header that describes a request's KV: [layers, 2, tokens, kv_heads, head_dim]."""
    shape = [layout.num_layers, 2, len(token_ids), layout.num_kv_heads, layout.head_dim]
    return {"request_id": request_id, "dtype": layout.dtype, "shape": shape,
            "nbytes": layout.bytes_per_token * len(token_ids), "token_ids": token_ids, **extra}


def _block_views(data: torch.Tensor, block_ids: list[int], num_tokens: int) -> list[memoryview]:
    """Byte views of the held blocks in wire order: layer, then K/V, then tokens.

    data: [L, 2, blocks, bs, kvh, hd]; each block's slice [n, kvh, hd] is contiguous,
    so the bytes go out by scatter-gather I/O with no copy at all.
    """
    bs = data.shape[3]
    views = []
    for layer in range(data.shape[0]):
        for half in range(2):
            for i, b in enumerate(block_ids):
                n = min(bs, num_tokens - i * bs)
                views.append(memoryview(data[layer, half, b, :n].view(torch.uint8).numpy()).cast("B"))
    return views


class KVSource:
    """Serves held KV blocks of `cache` over the side channel.

    `lend(request_id)` names the blocks; `release(request_id)` frees them. The
    tcp mode sends the blocks straight from the cache by scatter-gather I/O
    (a GPU cache is gathered and copied to host a layer at a time); the shm and cuda modes only name the cache and the blocks: the decoder
    maps the shared (or CUDA IPC) cache and gathers them itself (one copy, no
    serialization).
    """

    def __init__(self, lend: LendFn, release: Callable[[str], None], cache: KVCache,
                 layout: KVLayout, host: str = "127.0.0.1", port: int = 0):
        self.lend, self.release, self.cache, self.layout = lend, release, cache, layout
        self.engine_id = uuid.uuid4().hex
        self._cuda_cache: dict | None = None
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

    def transfer_params(self, request_id: str, block_ids: list[int]) -> dict:
        """The kv_transfer_params a prefill response carries (vLLM's field names)."""
        return {"do_remote_prefill": True, "do_remote_decode": False,
                "remote_engine_id": self.engine_id, "remote_request_id": request_id,
                "remote_block_ids": block_ids, "remote_host": self.host,
                "remote_port": self.port, "tp_size": 1}

    # ---- connection handling (server threads) ----------------------------------------------------
    def _handle(self, sock) -> None:
        try:
            req = frame.read(sock)
            rid = req.get("request_id")
            if not isinstance(rid, str):
                raise frame.FrameError("request_id missing")
            if req.get("op") == "release":
                self.release(rid)
                sock.sendall(frame.encode({"ok": True}))
            elif req.get("op") == "pull" and req.get("mode") == "tcp":
                self._send_tcp(sock, rid)
            elif req.get("op") == "pull" and req.get("mode") in ("shm", "cuda"):
                self._send_block_ids(sock, rid, req["mode"])
            else:
                raise frame.FrameError(f"unknown op {req.get('op')!r} / mode {req.get('mode')!r}")
        except (KeyError, frame.FrameError, OSError) as e:
            try:
                sock.sendall(frame.encode({"error": str(e)}))
            except OSError:
                pass

    def _send_tcp(self, sock, rid: str) -> None:
        block_ids, tokens = self.lend(rid)
        data = self.cache.data  # [L, 2, blocks, bs, kvh, hd]
        sock.sendall(frame.encode(kv_header(rid, self.layout, tokens)))
        if data.device.type == "cpu":
            frame.send_views(sock, _block_views(data, block_ids, len(tokens)))
            return
        # GPU cache: gather a layer on the device, copy it to host, send it
        for layer in range(data.shape[0]):
            kv = gather_blocks(data[layer:layer + 1], block_ids, len(tokens)).cpu()
            for half in kv[0]:  # [T, kvh, hd]: K then V, each contiguous
                sock.sendall(memoryview(half.view(torch.uint8).numpy()))

    def _send_block_ids(self, sock, rid: str, mode: str) -> None:
        """shm / cuda: name the cache and the blocks; the decoder reads them itself."""
        if mode == "shm":
            if self.cache.shm_name is None:
                raise frame.FrameError("this prefill instance's KV cache is not in shared memory "
                                       "(start it with --connector shm)")
            where = {"shm_name": self.cache.shm_name}
        else:
            if self.cache.data.device.type != "cuda":
                raise frame.FrameError("this prefill instance's KV cache is not on a GPU")
            with self._lock:
                if self._cuda_cache is None:
                    self._cuda_cache = cuda.share_cache(self.cache.data)
            where = {"cuda_cache": self._cuda_cache}
        block_ids, tokens = self.lend(rid)
        sock.sendall(frame.encode(kv_header(rid, self.layout, tokens, block_ids=block_ids,
                                            cache_shape=list(self.cache.data.shape), **where)))
