"""The recommendation: the action, why, every decision-table row with its numbers, and the
commands that deploy it. `advisor.decide` makes it once; the console, the reports,
`advisor deploy` and the planner read it. Written as `recommendation.json`."""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from advisor.rundata.typed_json import from_json


@dataclass(frozen=True)
class DecisionRow:
    """One row of the guide's table: whether it fired, on which numbers, against which
    thresholds; `undecided` says why the evidence could not say yes or no."""

    id: str
    situation: str
    action: str
    fired: bool
    evidence: dict[str, Any] = field(default_factory=dict)
    thresholds: dict[str, Any] = field(default_factory=dict)
    undecided: str | None = None

    @property
    def verdict(self) -> str:
        return "yes" if self.fired else f"undecided: {self.undecided}" if self.undecided else "no"


@dataclass(frozen=True)
class Comparison:
    """The two placements' max goodputs and whether their intervals part them."""

    collocated_max_goodput_rps: float
    disaggregated_max_goodput_rps: float
    ratio: float | None
    # NOTE: defaults, so that files written before the intervals existed still read
    collocated_interval_rps: list[float | None] | None = None
    disaggregated_interval_rps: list[float | None] | None = None
    confident: bool = False
    confidence: str = ""


@dataclass(frozen=True)
class Rejudged:
    """The comparison again from the same runs under one SLO definition
    (advisor.goodput.robustness): which way it goes, the goodputs, their intervals, where
    the ratio surely lies, what the rates tried leave open, and whether it agrees with the
    verdict's own definition (the first)."""

    slo: str  # as the flags write it: ttft:2000 tpot:50
    defined: str  # what each objective holds (Slo.stated)
    verdict: str  # disaggregate | stay-collocated | within noise
    collocated_rps: float
    disaggregated_rps: float
    collocated_interval_rps: list[float | None]
    disaggregated_interval_rps: list[float | None]
    ratio_interval: list[float | None] | None = None  # the winner's over the other's
    unbounded: list[str] = field(default_factory=list)
    holds: bool = True

    @property
    def line(self) -> str:
        """One line: under ttft:2000 tpot:50 (...): disaggregate, 1.8x to 4.1x (holds)."""
        got = self.verdict
        if self.ratio_interval is not None:
            lo, hi = self.ratio_interval
            got += f", {lo:.2f}x to " + ("any higher" if hi is None else f"{hi:.2f}x")
        else:
            got += (f" ({self.collocated_rps:.3g} collocated against "
                    f"{self.disaggregated_rps:.3g} disaggregated req/s)")
        if self.unbounded:
            got += f"; {'; '.join(self.unbounded)}"
        return f"under {self.defined}: {got}"


