"""vLLM's spelling of the settings an engine server shares with `vllm serve`, so that the
commands `advisor deploy` prints for vLLM run the bundled engine unchanged but for
`vllm serve MODEL`: `--kv-transfer-config` JSON, `--max-model-len`,
`--[no-]enable-prefix-caching`, `--tensor-parallel-size 1`, and NIXL's side-channel
environment (`VLLM_NIXL_SIDE_CHANNEL_PORT`, `VLLM_NIXL_SIDE_CHANNEL_HOST`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

ROLES = {"kv_producer": "prefill", "kv_consumer": "decode"}
# NOTE: vLLM's KVTransferConfig fields; one outside them is refused as vLLM refuses it
KNOWN = {"kv_connector", "kv_role", "kv_load_failure_policy", "kv_connector_extra_config",
         "engine_id", "kv_buffer_device", "kv_buffer_size", "kv_rank", "kv_parallel_size",
         "kv_ip", "kv_port", "kv_connector_module_path"}


def add_vllm_args(ap: argparse.ArgumentParser) -> None:
    """The vLLM flags the bundled engine server takes."""
    ap.add_argument("--kv-transfer-config", default=None,
                    help="vLLM's JSON: kv_connector (NixlConnector, or shm, tcp, cuda), kv_role "
                    "(kv_producer: prefill, kv_consumer: decode), kv_load_failure_policy, "
                    "kv_connector_extra_config (bidirectional_kv_xfer, kv_lease_duration, "
                    "decoder_kv_blocks_ttl)")
    ap.add_argument("--max-model-len", type=int, default=None,
                    help="context length (prompt + output), at most the model's own")
    ap.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction,
                    default=True, help="reuse cached KV of a prompt's prefix (vLLM's default)")
    ap.add_argument("--tensor-parallel-size", type=int, default=1,
                    help="1 only: the bundled engine runs on one device")


def apply(a: argparse.Namespace, environ: Mapping[str, str]) -> argparse.Namespace:
    """`a` with the vLLM settings mapped onto the bundled engine's own; ValueError naming
    the setting that it cannot take or that contradicts a flag of its own."""
    if a.tensor_parallel_size != 1:
        raise ValueError(f"--tensor-parallel-size {a.tensor_parallel_size}: the bundled engine "
                         "runs on one device (1 only)")
    port = environ.get("VLLM_NIXL_SIDE_CHANNEL_PORT")
    if port and not a.kv_port:
        try:
            a.kv_port = int(port)
        except ValueError:
            raise ValueError(f"VLLM_NIXL_SIDE_CHANNEL_PORT={port!r} is not a port") from None
    a.kv_host = environ.get("VLLM_NIXL_SIDE_CHANNEL_HOST") or a.host
    if a.kv_transfer_config is None:
        a.connector = a.connector or "shm"
        return a
    cfg = _parse(a.kv_transfer_config)
    unknown = sorted(set(cfg) - KNOWN)
    if unknown:
        raise ValueError(f"--kv-transfer-config: unknown field {unknown[0]!r}")
    role = cfg.get("kv_role")
    if role not in ROLES:
        raise ValueError(f"--kv-transfer-config kv_role {role!r}: give kv_producer (prefill) "
                         "or kv_consumer (decode); vLLM deprecates kv_both for NixlConnector")
    if a.role not in ("both", ROLES[role]):
        raise ValueError(f"--role {a.role} contradicts --kv-transfer-config kv_role {role}")
    a.role = ROLES[role]
    a.connector = a.connector or _connector(str(cfg.get("kv_connector")), a)
    if "kv_load_failure_policy" in cfg:
        a.kv_load_failure_policy = cfg["kv_load_failure_policy"]
    extra = cfg.get("kv_connector_extra_config") or {}
    if not isinstance(extra, dict):
        raise ValueError("--kv-transfer-config kv_connector_extra_config must be an object")
    # NOTE: the decoder keeps each turn for the prefiller to pull back; a prefiller needs
    # nothing more than the proxy's word
    a.keep_conversations = a.keep_conversations or (
        _flag(extra.get("bidirectional_kv_xfer")) and a.role == "decode")
    a.kv_lease_duration = float(extra.get("kv_lease_duration", a.kv_lease_duration))
    a.decoder_kv_ttl = float(extra.get("decoder_kv_blocks_ttl", a.decoder_kv_ttl))
    return a


def _parse(text: str) -> dict[str, Any]:
    try:
        cfg = json.loads(text)
    except ValueError as e:
        raise ValueError(f"--kv-transfer-config is not JSON: {e}") from None
    if not isinstance(cfg, dict):
        raise ValueError("--kv-transfer-config must be a JSON object")
    return cfg


def _connector(name: str, a: argparse.Namespace) -> str:
    """Our connector for vLLM's: NIXL moves KV by the fastest path between the two, here
    CUDA IPC on GPUs, shared memory on one host's CPU, TCP to a side channel elsewhere."""
    if name in ("shm", "tcp", "cuda"):
        return name
    if name != "NixlConnector":
        raise ValueError(f"--kv-transfer-config kv_connector {name!r}: the bundled engine "
                         "takes NixlConnector (or shm, tcp, cuda)")
    if a.device.startswith("cuda"):
        return "cuda"
    return "shm" if a.kv_host in ("127.0.0.1", "localhost", "::1") else "tcp"


def _flag(value: object) -> bool:
    """vLLM's extra config takes true or "True" alike."""
    return value is True or str(value).lower() == "true"
