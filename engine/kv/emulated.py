"""Link emulation as a wrapper around any connector: each pull lasts as long as it would
on a slower link (a fixed time per transfer, or bytes over a rate), for experiments.
What is measured through it is marked with the emulated link's spec."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import torch

from engine.core.kv_layout import KVLayout
from engine.kv.connector import KVConnector, PulledKV
from engine.kv.links import LinkEmulation
from engine.model.kv_cache import KVCache


class EmulatedLink(KVConnector):
    """`inner` with every transfer stretched to `emulation`'s duration (never shortened)."""

    def __init__(self, inner: KVConnector, emulation: LinkEmulation) -> None:
        self.inner, self.emulation = inner, emulation
        self.name = inner.name

    def describe(self, cache: KVCache, block_ids: list[int]) -> dict[str, Any]:
        return self.inner.describe(cache, block_ids)

    def send(self, sock: socket.socket, cache: KVCache, block_ids: list[int],
             num_tokens: int) -> None:
        self.inner.send(sock, cache, block_ids, num_tokens)

    def receive(self, sock: socket.socket, header: dict[str, Any], shape: tuple[int, ...],
                dtype: str,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.inner.receive(sock, header, shape, dtype, device)

    async def pull_async(self, params: dict[str, Any], layout: KVLayout, device: torch.device,
                         prompt: list[int] | None = None, have: int = 0) -> PulledKV:
        # NOTE: the wait is on the event loop, so that slow emulated transfers do not use up
        # the thread pool that real pulls run on
        pulled = await self.inner.pull_async(params, layout, device, prompt, have)
        rec = pulled.record
        await asyncio.sleep(
            rec.start + self.emulation.transfer_seconds(rec.nbytes) - time.monotonic()
        )
        rec.end, rec.emulated = max(rec.end, time.monotonic()), self.emulation.spec
        return pulled