@dataclass(frozen=True)
class Command:
    """One process to start: its environment and argv, and the host it runs on (None: the
    one host, unnamed)."""

    role: str  # collocated | prefill | decode | proxy | render | engine | front
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    host: str | None = None

    def shell(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return (env + " " if env else "") + shlex.join(self.argv)

    def to_json(self) -> dict[str, Any]:
        """As written: `host` only where one is named."""
        out = asdict(self)
        if self.host is None:
            del out["host"]
        return out


@dataclass(frozen=True)
class DeployPlan:
    """How to run one placement: the commands, in start order, and what they assume."""

    placement: str  # collocated | disaggregated | disaggregated-bidirectional | render-split
    commands: list[Command]
    notes: list[str] = field(default_factory=list)

    @property
    def shell(self) -> list[str]:
        return [c.shell() for c in self.commands]


@dataclass(frozen=True)
class DeployCommands:
    """The vLLM commands for every placement measured; `recommended` names the advised one
    (None when the advice is no placement, e.g. measure-first)."""

    model: str
    gpus: list[int]
    recommended: str | None
    plans: list[DeployPlan]
    notes: list[str] = field(default_factory=list)
    measured_on: str | None = None  # the engine, hardware and model the advice came from
    # why these commands are not what was measured (another model, GPUs from a CPU run):
    # the recommended placement's shape only, not a recommendation; None: they are
    elsewhere: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Without measured_on and elsewhere where they are unknown (None)."""
        out = {k: v for k, v in asdict(self).items()
               if not (k in ("measured_on", "elsewhere") and v is None)}
        out["plans"] = [{"placement": p.placement, "commands": [c.to_json() for c in p.commands],
                         "shell": p.shell, "notes": p.notes} for p in self.plans]
        return out


@dataclass(frozen=True)
class PlacementRank:
    """A simulated placement's max goodput, per GPU too (`advisor plan` ranks by it)."""

    placement: str
    kind: str
    tp: int
    gpus: int
    max_goodput_rps: float
    goodput_per_gpu: float
    interval_rps: list[float | None]


@dataclass(frozen=True)
class ParetoPoint:
    """One simulated placement at one rate: output tokens/s per GPU against tokens/s each
    user sees (1000 / mean TPOT ms), whether it meets the SLO, and its place on the frontier
    (no other point is better on both axes) and in the choice."""

    placement: str
    rate_rps: float
    tokens_per_s_per_user: float
    tokens_per_s_per_gpu: float
    goodput_per_gpu: float  # requests/s meeting the SLO, per GPU
    meets_slo: bool
    frontier: bool = False
    chosen: bool = False  # the frontier point meeting the SLO with the most goodput per GPU


# fields written only where they are set: a plain sweep's file has no plan's ranking
_OPTIONAL = ("deploy", "ranking", "compare", "imported", "pareto", "measured_on",
             "robustness")


@dataclass(frozen=True)
class Recommendation:
    """What `advisor.decide.table.recommend` says of one evidence; never changed after,
    only extended by `dataclasses.replace` (the deploy commands, a plan's ranking)."""

    action: str
    reasons: list[str]
    secondary_actions: list[str]
    comparison: Comparison | None
    rows: list[DecisionRow]
    thresholds: dict[str, float]
    judged_at: str | None = None
    calibration: str | None = None
    simulated: str | None = None  # what predicted it, when nothing was measured
    imported: str | None = None  # which tool measured it, and what its files do not say
    deploy: DeployCommands | None = None
    ranking: list[PlacementRank] | None = None  # `advisor plan`: placements by goodput per GPU
    # `advisor plan --calibrate`: predicted beside measured
    compare: list[dict[str, Any]] | None = None
    pareto: list[ParetoPoint] | None = None  # `advisor plan`: every placement x rate, frontier
    measured_on: str | None = None  # the engine, hardware and model (advisor.deploy.origin)
    # the comparison under each SLO definition the field uses, the verdict's own first
    robustness: list[Rejudged] | None = None

    def row(self, row_id: str) -> DecisionRow | None:
        return next((r for r in self.rows if r.id == row_id), None)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["rows"] = [{**asdict(r), "verdict": r.verdict} for r in self.rows]
        if self.deploy is not None:
            out["deploy"] = self.deploy.to_json()
        return {k: v for k, v in out.items() if not (k in _OPTIONAL and v is None)}

    @classmethod
    def from_json(cls, data: dict[str, Any], file: str) -> Recommendation:
        """Validated, naming `file` and the field (advisor.rundata.typed_json)."""
        data = dict(data)
        if isinstance(data.get("rows"), list):  # derived: `DecisionRow.verdict`
            data["rows"] = [_without(r, "verdict") for r in data["rows"]]
        deploy = data.get("deploy")
        if isinstance(deploy, dict) and isinstance(deploy.get("plans"), list):
            data["deploy"] = {**deploy, "plans": [_without(p, "shell") for p in deploy["plans"]]}
        return from_json(cls, data, file)


def _without(obj: Any, key: str) -> Any:
    return {k: v for k, v in obj.items() if k != key} if isinstance(obj, dict) else obj
