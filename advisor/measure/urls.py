"""Deployments the user names: their URLs checked before anything starts, and how long one
may take to get ready."""

from __future__ import annotations

import urllib.parse

from advisor.errors import UsageError

DEFAULT_READY_TIMEOUT_S = 600.0  # GPUs load slowly


def check_url(flag: str, url: str | None) -> None:
    """UsageError naming `flag` unless `url` (None: not given) is an http(s) URL with a
    host: asked of every URL flag before anything starts."""
    if url is None:
        return
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{flag} {url!r}: expected an http(s) URL such as "
                         "http://127.0.0.1:8000")
