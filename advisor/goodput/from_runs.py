"""From a sweep's results to the evidence and the summary table."""

from __future__ import annotations

import contextlib
import os
import urllib.parse
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from advisor.engines.placement import Placement
from advisor.errors import UsageError
from advisor.goodput.outcomes import Outcome, goodput_interval, max_goodput_rate
from advisor.measure.failures import commonest
from advisor.measure.prom import FRONTEND_CPU, Sample, transfer_of
from advisor.measure.transfer import link_class, verdict
from advisor.probe.kvsize import kv_size
from advisor.rundata.evidence import (
    Calibration,
    Evidence,
    FrontendEvidence,
    KVTransferEvidence,
    PlacementEvidence,
    TurnEvidence,
    WorkloadEvidence,
)
from advisor.rundata.result import PROCESS_CPU
from advisor.rundata.rundir import RunDir
from advisor.rundata.slo import Slo
from advisor.rundata.stats import Intervals
from engine.api import TextTokenizer, check_history

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class EvidenceOptions(Protocol):
    """What the evidence reads of a verb's options (a sweep's, a plan's, an import's): the
    SLO and where it is judged, and, for the bundled engine, what its KV crossed."""

    @property
    def judged_slo(self) -> Slo: ...
    @property
    def attainment(self) -> float: ...
    @property
    def operating_rate(self) -> float | None: ...
    @property
    def bundled(self) -> bool: ...
    @property
    def local(self) -> bool: ...
    @property
    def model(self) -> str | None: ...
    @property
    def dtype(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def connector(self) -> str | None: ...
SUMMARY_COLUMNS = ("topology", "request_rate", "num_requests", "completed", "failed",
                   "slo_attainment", "request_goodput", "request_throughput", "output_throughput",
                   "median_ttft_ms", "p99_ttft_ms", "p50_itl_ms", "p99_itl_ms", "mean_tpot_ms")


def decode_slowdown(records: list[dict[str, Any]], cal: Calibration,
                    decoders: int) -> float | None:
    """The median, over the run's inter-token gaps, of each gap over the calibrated decode
    step at the number of requests each of its `decoders` decoding engines ran at that
    gap's midpoint (a request decodes from its first chunk to its last): near 1 where the
    host ran as fast as when it was calibrated. None when no request streamed two chunks.
    Gap by gap, not against the step at the run's mean batch: a step of b requests yields
    b gaps, so the gaps over-sample the larger batches."""
    streams = [r["chunks"] for r in records
               if r.get("ok") and not r.get("warmup") and len(r.get("chunks") or ()) > 1]
    if not streams:
        return None
    starts = np.sort([c[0] for c in streams])
    ends = np.sort([c[-1] for c in streams])
    ratios: list[float] = []
    for c in streams:
        t = np.asarray(c)
        mid = (t[1:] + t[:-1]) / 2  # [gaps]
        running = np.searchsorted(starts, mid, "right") - np.searchsorted(ends, mid, "left")
        steps = [cal.step_at(max(1.0, n / decoders)) for n in running]
        ratios.extend(np.diff(t) * 1000 / steps)
    return float(np.median(ratios))


def _decoders(p: Placement) -> int:
    """How many engines decode `p`'s requests (1 for a deployment at a URL: unknown)."""
    t = p.topology
    return 1 if t is None else t.decode if t.mode == "disagg" else t.replicas


def _side(run_dir: RunDir, p: Placement, outcomes: list[Outcome], rate: float,
          cal: Calibration | None, gpus: int | None) -> PlacementEvidence:
    name = p.name
    r = run_dir.read_run(name, rate)
    # NOTE: a simulated run's gaps come from the calibration itself: nothing to compare
    lowest = run_dir.read_run(name, min(o.rate for o in outcomes), records=True) \
        if cal is not None and not r.described.simulated else None
    best = max_goodput_rate(outcomes)
    ci = r.stats.ci95 or Intervals()
    behind = min((o.rate for o in outcomes if o.behind), default=None)
    late = run_dir.read_run(name, behind) if behind is not None else None
    failed, error = commonest(run_dir.read_run(name, rate, records=True).records or []) \
        if r.stats.failed else (0, None)
    lat = {k: r.shown(k) for k in ("p50_itl_ms", "p99_itl_ms", "median_ttft_ms", "p99_ttft_ms")}
    return PlacementEvidence(
        placement=name, rate_rps=rate, **lat, attainment_at_rate=r.stats.slo_attainment,
        max_goodput_rps=best,
        max_goodput_is_lower_bound=best > 0 and best == max(o.rate for o in outcomes),
        max_goodput_interval_rps=list(goodput_interval(outcomes)),
        requests_at_rate=r.described.num_prompts, attainment_ci=ci.slo_attainment,
        median_ttft_ci_ms=ci.median_ttft_ms, p99_itl_ci_ms=ci.p99_itl_ms,
        slowdown=decode_slowdown(lowest.records or [], cal, _decoders(p))
        if lowest and cal is not None else None,
        fell_behind=[behind, late.pace(), late.stats.slo_attainment] if late else None,
        failed_at_rate=failed, error=error, gpus=gpus,
        output_tps_at_best=run_dir.read_run(name, best).stats.output_throughput
        if best > 0 else None)


def judged_rate(done: dict[str, list[Outcome]], operating: float | None) -> tuple[float, str]:
    """The rate the placements are compared at, and why: the user's operating rate (which
    the sweep measures; else, as in a run directory from before it did, the highest rate
    every placement ran at or below it), else the highest such rate at which the placement
    with more goodput still meets the SLO."""
    common = sorted(set.intersection(*({o.rate for o in d} for d in done.values())))
    if operating is not None:
        rate = max((r for r in common if r <= operating), default=common[0])
        return rate, f"the operating rate {operating:g} req/s" + (
            "" if rate == operating else f" (measured at {rate:g})")
    best = max(max_goodput_rate(d) for d in done.values())
    rate = max((r for r in common if r <= best), default=common[0])
    if best <= 0:
        return rate, f"{rate:g} req/s, the lowest rate tried (no placement met the SLO)"
    if rate > best:  # NOTE: the placements met at no common rate up to the best one's
        return rate, (f"{rate:g} req/s, the lowest rate every placement ran at (none ran "
                      f"at or below {best:g} req/s, the most any placement sustained)")
    if rate == best:
        return rate, (f"{rate:g} req/s, the highest rate where the placement with more "
                      "goodput still meets the SLO")
    return rate, (f"{rate:g} req/s, the highest rate every placement ran at up to {best:g} "
                  "req/s, where the placement with more goodput still meets the SLO")


def _workload(run_dir: RunDir, name: str, rate: float, lowest: float,
              calibration: Calibration | None, model: str | None) -> WorkloadEvidence:
    r = run_dir.read_run(name, rate, records=True)
    every = r.records or []
    recs = [x for x in every if x["ok"]]
    busy = sum(
        x["end"] - x["sent"] for x in every if x["sent"] is not None and x["end"] is not None
    )
    gaps = np.diff(r.described.arrival_offsets or [0.0])
    cv = float(gaps.std() / gaps.mean()) if gaps.size > 1 and gaps.mean() > 0 else 1.0
    duration = r.stats.duration
    prompt = float(np.mean([x["prompt_tokens"] for x in recs])) if recs else 0.0
    # one prompt's prefill: from the calibration, else the median TTFT at the lowest rate
    prefill = calibration.ttft_at(prompt) if calibration else \
        run_dir.read_run(name, lowest).stats.latency_ms("ttft", "median")
    return WorkloadEvidence(
        rate_rps=rate,
        mean_prompt_tokens=prompt,
        mean_output_tokens=float(np.mean([x["output_tokens"] for x in recs])) if recs else 0.0,
        concurrency=busy / duration if duration else 0.0,
        burstiness_cv=cv,
        multi_turn=r.described.multi_turn,
        latency_sensitive=True,
        prefill_ms=prefill,
        **(_history(model) if r.described.multi_turn else {}),
    )


def _kv(opts: EvidenceOptions, run_dir: RunDir, dis: Placement,
        outcomes: list[Outcome]) -> KVTransferEvidence | None:
    """The disaggregated placement's KV transfers, summed over its runs' metric deltas (so
    a resumed sweep counts what an uninterrupted one does)."""
    total = None
    for o in outcomes:
        m = run_dir.read_run(dis.name, o.rate).described.metrics
        if m:
            total = Sample.from_json(m) if total is None else total.plus(Sample.from_json(m))
    t = transfer_of(total) if total else None
    if t is None or t.count <= 0:
        return None
    connector = opts.connector if opts.bundled else ("NixlConnector" if opts.local else None)
    v = verdict(t, link_class(connector))
    per_token = None
    if opts.local and opts.model is not None:
        with contextlib.suppress(UsageError):
            per_token = kv_size(opts.model, 1, opts.dtype).bytes_per_token
    return KVTransferEvidence(
        mean_ms=v["mean_ms"], p90_ms=v["p90_ms"], gbps=v["gbps"], transfers=t.count,
        bytes_per_token=per_token, connector=connector,
        p2p=("no P2P matrix read (no nvidia-smi here): --p2p-matrix FILE gives one"
             if opts.device.startswith("cuda") or not opts.local else "n/a: no GPU"),
        emulated=dis.emulated, failures=t.failures, expired=t.expired,
        overhead_ms=v["overhead_ms"], link=v["link"], verdict=v["verdict"])


def _frontend(run_dir: RunDir, p: Placement, outcomes: list[Outcome]) -> FrontendEvidence | None:
    """Front-end CPU over all of a placement's runs: per request, and as a share of the
    engine processes' whole CPU time (model, scheduler, HTTP and front end together).
    Without our front-end counters (vLLM), the API server's own process CPU stands in:
    its cores busy, as a share of the host's cores when the host is this one."""
    cpu = {"render_s": 0.0, "derender_s": 0.0, "process_s": 0.0}
    requests = api_requests = 0
    api_s = duration = 0.0
    for o in outcomes:
        r = run_dir.read_run(p.name, o.rate)
        spent, metrics = r.described.frontend_cpu, r.described.metrics or {}
        if spent:
            cpu = {k: v + spent[k] for k, v in cpu.items()}
            requests += r.described.num_prompts
        elif PROCESS_CPU in metrics.get("values", {}):
            api_s += metrics["values"][PROCESS_CPU]
            api_requests += r.described.num_prompts
            duration += r.stats.duration or 0.0
    if requests:
        front = cpu["render_s"] + cpu["derender_s"]
        return FrontendEvidence(
            cpu_ms_per_request=front / requests * 1000,
            render_ms_per_request=cpu["render_s"] / requests * 1000,
            derender_ms_per_request=cpu["derender_s"] / requests * 1000,
            cpu_share=front / cpu["process_s"] if cpu["process_s"] > 0 else None,
            placement=p.name, requests=requests, source=FRONTEND_CPU)
    if api_requests and duration > 0:
        cores = api_s / duration
        local = p.url is not None and urllib.parse.urlsplit(p.url).hostname in LOOPBACK
        return FrontendEvidence(
            cpu_ms_per_request=api_s / api_requests * 1000, placement=p.name,
            requests=api_requests, source=PROCESS_CPU, cores_busy=cores,
            cpu_share=cores / (os.cpu_count() or 1) if local else None,
            undecided=None if local else "the API server's host is not this one: its "
            "core count is unknown here")
    where = p.url or p.name
    return FrontendEvidence(placement=p.name, undecided=f"no CPU counters at {where}")


def _history(model: str | None) -> dict[str, Any]:
    """Whether the model's chat template renders a turn's history as it was computed (the
    bundled tokenizer's template, or the local model directory's)."""
    local = model if model and Path(model).is_dir() else None
    check = check_history(TextTokenizer.load(local))
    return {"history_kept_share": check.share, "history_dropped": check.dropped}


LATE_TURN = 5  # the guide: "measure TTFT on turn five"


def _turns(run_dir: RunDir, rate: float, col: Placement | None, dis: Placement | None,
           bid: Placement | None) -> TurnEvidence | None:
    """Each placement's median TTFT on turn five (or the last, if fewer) at `rate`."""
    medians, turn = {}, None
    for side, p in (("collocated", col), ("disaggregated", dis), ("bidirectional", bid)):
        per_turn = run_dir.read_run(p.name, rate).stats.per_turn if p else None
        if not per_turn:
            continue
        turn = min(LATE_TURN, max(t.turn for t in per_turn)) if turn is None else turn
        at = next((t for t in per_turn if t.turn == turn), None)
        medians[f"{side}_ms"] = at.median_ttft_ms if at else None
    return TurnEvidence(turn=turn, rate_rps=rate, **medians) if turn is not None else None


def build_evidence(opts: EvidenceOptions, placements: list[Placement],
                   done: dict[str, list[Outcome]], grid: list[float],
                   run_dir: RunDir, calibration: Calibration | None,
                   prompt_tokens: float | None, stopped: str | None = None,
                   gpus: dict[str, int] | None = None) -> Evidence:
    """The evidence at the judged rate (judged_rate); with no run at all
    (the calibrated floor missed the SLO), the calibration and the sized prompt alone.
    `stopped`: why the search ended before the placements' intervals parted, if not by
    the measurements (the time budget); `gpus`: each placement's GPUs (a plan's)."""
    col = next((p for p in placements if p.kind == "collocated"), None)
    dis = next((p for p in placements if p.kind == "disagg" and not p.bidirectional), None)
    bid = next((p for p in placements if p.bidirectional), None)
    split = next((p for p in placements if p.kind == "render-split"), None)
    lead = col or dis or placements[0]
    pd = dis or bid  # the P/D whose KV transfers are judged
    slo = opts.judged_slo
    if not grid:
        prompt = prompt_tokens or 0.0
        return Evidence(slo=slo, attainment=opts.attainment,
                        collocated=PlacementEvidence(placement=col.name if col else None),
                        disaggregated=PlacementEvidence(placement=dis.name) if dis else None,
                        workload=WorkloadEvidence(mean_prompt_tokens=prompt, concurrency=0.0,
                                                  prefill_ms=calibration.ttft_at(prompt)
                                                  if calibration else None),
                        calibration=calibration)
    lowest = min(grid)
    rate, why = judged_rate({p.name: done[p.name] for p in placements}, opts.operating_rate)
    def side(p: Placement | None) -> PlacementEvidence | None:
        return _side(run_dir, p, done[p.name], rate, calibration,
                     (gpus or {}).get(p.name)) if p else None

    return Evidence(
        slo=slo, attainment=opts.attainment,
        collocated=side(col) or PlacementEvidence(),
        disaggregated=side(dis),
        kv_transfer=_kv(opts, run_dir, pd, done[pd.name]) if pd else None,
        bidirectional=side(bid),
        render_split=side(split),
        turns=_turns(run_dir, rate, col, dis, bid),
        workload=_workload(run_dir, lead.name, rate, lowest, calibration,
                           opts.model if opts.local else None),
        frontend=_frontend(run_dir, lead, done[lead.name]),
        calibration=calibration,
        judged_at=why,
        search_stopped=stopped,
    )


def write_summary(run_dir: RunDir, placements: list[Placement],
                  done: dict[str, list[Outcome]]) -> None:
    """summary.csv: one row per placement x rate."""
    rows = []
    for p in placements:
        for o in sorted(done[p.name], key=lambda o: o.rate):
            r = run_dir.read_run(p.name, o.rate)
            engines, client = r.cores_busy()
            rows.append(
                {c: (p.name if c == "topology" else r.shown(c)) for c in SUMMARY_COLUMNS}
                | {"pace": r.pace(), "emulated_link": p.emulated or "",
                   "instance_cores_busy": engines, "client_cores_busy": client}
            )
    columns = [*SUMMARY_COLUMNS, "pace", "emulated_link", "instance_cores_busy",
               "client_cores_busy"]
    run_dir.write_summary(pd.DataFrame(rows, columns=columns).to_csv(index=False))
