"""Bidirectional KV in the servers: a decoder keeps each finished turn for its conversation
(`kv_transfer_params.keep_as`, set by the proxy) and says where in a response header; on
the next turn the prefiller pulls that KV back (`kv_transfer_params.reuse`), keeps the
longest prefix whose token IDs equal its new prompt's, and computes only the rest. The
tokens are compared, not just positions: a template that drops earlier reasoning reuses
only the matching part, never wrong KV.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import torch

from engine.core.kept import common_prefix, key
from engine.core.kv_layout import KVLayout
from engine.kv import connector
from engine.kv.connector import KVConnector, PulledKV
from engine.kv.frame import FrameError
from engine.kv.source import KVSource
from engine.serve.http_app import KEPT_HEADER


def keep_as(kv: dict[str, Any]) -> str | None:
    """The conversation a decoder is asked to keep this turn for, if any."""
    cid = kv.get("keep_as")
    return cid if isinstance(cid, str) and cid else None


def kept_header(source: KVSource, conversation_id: str) -> dict[str, str]:
    """The header naming where the next turn can pull this conversation's KV from."""
    return {KEPT_HEADER: json.dumps(source.transfer_params(key(conversation_id), []))}


async def pull_prefix(kv_connector: KVConnector, params: dict[str, Any], layout: KVLayout,
                      device: torch.device, prompt: list[int], pull_hosts: tuple[str, ...],
                      have: int = 0) -> tuple[PulledKV | None, int]:
    """(the kept KV that `params` name, cut to the prefix whose tokens match `prompt`, and
    the number of tokens that diverged); (None, 0) when nothing can be reused (lease
    expired, decoder gone, nothing matches): the prefiller then computes it all, never
    fails. The decoder's copy is released once pulled.

    `have`: prompt tokens this prefiller's prefix cache holds; only the KV after them
    moves (plain P/D with affinity already keeps the earlier prompts: what the decoder
    adds is the reply)."""
    try:
        connector.check_params(params, pull_hosts)
    except ValueError:
        return None, 0  # NOTE: never connect where a malformed or foreign params point
    try:
        pulled = await kv_connector.pull_async(params, layout, device, None, have)
    except (FrameError, OSError, ValueError):
        return None, 0
    finally:  # the next turn's decoder keeps its own copy: this one can go now
        asyncio.get_running_loop().run_in_executor(None, connector.release, params)
    payload = pulled.payload
    assert payload is not None  # just pulled, not closed
    tokens = payload.token_ids
    m = common_prefix(tokens, prompt)
    mismatch = min(len(tokens), len(prompt)) - m
    if m <= payload.start:  # nothing beyond what this prefiller holds
        pulled.close(imported=False)
        return None, mismatch
    pulled.payload = payload.prefix(m)
    return pulled, mismatch
