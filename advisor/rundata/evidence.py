"""The evidence: what a decision rests on, the interface between measuring (sweep, probe)
and deciding (recommend). Written as `evidence.json`; any file of this shape can be
decided on (`advisor recommend --evidence FILE`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from advisor.rundata.bounds import in_range, placement_name
from advisor.rundata.files import read_json_object
from advisor.rundata.slo import Metric, Slo
from advisor.rundata.typed_json import from_json, to_json

MAX_RATE = 1e7  # req/s: past any deployment
MAX_MS_PER_REQUEST = 3.6e6  # an hour of CPU a request


@dataclass(frozen=True)
class PlacementEvidence:
    """One placement at the rate where the rows are judged, and its best goodput."""

    placement: str | None = None
    rate_rps: float | None = None
    p50_itl_ms: float | None = None
    p99_itl_ms: float | None = None
    median_ttft_ms: float | None = None
    p99_ttft_ms: float | None = None
    attainment_at_rate: float | None = None
    max_goodput_rps: float | None = None
    # the highest rate tried met the SLO: the true maximum may be higher
    max_goodput_is_lower_bound: bool = False
    # [from, to]: the highest rate that surely met the SLO to the lowest above it that surely
    # missed it (to: null when no rate tried bounds it), by the runs' attainment intervals
    max_goodput_interval_rps: list[float | None] | None = None
    requests_at_rate: int | None = None
    attainment_ci: list[float] | None = None  # bootstrap 95% intervals at rate_rps
    median_ttft_ci_ms: list[float] | None = None
    p99_itl_ci_ms: list[float] | None = None
    # the median ITL at its lowest rate against the calibrated decode step at the batch it
    # ran (advisor.goodput.from_runs.decode_slowdown): over 1, the host ran slower than when
    # calibrated; null without a calibration
    slowdown: float | None = None
    # [rate, pace, attainment] of the lowest rate at which it completed requests slower
    # than they arrived (advisor.rundata.result.KEEP_PACE), counted as missing the SLO
    fell_behind: list[float | None] | None = None
    # its requests at rate_rps that failed (counted as SLO misses), and the commonest reason
    failed_at_rate: int | None = None
    error: str | None = None
    # output tokens/s of its run at max_goodput_rps, and the GPUs it holds (a plan's; null:
    # measured on this host, on the same cores as the other placements)
    output_tps_at_best: float | None = None
    gpus: int | None = None

    def __post_init__(self) -> None:
        if self.placement is not None:
            placement_name(self.placement)
        in_range(self.max_goodput_rps, 0, MAX_RATE, "max_goodput_rps")
        in_range(self.rate_rps, 0, MAX_RATE, "rate_rps")


@dataclass(frozen=True)
class KVTransferEvidence:
    """The disaggregated placement's KV transfers over its runs, and the guide's verdict."""

    mean_ms: float
    p90_ms: float | None = None
    gbps: float | None = None
    transfers: float | None = None  # a Prometheus counter
    bytes_per_token: int | None = None
    connector: str | None = None
    p2p: str | None = None
    emulated: str | None = None  # the emulated link's spec, when one was imposed
    failures: float = 0.0  # failed transfers (the decoders count them)
    expired: float = 0.0  # leases that expired unpulled (the prefillers count them)
    overhead_ms: float | None = None  # per transfer, beside the wire (vLLM post time, our ready)
    link: str | None = None  # the link class its throughput is held to
    verdict: str | None = None  # the guide's words on it (advisor.measure.transfer)


@dataclass(frozen=True)
class P2PPair:
    """One prefiller-decoder GPU pair a placement's KV crosses, and its P2P status
    (advisor.probe.p2p.CODES; ` over PATH` where topo -m gave the path)."""

    prefill_gpu: int
    decode_gpu: int
    status: str


@dataclass(frozen=True)
class P2PEvidence:
    """`nvidia-smi topo -p2p r` where the placements ran: every GPU pair's status, the
    pairs the disaggregated placement's P->D transfers use (empty where its GPUs are not
    known: a deployment by URL), and what a prompt's KV costs staged through the host."""

    source: str  # the file or command it came from
    gpus: list[str]  # GPU0, GPU1, ...
    status: list[list[str]]  # status[i][j]: can GPU i read from GPU j (OK, NS, CNS, ...)
    used: list[P2PPair]  # the disaggregated placement's P->D GPU pairs
    p2p_pairs: list[list[int]]  # [a, b] GPU pairs with P2P both ways
    placed: str  # how the placement's GPUs were chosen
    paths: list[list[str]] | None = None  # topo -m's path codes, where given
    # the workload's mean prompt's KV, and its time staged through the host (no P2P)
    kv_mb: float | None = None
    host_staged_gbps: float | None = None
    host_staged_ms: float | None = None
    host_staged_source: str | None = None

    @property
    def lacking(self) -> list[P2PPair]:
        """The used pairs without P2P."""
        return [p for p in self.used if not p.status.startswith("OK")]


