"""KV-cache arithmetic: bytes per token (and per request, for hybrid SSM models), a
prompt's KV, and its time on a link."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from advisor.errors import UsageError
from advisor.probe.shapes import BYTES, ModelShape, shape_of
from engine import api
from engine.api import DTYPE_BYTES, parse_link

KV_DTYPES = (*DTYPE_BYTES, "fp8")  # what a KV cache may be stored in


@dataclass(frozen=True)
class KVSize:
    shape: ModelShape
    tokens: int
    dtype: str

    @property
    def bytes_per_token(self) -> int:
        return self.shape.kv_bytes_per_token(self.dtype)

    @property
    def total_bytes(self) -> int:
        return self.shape.kv_bytes(self.tokens, self.dtype)

    def seconds_on(self, bytes_per_s: float) -> float:
        return self.total_bytes / bytes_per_s

    def formula(self) -> str:
        """How the bytes per token (and per request) come about, for people to check."""
        s, b = self.shape, BYTES[self.dtype]
        if s.kind == "mla":
            return (f"{s.kv_layers} layers x {s.latent_dim} latent (kv_lora_rank + "
                    f"qk_rope_head_dim) x {b} B = {self.bytes_per_token} B/token (MLA: no "
                    "separate K and V)")
        head = (f"{s.kv_layers} attention layers" if s.kind == "hybrid" else f"{s.kv_layers} "
                "layers") + f" x 2 x {s.kv_heads} KV heads x {s.head_dim} x {b} B = " \
            f"{self.bytes_per_token} B/token ({self.bytes_per_token / 1024:g} KiB)"
        if s.kind == "hybrid":
            head += (f", plus {s.layers - s.kv_layers} SSM layers' state: "
                     f"{s.state_bytes(self.dtype) / 1e6:.2f} MB per request, whatever its length")
        return head


def kv_size(model: str, tokens: int, dtype: str = "bfloat16") -> KVSize:
    """KV of `tokens` tokens of `model`, by its layout (advisor.probe.shapes)."""
    if tokens < 0:
        raise UsageError(f"--tokens must be >= 0, not {tokens}")
    if dtype not in KV_DTYPES:
        raise UsageError(f"--dtype must be one of {', '.join(KV_DTYPES)}")
    try:
        return KVSize(shape_of(model), tokens, dtype)
    except ValueError as e:
        raise UsageError(f"--model {model}: {e}") from None


def run_kv_size(
    model: str, tokens: int, dtype: str, links: list[str], measured: bool, as_json: bool
) -> dict[str, Any]:
    """`advisor kv-size`: the arithmetic, and the time on each link asked for."""
    size = kv_size(model, tokens, dtype)
    try:
        rates = {spec: parse_link(spec) for spec in links}
    except ValueError as e:
        raise UsageError(str(e)) from None
    if measured:

        for name, lk in api.host_links().items():
            rates[f"measured {name}"] = lk["gbps"] * 1e9
    shape = size.shape
    times = [{"link": k, "bytes_per_s": v, "ms": size.seconds_on(v) * 1000}
             for k, v in rates.items()]
    result = {
        "model": model,
        "dtype": dtype,
        "layout": shape.kind,
        "layers": shape.layers,
        "kv_layers": shape.kv_layers,
        "kv_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "latent_dim": shape.latent_dim or None,
        "bytes_per_token": size.bytes_per_token,
        "state_bytes_per_request": shape.state_bytes(dtype),
        "tokens": tokens,
        "total_bytes": size.total_bytes,
        "links": times,
    }
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{model}: {size.formula()}")
        print(f"{tokens} tokens: {size.total_bytes / 1e6:.1f} MB of KV")
        for lk in times:
            print(f"  on {lk['link']}: {lk['ms']:.1f} ms (no overhead)")
    return result
