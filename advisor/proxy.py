"""`advisor proxy`: the project's P/D proxy standalone, in front of vLLM instances as well as
the bundled engine's: vLLM's proxy protocol (prefill leg with max_tokens=1, then the
decoder with the prefill's kv_transfer_params), conversation affinity, health checks that
serve around a tier that is down, and bidirectional transfer in either engine's protocol
(engine.fronts.proxy)."""

from __future__ import annotations

from dataclasses import dataclass

from advisor.errors import UsageError
from advisor.flags import option
from advisor.measure.urls import check_url
from engine import api


@dataclass(frozen=True)
class ProxyOptions:
    """`advisor proxy`'s options, each with its flag (advisor.flags)."""

    prefill: tuple[str, ...] = option((), "a prefiller's base URL (repeat it, or give them "
                                          "comma-separated); none: round-robin over --decode")
    decode: tuple[str, ...] = option((), "a decoder's (or replica's) base URL (repeat it, or "
                                         "give them comma-separated)")
    bidirectional: bool = option(False, "P/D: a conversation's next turn reuses the KV its "
                                        "decoder kept (vLLM's bidirectional_kv_xfer); clients "
                                        "send conversation_id or X-Conversation-Id",
                                 "--bidirectional")
    host: str = option("127.0.0.1", "address to bind (loopback by default)")
    port: int = option(8192, "the proxy's port (vLLM's examples use 8192)", min=0, max=65535)
    api_key: str | None = option(None, "clients must send 'Authorization: Bearer KEY' (default: "
                                       "$ADVISOR_API_KEY)", envvar="ADVISOR_API_KEY",
                                 secret=True)


def urls(flag: str, given: tuple[str, ...]) -> list[str]:
    """The URLs given to `flag`, repeated or comma-separated, each checked."""
    out = [u.strip().rstrip("/") for item in given for u in item.split(",") if u.strip()]
    for url in out:
        check_url(flag, url)
    return out


def run_proxy(opts: ProxyOptions) -> None:
    """Check the URLs (UsageError naming the flag), then proxy until interrupted."""
    prefill, decode = urls("--prefill", opts.prefill), urls("--decode", opts.decode)
    if not decode:
        raise UsageError("--decode: give at least one decoder (or replica) URL")
    if opts.bidirectional and not prefill:
        raise UsageError("--bidirectional needs --prefill: it is P/D's")
    api.serve_proxy(decode, prefill, opts.bidirectional, opts.host, opts.port,
                    opts.api_key or None)
