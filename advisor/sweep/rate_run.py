"""One rate of a sweep, measured: `repeats` runs back to back (each its own seed) pooled
into one result whose records and arrivals follow each other on one timeline; or a stored
run measured again with as many repeats more and pooled with it (`rate_search.top_up`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from advisor.engines.placement import Placement
from advisor.goodput.outcomes import TOPPED_UP
from advisor.measure.prom import Sample, frontend_of, read, scrape_text
from advisor.measure.ready import check_fits
from advisor.measure.records import Endpoint, RequestRecord
from advisor.measure.selfcheck import client_check, pooled
from advisor.measure.stats import summarize
from advisor.measure.workers import default_workers
from advisor.measure.workload_run import measure, record_row, records_of
from advisor.output.progress import Bars
from advisor.rundata.result import RunResult
from advisor.rundata.slo import Slo
from advisor.sweep.options import SweepOptions, prompts_for
from workloads.presets import seed_for

REPEAT_SEED_STEP = 7919  # seeds of a rate's repeats: apart from every other rate's


def run_rate(opts: SweepOptions, slo: Slo, endpoint: Callable[[bool], Endpoint],
             metric_urls: list[str], p: Placement, rate: float, bars: Bars,
             before: RunResult | None = None, context: int | None = None) -> RunResult:
    """`p` at `rate` through `endpoint(chat)`, judged against `slo`, its instances' counters
    read from `metric_urls` around it; with `before` (this rate's run, read with its
    records), as many repeats again after its own, pooled with it. UsageError before
    sending anything where a request would not fit the deployment's `context` (tokens;
    None: unknown)."""
    first = before.described.workload_params.get("repeats", 1) if before else 0
    sample = _sample(metric_urls)
    records: list[RequestRecord] = []
    rows: list[dict[str, Any]] = []
    arrivals: list[float] = []
    elapsed, requests = 0.0, 0
    cpu: float | None = 0.0
    checks: list[Mapping[str, Any] | None] = [before.described.client_check] if before else []
    if before:
        # NOTE: its own rows only: a sweep stopped between writing a pooled run's records and
        # its result.json leaves the second part in the records file
        rows = (before.records or [])[:before.stats.num_requests]
        records = records_of(rows)
        arrivals, elapsed = list(before.described.arrival_offsets), before.stats.duration or 0.0
        requests = before.described.num_prompts
        cpu = before.described.client_cpu_s  # None (not recorded) stays None
    for k in range(first, 2 * first if before else opts.repeats):
        w = opts.workload_at(rate, seed_for(opts.seed, rate) + k * REPEAT_SEED_STEP,
                             prompts_for(opts, rate))
        check_fits(w, context, p.name, "Send shorter ones (--scale, --output-scale) or serve "
                   "a longer context")
        run = measure(endpoint(w.chat), w, bars=bars, max_concurrency=opts.max_concurrency,
                      label=f"{p.name} @ {rate:g} req/s" + (f" #{k + 1}" if k else ""),
                      workers=opts.workers or default_workers(engines_here=opts.local))
        records += run.records
        rows += [record_row(r, run.start - elapsed) for r in run.records]
        arrivals += [elapsed + c.start for c in w.conversations]
        elapsed += run.duration
        requests += w.num_requests
        cpu = None if cpu is None else cpu + run.cpu_s
        checks.append(client_check(run, capped=opts.max_concurrency is not None))
    after = _sample(metric_urls)
    delta = after.minus(sample) if sample and after else None
    if before:  # counters over both parts, or none when either lacks them
        metrics = before.described.metrics
        delta = Sample.from_json(metrics).plus(delta) if delta and metrics else None
    front = frontend_of(delta) if delta else None
    params = {**w.params, "repeats": k + 1, **({TOPPED_UP: True} if before else {}),
              **({"max_concurrency": opts.max_concurrency} if opts.max_concurrency else {})}
    return RunResult.of(
        summarize(records, elapsed, slo, opts.percentile_values), rows,
        # the front end's CPU during this run, summed over instances (None: not reported)
        frontend_cpu=dataclasses.asdict(front) if front else None,
        metrics=delta.to_json() if delta else None, client_cpu_s=cpu,
        client_check=pooled(checks),
        topology=p.name, kind=p.kind, request_rate=rate, num_prompts=requests,
        workload=w.name, workload_params=params, emulated=p.emulated,
        arrival_offsets=arrivals, multi_turn=w.multi_turn)


def _sample(urls: list[str]) -> Sample | None:
    """The instances' counters now (None: no metrics, or unreadable this time)."""
    try:
        return read(scrape_text(urls, timeout_s=10)) if urls else None
    except (OSError, ValueError):
        return None
