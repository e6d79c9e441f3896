"""Measuring one endpoint: reachability, sending a workload with progress, and the
per-request records as rows. The library under `advisor bench`, the sweep and probe."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import urllib.error
import urllib.request
from typing import Any

import numpy as np

from advisor.errors import UsageError
from advisor.measure.client import Client
from advisor.measure.records import ClientRun, Endpoint, RequestRecord
from advisor.measure.workers import run_workers
from advisor.output.progress import Bars, progress_bars
from advisor.rundata.model_name import checked_model
from workloads.spec import Workload

REACH_TIMEOUT_S = 5.0
MAX_MODELS_BYTES = 1 << 20  # a /v1/models answer: thousands of models


def discover_model(base_url: str, api_key: str | None = None) -> str:
    """The first model the server lists; UsageError (with the timeout) when unreachable."""
    data = list_models(base_url, api_key)
    if not data:
        raise UsageError(f"{base_url.rstrip('/')}/v1/models lists no models; pass --model")
    return checked_model(data[0].get("id"), f"{base_url.rstrip('/')}/v1/models: data[0].id")


def list_models(base_url: str, api_key: str | None = None) -> list[dict[str, Any]]:
    """/v1/models' entries; UsageError (with the timeout) when unreachable or absent."""
    url = base_url.rstrip("/") + "/v1/models"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=REACH_TIMEOUT_S) as r:
            raw = r.read(MAX_MODELS_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise UsageError(f"cannot reach {url} (waited {REACH_TIMEOUT_S:g} s): {reason}") from None
    try:
        if len(raw) > MAX_MODELS_BYTES:
            raise ValueError(f"longer than {MAX_MODELS_BYTES >> 10} KiB")
        body = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise UsageError(f"{url}: not the JSON a model list is: {str(e)[:100]}") from None
    data = body.get("data") if isinstance(body, dict) else None
    if data is None:
        return []
    if not isinstance(data, list) or not all(isinstance(m, dict) for m in data):
        raise UsageError(f"{url}: data must be a list of models (objects), not "
                         f"{str(data)[:60]!r}")
    return data


def measure(endpoint: Endpoint, workload: Workload, num_warmups: int = 0,
            max_concurrency: int | None = None, label: str = "requests",
            bars: Bars | None = None, workers: int = 1) -> ClientRun:
    """Send `workload` to `endpoint` with a progress bar (in `bars` if given), from
    `workers` client processes (advisor.measure.workers); every record."""
    with contextlib.ExitStack() as stack:
        shown: Bars = bars if bars is not None else stack.enter_context(progress_bars())
        task = shown.add_task(label, total=workload.num_requests)
        stack.callback(shown.remove_task, task)

        def done(rec: RequestRecord) -> None:
            if not rec.warmup:
                shown.advance(task)

        if workers > 1:
            return run_workers(endpoint, workload, workers, num_warmups, max_concurrency,
                               progress=lambda n: shown.advance(task, n))
        client = Client(endpoint, max_concurrency, on_done=done)
        return asyncio.run(client.run(workload, num_warmups))


def max_send_lateness_ms(run: ClientRun) -> float:
    """How late the latest first turn went out against its schedule, in ms."""
    return max(run.send_lateness(), default=0.0) * 1000


def record_row(r: RequestRecord, start: float) -> dict[str, Any]:
    """A record with times as seconds from the run's t=0 (chunks too)."""
    # fields by name, not dataclasses.asdict, whose deep copy of every chunk list cost
    # more than the rest of writing a run
    row = {k: getattr(r, k) for k in _ROW_FIELDS}
    for k in ("scheduled", "dispatched", "sent", "end"):
        row[k] = round(row[k] - start, 6) if row[k] else None
    # rounded in numpy, not by round() per chunk: a plan writes millions of chunk times
    row["chunks"] = (np.rint((np.asarray(r.chunks) - start) * 1e6) / 1e6).tolist()
    row["ok"] = r.ok
    return row


_ROW_FIELDS = tuple(f.name for f in dataclasses.fields(RequestRecord) if f.name != "body_sent")


def records_of(rows: list[dict[str, Any]]) -> list[RequestRecord]:
    """Records again from `record_row`'s rows, for statistics over a stored run.

    Times come back 1 s later than the rows say: 0 means "never" in a record (not sent,
    no end), and a request sent within a microsecond of t=0 has 0.0 in its row; statistics
    only take differences within a record."""
    out = []
    for row in rows:
        r = RequestRecord(**{k: row[k] for k in _ROW_FIELDS if k in row})
        for k in ("scheduled", "dispatched", "sent", "end"):
            setattr(r, k, 0.0 if row.get(k) is None else row[k] + 1.0)
        r.chunks = [t + 1.0 for t in row.get("chunks", [])]
        out.append(r)
    return out