@dataclass(frozen=True)
class WorkloadEvidence:
    """What the workload was like at the judged rate: prompts, concurrency, burstiness."""

    mean_prompt_tokens: float
    concurrency: float  # requests in flight, on average
    rate_rps: float | None = None
    mean_output_tokens: float | None = None
    burstiness_cv: float = 1.0  # of inter-arrival gaps (Poisson: 1)
    multi_turn: bool = False
    latency_sensitive: bool = True
    prefill_ms: float | None = None  # unloaded TTFT: about one prompt's prefill
    # multi-turn: the share of turn k's prompt + reply that the chat template renders again
    # at the start of turn k+1 (below 1: it drops something, e.g. earlier reasoning)
    history_kept_share: float | None = None
    history_dropped: str | None = None


@dataclass(frozen=True)
class FrontendEvidence:
    """Front-end (render + derender) CPU per request, and its share of the engines' CPU."""

    cpu_ms_per_request: float | None = None
    cpu_share: float | None = None
    render_ms_per_request: float | None = None
    derender_ms_per_request: float | None = None
    placement: str | None = None
    requests: int | None = None
    source: str | None = None  # the counter it came from (ours, or a process's whole CPU)
    cores_busy: float | None = None  # process CPU source: the API server's cores in use
    undecided: str | None = None  # why the share cannot be judged

    def __post_init__(self) -> None:
        for what in ("cpu_ms_per_request", "render_ms_per_request", "derender_ms_per_request"):
            in_range(getattr(self, what), 0, MAX_MS_PER_REQUEST, what)
        if self.placement is not None:
            placement_name(self.placement)


def wake_text(points: Sequence[tuple[float, float, float]]) -> str:
    """Wake-up curve points (Calibration.wake_curve) as "+X ms (+Y% of the step) after
    S s, ..."."""
    return ", ".join(f"+{x:.0f} ms" + (f" (+{f:.0%} of the step)" if f else "") + f" after {s:g} s"
                     for s, x, f in points)


