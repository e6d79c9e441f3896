"""What a run's failed requests say: the commonest reason, and whether the server refused
every one (a request it will not take at any rate: too long for its context, a model it
does not serve, a key it wants), which no rate search can measure past."""

from __future__ import annotations

from collections import Counter
from typing import Any

# NOTE: 4xx answers that come and go with load (a request timeout, a rate limit) are not
# refusals: at a lower rate the same requests may pass
LOAD_STATUSES = (408, 429)


def reason(status: int | None, error: str | None) -> str:
    """One failed request's reason as the client recorded it."""
    if status and status != 200:
        return f"HTTP {status}: {error}" if error else f"HTTP {status}"
    return error or "no tokens streamed"


def commonest(rows: list[dict[str, Any]]) -> tuple[int, str | None]:
    """(how many of `rows`, a run's records as stored, failed; the commonest reason among
    them, None when none failed)."""
    failed = [reason(r.get("status"), r.get("error")) for r in rows if not r.get("ok")]
    return len(failed), Counter(failed).most_common(1)[0][0] if failed else None


def refused(rows: list[dict[str, Any]]) -> str | None:
    """The commonest reason when the server refused every request of `rows` with an HTTP
    4xx that no load explains; None otherwise (any request answered, or failed another
    way)."""
    def refusal(r: dict[str, Any]) -> bool:
        status = r.get("status") or 0
        return not r.get("ok") and 400 <= status < 500 and status not in LOAD_STATUSES

    return commonest(rows)[1] if rows and all(map(refusal, rows)) else None
