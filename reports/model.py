"""A report as the renderers take it: plain values, already worded and formatted where they
are shown as text, and the numbers the plots draw. Nothing here reads a file: the advisor
builds a `Report` from a run directory (advisor.output.report_data), and any other source
of the same values makes the same report."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Turn:
    """One turn index of a multi-turn run."""

    turn: int
    median_ttft_ms: float | None


@dataclass(frozen=True)
class Point:
    """One placement at one rate, as the plots draw it (latencies in ms)."""

    rate: float
    attainment: float
    p50_itl_ms: float | None = None
    p99_itl_ms: float | None = None
    median_ttft_ms: float | None = None
    p99_ttft_ms: float | None = None
    per_turn: list[Turn] = field(default_factory=list)


@dataclass(frozen=True)
class Span:
    """One request on the timeline: when it was sent and when each chunk came (seconds
    since its run started)."""

    sent: float
    chunks: list[float]


@dataclass(frozen=True)
class Series:
    """A placement's runs, by rate; `timeline` holds its requests at the report's
    timeline rate."""

    placement: str
    color: str  # collocated | disagg | bidirectional | render-split
    label: str  # its name, with the emulated link where there was one
    points: list[Point]
    timeline: list[Span] = field(default_factory=list)


@dataclass(frozen=True)
class AdviceRow:
    id: str
    fired: bool
    verdict: str
    action: str
    evidence: str
    thresholds: str


@dataclass(frozen=True)
class DeployView:
    placement: str
    shell: list[str]
    notes: list[str]
    recommended: bool


@dataclass(frozen=True)
class Advice:
    """The recommendation as the report words it."""

    action: str
    reasons: list[str]
    secondary_actions: list[str]
    judged_at: str | None
    rows: list[AdviceRow]
    # disaggregated over collocated goodput, and the two goodputs (req/s), where compared
    ratio: float | None = None
    disaggregated_rps: float | None = None
    collocated_rps: float | None = None
    deploy_model: str | None = None  # None: no deploy section
    deploy_gpus: list[int] = field(default_factory=list)
    deploy_notes: list[str] = field(default_factory=list)
    plans: list[DeployView] = field(default_factory=list)


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    left: bool = False


@dataclass(frozen=True)
class TableRow:
    cells: dict[str, str]  # by column key
    failed: bool = False  # some of its requests failed


@dataclass(frozen=True)
class ParetoView:
    """One placement at one rate on the plan's Pareto plot."""

    placement: str
    kind: str  # collocated | disagg
    per_user: float  # tokens/s each user sees
    per_gpu: float  # output tokens/s per GPU
    meets_slo: bool
    frontier: bool
    chosen: bool


@dataclass(frozen=True)
class P2P:
    """The GPUs' P2P read matrix, and what a placement made of it: the P->D pairs its KV
    crosses (`GPU0->GPU2 OK`) and how they were chosen, where known."""

    gpus: list[str]
    status: list[list[str]]
    source: str | None = None
    used: list[str] = field(default_factory=list)
    placed: str | None = None


@dataclass(frozen=True)
class SloLines:
    """The SLO as a report draws it: the TTFT and ITL limits its plots mark, the share of
    requests that must meet it, and its text (ttft:2000 p99_itl:50 and what each holds)."""

    text: str = ""
    ttft_ms: float | None = None
    itl_ms: float | None = None
    attainment: float | None = None


@dataclass(frozen=True)
class Report:
    """Everything a report shows."""

    title: str
    run_name: str
    series: list[Series]
    slo: SloLines
    advice: Advice | None = None
    problems: list[str] = field(default_factory=list)  # what is missing or damaged
    emulated: str | None = None  # the emulated KV link, where transfers ran over one
    created: str | None = None
    columns: list[Column] = field(default_factory=list)  # every placement x rate
    rows: list[TableRow] = field(default_factory=list)
    cores_note: str | None = None
    setup: list[tuple[str, str]] = field(default_factory=list)
    p2p: P2P | None = None
    kv_transfer_ms: list[float] = field(default_factory=list)  # per disaggregated request
    kv_transfer_share: list[float] = field(default_factory=list)  # of that request's TTFT
    timeline_rate: float = 0.0  # the highest rate every placement ran
    pareto: list[ParetoView] = field(default_factory=list)  # a plan's, where it has one

    @property
    def measured(self) -> bool:
        """Whether any run is in it (no plot without)."""
        return any(s.points for s in self.series)

    @property
    def multi_turn(self) -> bool:
        return any(p.per_turn for s in self.series for p in s.points)
