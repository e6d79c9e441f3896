"""The tcp connector: the bytes follow the header on the side-channel socket.

The prefiller sends the held blocks straight from its cache by scatter-gather
I/O (a GPU cache is gathered and copied to host a layer at a time); the decoder
receives into a pooled buffer.
"""

from __future__ import annotations

import socket
from typing import Any

import torch

from engine.kv import frame
from engine.kv.connector import POOL, KVConnector
from engine.model.kv_cache import KVCache, gather_blocks


def block_views(data: torch.Tensor, block_ids: list[int], num_tokens: int) -> list[memoryview]:
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
                views.append(
                    data[layer, half, b, :n].view(torch.uint8).numpy().data.cast("B")
                )
    return views


class TcpConnector(KVConnector):
    name = "tcp"

    def describe(self, cache: KVCache, block_ids: list[int]) -> dict[str, Any]:
        return {}

    def send(
        self, sock: socket.socket, cache: KVCache, block_ids: list[int], num_tokens: int
    ) -> None:
        data = cache.data  # [L, 2, blocks, bs, kvh, hd]
        if data.device.type == "cpu":
            frame.send_views(sock, block_views(data, block_ids, num_tokens))
            return
        for layer in range(data.shape[0]):  # GPU: gather a layer, copy it to host, send it
            kv = gather_blocks(data[layer : layer + 1], block_ids, num_tokens).cpu()
            for half in kv[0]:  # [T, kvh, hd]: K then V, each contiguous
                sock.sendall(memoryview(half.view(torch.uint8).numpy()))

    def receive(
        self,
        sock: socket.socket,
        header: dict[str, Any],
        shape: tuple[int, ...],
        dtype: str,
        device: torch.device,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        nbytes = header["nbytes"]
        buf = POOL.take(nbytes)
        frame.recv_into_exact(sock, buf[:nbytes].numpy().data)
        return buf[:nbytes].view(getattr(torch, dtype)).view(shape), buf  # the import copies it


CONNECTOR = TcpConnector
