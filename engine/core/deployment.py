"""The deployment secret: what the processes of one deployment share and nobody else has.

The launcher draws it and hands it to its children in their environment (never a command
line, which `ps` shows, nor a file). From it come: the bearer key the front sends its
instances (their HTTP ports refuse anyone without it), the proof an instance gives of
being ours (on /health before a restarted one gets traffic, and on every answer to its
front), the signature on the kv_transfer_params a prefiller (or a decoder keeping a turn)
hands out, which a puller checks before it connects anywhere, the side channel's
admission, and the prefix of its shared-memory segments.
A server started without one (by hand, or by vLLM-style commands) runs as before.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

SECRET_ENV = "ADVISOR_DEPLOYMENT_SECRET"
PARAMS_TTL_S = 900.0  # a signed kv_transfer_params outlives a prefill lease and a kept turn
SIGNED = ("remote_engine_id", "remote_request_id", "remote_request_token", "remote_host",
          "remote_port", "remote_block_ids", "remote_expires")


def new() -> str:
    """A fresh secret, as the environment carries it (hex)."""
    return secrets.token_hex(32)


def current(environ: Mapping[str, str] | None = None) -> bytes | None:
    """This process's deployment secret, or None outside a deployment; ValueError for one
    that is not the hex `new` writes."""
    text = (environ if environ is not None else os.environ).get(SECRET_ENV)
    if not text:
        return None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise ValueError(f"{SECRET_ENV} is not hex") from None
    if len(key) < 16:
        raise ValueError(f"{SECRET_ENV} is too short")
    return key


def _mac(secret: bytes, purpose: str, data: bytes = b"") -> str:
    return hmac.new(secret, purpose.encode() + b"\0" + data, hashlib.sha256).hexdigest()


def instance_key(secret: bytes) -> str:
    """The bearer key an instance's HTTP port requires, and its front sends."""
    return _mac(secret, "instance-http")


def upstream_headers(secret: bytes | None) -> dict[str, str]:
    """What a front sends its instances (nothing outside a deployment)."""
    return {"Authorization": f"Bearer {instance_key(secret)}"} if secret else {}


def side_channel_key(secret: bytes) -> str:
    """What a puller shows the side channel, so that it is admitted before strangers."""
    return _mac(secret, "side-channel")


def admission() -> dict[str, str]:
    """The field a pull or release frame of this process carries (none outside one)."""
    secret = current()
    return {"admit": side_channel_key(secret)} if secret else {}


def segment_prefix(secret: bytes) -> str:
    """The start of every shared-memory KV segment of the deployment's instances."""
    return "adv" + _mac(secret, "shm")[:12]


def proof(secret: bytes, nonce: str, port: int) -> str:
    """What the process listening on `port` answers to `/health?proof=NONCE`, and puts on a
    response to a request that carries NONCE: only one holding the secret can give it. It is
    bound to the port, so that another of the deployment's processes, asked the same nonce,
    gives nothing that a process squatting on `port` could pass on."""
    return _mac(secret, "proof", f"{port}\0{nonce}".encode())


def proven(secret: bytes, nonce: str, url: str, said: object) -> bool:
    """Whether `said` is the proof (`proof`) for `nonce` of the process at base URL `url`."""
    port = urllib.parse.urlsplit(url).port or 80
    return isinstance(said, str) and hmac.compare_digest(said, proof(secret, nonce, port))


def _signed_bytes(params: dict[str, Any]) -> bytes:
    return json.dumps([params.get(k) for k in SIGNED], separators=(",", ":")).encode()


def sign(secret: bytes, params: dict[str, Any]) -> dict[str, Any]:
    """`params` (kv_transfer_params) with an expiry and a signature over where they point."""
    out = {**params, "remote_expires": round(time.time() + PARAMS_TTL_S, 3)}
    return {**out, "remote_signature": _mac(secret, "kv-params", _signed_bytes(out))}


def verify(secret: bytes, params: dict[str, Any]) -> bool:
    """Whether `params` were signed by this deployment and have not expired."""
    sig, expires = params.get("remote_signature"), params.get("remote_expires")
    if not isinstance(sig, str) or not isinstance(expires, (int, float)) \
            or isinstance(expires, bool) or expires < time.time():
        return False
    return hmac.compare_digest(sig, _mac(secret, "kv-params", _signed_bytes(params)))
