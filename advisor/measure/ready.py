"""Is an OpenAI-compatible front up, and which model does it serve. Any front: vLLM's API
server, vLLM's toy P/D proxy (no /v1/models, no /metrics, only /healthcheck), llm-d,
Dynamo, ours."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from advisor.errors import UsageError
from advisor.measure.urls import DEFAULT_READY_TIMEOUT_S
from advisor.measure.workload_run import discover_model, list_models
from advisor.rundata.model_name import checked_model
from workloads.spec import Workload

HEALTH_PATHS = ("/health", "/healthcheck", "/v1/models")
PROBE_TIMEOUT_S = 5.0
POLL_S = 1.0
SAY_EVERY_S = 10.0


def served_model(url: str, model: str | None, api_key: str | None = None) -> str:
    """`model` when given (nothing is asked), checked as a model name; else the first the
    server lists."""
    return checked_model(model, "--model") if model else discover_model(url, api_key)


def served_context(url: str, model: str | None, api_key: str | None = None) -> int | None:
    """The context in tokens (`max_model_len`, as vLLM and ours list it in /v1/models) of
    `model` at `url`, else of the first model listed; None where the front does not say
    (vLLM's toy proxy has no /v1/models)."""
    try:
        data = list_models(url, api_key)
    except UsageError:
        return None
    entry = next((m for m in data if m.get("id") == model), data[0] if data else {})
    n = entry.get("max_model_len")
    return n if isinstance(n, int) and n > 0 else None


def check_fits(workload: Workload, context: int | None, who: str, fix: str) -> None:
    """UsageError where a request of `workload` needs more tokens than the `context` (None:
    unknown) that `who` serves, which would refuse it; `fix` says what to change."""
    if context and (need := workload.longest()) > context:
        raise UsageError(f"{who} serves a context of {context} tokens (max_model_len, in its "
                         f"/v1/models), and a request of {workload.name} needs {need} (its "
                         f"prompt and max_tokens): it would be refused. {fix}")


def wait_ready(url: str, model: str | None, api_key: str | None = None,
               timeout_s: float = DEFAULT_READY_TIMEOUT_S,
               alive: Callable[[], str | None] = lambda: None) -> None:
    """Return once `url` answers 200 on /health, /healthcheck or /v1/models, or (with a
    `model`) serves a one-token completion. UsageError after `timeout_s`, or at once when
    `alive()` says why the deployment cannot come up (it exited). A line on stderr every
    SAY_EVERY_S says what it is waiting for."""
    start = time.monotonic()
    said = start
    while True:
        why = _not_ready(url, model, api_key)
        if why is None:
            return
        if (dead := alive()) is not None:
            raise UsageError(dead)
        waited = time.monotonic() - start
        if waited >= timeout_s:
            raise UsageError(f"{url} is not ready after {waited:.0f} s (--ready-timeout "
                             f"{timeout_s:g}): {why}")
        if time.monotonic() - said >= SAY_EVERY_S:
            said = time.monotonic()
            print(f"waiting for {url} ({waited:.0f} of {timeout_s:g} s): {why}",
                  file=sys.stderr, flush=True)
        time.sleep(POLL_S)


def _not_ready(url: str, model: str | None, api_key: str | None) -> str | None:
    """None when ready; else what the last probe said."""
    base = url.rstrip("/")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    why = "no answer"
    for path in HEALTH_PATHS:
        status, why = _ask(urllib.request.Request(base + path, headers=headers))
        if status == 200:
            return None
        if status is None or status == 503:
            # refused or timed out: the other paths would be too; a 503: a front saying
            # none of its instances is up yet, though its /v1/models may answer already
            return why
    if model:
        body = json.dumps({"model": model, "prompt": "hi", "max_tokens": 1}).encode()
        status, why = _ask(urllib.request.Request(
            base + "/v1/completions", body, {**headers, "Content-Type": "application/json"}))
        if status == 200:
            return None
    return why


def _ask(req: urllib.request.Request) -> tuple[int | None, str]:
    try:
        with urllib.request.urlopen(req, timeout=PROBE_TIMEOUT_S) as r:
            r.read()
            return r.status, f"{req.full_url}: {r.status}"
    except urllib.error.HTTPError as e:
        return e.code, f"{req.full_url}: HTTP {e.code}"
    except (urllib.error.URLError, OSError) as e:
        return None, f"cannot reach {req.full_url}: {getattr(e, 'reason', e)}"
