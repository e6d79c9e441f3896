"""KV-cache arithmetic: bytes per token, a prompt's KV, and its time on a link."""

from __future__ import annotations

import json
from dataclasses import dataclass

from advisor.errors import UsageError
from engine.core.config import DTYPE_BYTES, load_model_config
from engine.kv.links import parse_link


@dataclass(frozen=True)
class KVSize:
    model: str
    bytes_per_token: int
    tokens: int
    layers: int
    kv_heads: int
    head_dim: int
    dtype: str

    @property
    def total_bytes(self) -> int:
        return self.bytes_per_token * self.tokens

    def seconds_on(self, bytes_per_s: float) -> float:
        return self.total_bytes / bytes_per_s


def kv_size(model: str, tokens: int, dtype: str = "bfloat16") -> KVSize:
    """KV of `tokens` tokens: layers x 2 (K, V) x KV heads x head_dim x dtype bytes each.

    MLA (DeepSeek-style latent KV) and hybrid SSM models keep other state, so
    they are refused rather than guessed.
    """
    if tokens < 0:
        raise UsageError(f"--tokens must be >= 0, not {tokens}")
    if dtype not in DTYPE_BYTES:
        raise UsageError(f"--dtype must be one of {', '.join(DTYPE_BYTES)}")
    try:
        cfg = load_model_config(model)
    except ValueError as e:
        raise UsageError(f"--model {model}: {e}") from None
    return KVSize(
        model,
        cfg.kv_bytes_per_token(dtype),
        tokens,
        cfg.num_hidden_layers,
        cfg.num_key_value_heads,
        cfg.head_dim,
        dtype,
    )


def run_kv_size(
    model: str, tokens: int, dtype: str, links: list[str], measured: bool, as_json: bool
) -> dict:
    """`advisor kv-size`: the arithmetic, and the time on each link asked for."""
    size = kv_size(model, tokens, dtype)
    rates = {spec: parse_link(spec) for spec in links}
    if measured:
        from advisor.probe.host_links import host_links

        for name, lk in host_links().items():
            rates[f"measured {name}"] = lk["gbps"] * 1e9
    result = {
        "model": model,
        "dtype": dtype,
        "layers": size.layers,
        "kv_heads": size.kv_heads,
        "head_dim": size.head_dim,
        "bytes_per_token": size.bytes_per_token,
        "tokens": tokens,
        "total_bytes": size.total_bytes,
        "links": [
            {"link": k, "bytes_per_s": v, "ms": size.seconds_on(v) * 1000} for k, v in rates.items()
        ],
    }
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{model}: {size.layers} layers x 2 x {size.kv_heads} KV heads x {size.head_dim} "
            f"x {DTYPE_BYTES[dtype]} B = {size.bytes_per_token} B/token "
            f"({size.bytes_per_token / 1024:g} KiB)"
        )
        print(f"{tokens} tokens: {size.total_bytes / 1e6:.1f} MB of KV")
        for lk in result["links"]:
            print(f"  on {lk['link']}: {lk['ms']:.1f} ms (no overhead)")
    return result
