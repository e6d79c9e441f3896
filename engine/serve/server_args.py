"""The command line of one engine instance's server (`python -m engine.serve.server`)."""

from __future__ import annotations

import argparse

from engine.core.config import DTYPES, EngineConfig
from engine.kv import connectors
from engine.render.frontend import add_frontend_args
from engine.serve.http_app import add_api_key_flag
from engine.serve.vllm_args import add_vllm_args

PULL_HOSTS = ("127.0.0.1", "localhost", "::1")  # by default, prefillers on this host only


def parser() -> argparse.ArgumentParser:
    """The server's flags."""
    ap = argparse.ArgumentParser(
        description="Run one engine instance as an OpenAI-compatible server."
    )
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--role", default="both", choices=["both", "prefill", "decode"])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8100)
    ap.add_argument(
        "--kv-port", type=int, default=0, help="side-channel port of a prefill instance"
    )
    ap.add_argument("--connector", default=None, choices=connectors.NAMES,
                    help="default: --kv-transfer-config's kv_connector, else shm")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="auto", choices=DTYPES,
                    help="auto: bfloat16 where it is fast here, else float32 (float16 on old GPUs)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--num-threads", type=int, default=1)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--max-num-batched-tokens", type=int, default=2048)
    ap.add_argument("--kv-lease-duration", type=float, default=30.0)
    ap.add_argument("--kv-load-failure-policy", default="fail", choices=["fail", "recompute"])
    ap.add_argument(
        "--kv-link-emulation",
        default=None,
        help="decode: make each KV transfer take as long as on a slower link "
        "(1.3s per transfer, or a rate such as 1GBps); for experiments",
    )
    ap.add_argument("--keep-conversations", action="store_true",
                    help="decode: keep each finished turn's KV for the conversation's next "
                    "turn (bidirectional transfer: its prefiller pulls it back)")
    ap.add_argument("--decoder-kv-ttl", type=float, default=480.0,
                    help="decode: seconds a kept turn's KV waits for the next turn")
    ap.add_argument("--kv-pull-hosts", nargs="+", default=list(PULL_HOSTS),
                    help="decode: the hosts whose side channels it may pull KV from")
    add_frontend_args(ap)
    add_vllm_args(ap)
    add_api_key_flag(ap)
    return ap


def engine_config(a: argparse.Namespace) -> EngineConfig:
    """The engine's knobs from the parsed flags."""
    return EngineConfig(
        model=a.model,
        seed=a.seed,
        device=a.device,
        dtype=a.dtype,
        role=a.role,
        block_size=a.block_size,
        max_num_batched_tokens=a.max_num_batched_tokens,
        num_threads=a.num_threads,
        kv_lease_duration=a.kv_lease_duration,
        kv_load_failure_policy=a.kv_load_failure_policy,
        keep_conversations=a.keep_conversations,
        decoder_kv_ttl=a.decoder_kv_ttl,
        enable_prefix_caching=a.enable_prefix_caching,
        max_model_len=a.max_model_len,
    )