def _line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of y against x through `points`, neither below 0; flat at the
    mean where the x are not at least 2x apart (noise would make the slope)."""
    x, y = np.array(points, dtype=float).T
    apart = x.min() > 0 and x.max() >= 2 * x.min()
    slope = max(0.0, float(np.polyfit(x, y, 1)[0])) if apart else 0.0
    return max(0.0, float(np.mean(y - slope * x))), slope


@dataclass(frozen=True)
class Calibration:
    """Unloaded timings of one deployed instance (advisor.sweep.calibrate): TTFT at a few
    prompt lengths, fitted as `prefill_base_ms + prefill_ms_per_token x tokens`, and the
    decode step (median inter-token gap) at a few batch sizes."""

    prompt_tokens: list[int]
    ttft_ms: list[float]
    batches: list[int]
    step_ms: list[float]
    prefill_ms_per_token: float
    prefill_base_ms: float
    dtype: str | None = None  # what the engine ran in
    placement: str | None = None  # where it was measured
    # TTFT beyond back to back after the machine idled each time (empty: not measured),
    # and the prompt each of those requests sent (empty in runs before it was recorded)
    wake_idle_s: Sequence[float] = ()
    wake_extra_ms: Sequence[float] = ()
    wake_prompt_tokens: Sequence[float] = ()
    wake_host: str | None = None  # the host's own wake-up check, where one was made
    # per batch: the p99 ITL (each request's own, as the SLO counts it) that 9 in 10
    # unloaded requests stayed within; empty in runs before it was recorded
    tail_ms: Sequence[float] = ()

    def ttft_at(self, tokens: float) -> float:
        """Unloaded TTFT of a `tokens`-token prompt (ms), from the fit."""
        return self.prefill_base_ms + self.prefill_ms_per_token * tokens

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_json(cls, data: Any, file: str = "calibration") -> Calibration:
        return from_json(cls, data, file, "calibration")

    def summary(self) -> str:
        """One line: the unloaded TTFT per prompt length and decode step per batch size."""
        ttft = ", ".join(f"{p} tokens {t:.0f} ms" for p, t in zip(self.prompt_tokens, self.ttft_ms))
        tails = self.tail_ms or (None,) * len(self.batches)
        step = ", ".join(f"batch {b} {t:.1f} ms"
                         + (f" (9 in 10 requests' p99 ITL within {x:.0f})" if x else "")
                         for b, t, x in zip(self.batches, self.step_ms, tails))
        wake = wake_text(self.wake_curve()[1:])
        if not wake and self.wake_host:
            wake = f"not measured, the host does not slow down after an idle ({self.wake_host})"
        return (f"unloaded TTFT: {ttft}; decode step: {step}"
                + (f"; TTFT after an idle machine: {wake}" if wake else "")
                + f" ({self.dtype}, on {self.placement})")

    def wake_curve(self) -> tuple[tuple[float, float, float], ...]:
        """The wake-up curve as (idle s, extra ms, extra per ms of the step) points from
        (0, 0, 0); empty when it was not measured. Where prompts of two lengths were timed
        after the same idle, the extra is the line through their points against their
        back-to-back TTFTs (neither part below 0); else it is flat."""
        lengths = self.wake_prompt_tokens or (None,) * len(self.wake_idle_s)
        by_idle: dict[float, list[tuple[float, float]]] = {}
        for s, extra, p in zip(self.wake_idle_s, self.wake_extra_ms, lengths):
            by_idle.setdefault(s, []).append((self.ttft_at(p) if p else 0.0, extra))
        points = tuple((s, *_line(pts)) for s, pts in sorted(by_idle.items()))
        return ((0.0, 0.0, 0.0), *points) if points else ()

    def floors(self, prompt_tokens: float) -> dict[Metric, float]:
        """Each SLO metric's unloaded floor (ms): what one request alone gets (its TTFT; a
        decode step for each reading of the gaps between tokens)."""
        step = self.step_at(1)
        return {"ttft": self.ttft_at(prompt_tokens), "itl": step, "tpot": step}

    def step_at(self, batch: float) -> float:
        """Decode step at `batch` running requests (ms), linear between the measured ones."""
        return float(np.interp(batch, self.batches, self.step_ms))

    def tail_at(self, batch: float) -> float | None:
        """The unloaded p99 ITL that 9 in 10 requests stayed within at `batch` running
        requests (ms), linear between the measured ones; None where it was not recorded."""
        return float(np.interp(batch, self.batches, self.tail_ms)) if self.tail_ms else None


@dataclass(frozen=True)
class TurnEvidence:
    """Median TTFT at one late turn of the conversations (the guide: measure it on turn
    five), per placement, at the judged rate: context recomputed every turn shows here."""

    turn: int
    rate_rps: float
    collocated_ms: float | None = None
    disaggregated_ms: float | None = None
    bidirectional_ms: float | None = None


@dataclass(frozen=True)
class ImportedEvidence:
    """Runs another tool measured (`advisor import`): which tools, from which files, and
    what those files do not say, so that nothing the decision lacks is taken as known."""

    tools: list[str]
    sources: list[str]
    unknown: list[str]


@dataclass(frozen=True)
class Evidence:
    """What a decision rests on: the SLO (and the share of requests that must meet it),
    each placement at the judged rate, the workload, the transfer, the front end, the
    calibration."""

    slo: Slo
    collocated: PlacementEvidence
    workload: WorkloadEvidence
    disaggregated: PlacementEvidence | None = None
    kv_transfer: KVTransferEvidence | None = None
    frontend: FrontendEvidence | None = None
    calibration: Calibration | None = None
    judged_at: str | None = None  # which rate the placements are compared at, and why
    bidirectional: PlacementEvidence | None = None  # P/D reusing earlier turns' KV
    turns: TurnEvidence | None = None  # multi-turn runs: a late turn's TTFT per placement
    simulated: str | None = None  # predicted, not measured: by what (advisor plan)
    render_split: PlacementEvidence | None = None  # engines behind a separate render tier
    search_stopped: str | None = None  # what ended the search short of parting the intervals
    p2p: P2PEvidence | None = None  # the GPUs' P2P matrix, where one was read
    imported: ImportedEvidence | None = None  # measured by another tool: by what, what is unknown
    attainment: float = 0.9  # the share of requests that must meet every objective of `slo`

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_json(cls, data: Any, file: str = "evidence") -> Evidence:
        """Validated evidence (older files' form too); RunDataError names the file and the
        field."""
        return from_json(cls, _upgraded(data), file)


def _upgraded(data: Any) -> Any:
    """Older evidence's SLO ({ttft_ms, itl_ms, attainment, ...}) in today's form."""
    slo = data.get("slo") if isinstance(data, dict) else None
    if not isinstance(slo, dict) or "objectives" in slo or "attainment" in data:
        return data
    limits = {k.removesuffix("_ms"): v for k, v in slo.items()
              if k.endswith("_ms") and v is not None}
    return {**data, "slo": limits, **({"attainment": slo["attainment"]}
                                      if "attainment" in slo else {})}


def load(path: str | Path) -> Evidence:
    """Read and validate an evidence file (for a run directory's: RunDir.read_evidence)."""
    return Evidence.from_json(read_json_object(Path(path)), str(path))
