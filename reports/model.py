"""A report's data, read from a run directory, independent of how it is rendered.

Nothing here raises on a damaged run directory except when there is nothing to
report at all (no readable run): every missing or corrupt file becomes a line
in `problems`, which the renderers show.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from advisor.rundata.evidence import Evidence
from advisor.rundata.files import RunDataError
from advisor.rundata.fmt import fmt
from advisor.rundata.recommendation import Recommendation
from advisor.rundata.result import RunResult
from advisor.rundata.rundir import EVIDENCE, MANIFEST, RECOMMENDATION, RunDir


@dataclass
class ReportData:
    run_dir: RunDir
    runs: list[RunResult]
    manifest: dict | None = None
    evidence: Evidence | None = None
    recommendation: Recommendation | None = None
    problems: list[str] = field(default_factory=list)

    def kind(self, placement: str) -> str | None:
        """collocated or disagg, as the placement's results say."""
        return next((r.kind for r in self.runs if r.placement == placement), None)

    @property
    def placements(self) -> list[str]:
        return sorted({r.placement for r in self.runs},
                      key=lambda p: (self.kind(p) != "collocated", p))

    def series(self, placement: str) -> list[RunResult]:
        return sorted((r for r in self.runs if r.placement == placement), key=lambda r: r.rate)

    @property
    def slo(self) -> dict:
        """The SLOs in force ({"ttft_ms": ..., "itl_ms": ..., "attainment": ...})."""
        if self.evidence is None:
            return {}
        return {k: v for k, v in dataclasses.asdict(self.evidence.slo).items() if v is not None}

    @property
    def emulated(self) -> str | None:
        return next((r.emulated for r in self.runs if r.emulated), None)

    @property
    def title(self) -> str:
        cfg = (self.manifest or {}).get("config") or {}
        title = f"{cfg.get('workload', 'workload')} on {cfg.get('model', 'a model')}"
        return f"SIMULATED: {title}" if self.simulated else title

    @property
    def simulated(self) -> str | None:
        """What predicted these results, when they were simulated rather than measured."""
        return (self.manifest or {}).get("simulated") or next(
            (r.described.simulated for r in self.runs if r.described.simulated), None)


def _optional(read, name: str, run_dir: RunDir, problems: list[str]):
    """What `read()` returns, or None with a line in `problems` saying what is wrong."""
    try:
        return read()
    except RunDataError as e:
        exists = run_dir.file(name).is_file()
        problems.append(f"{name} is corrupt ({e})" if exists else f"{name} is missing")
        return None


def load(path: str | Path) -> ReportData:
    """Read a sweep's run directory. RunDataError when it is not one or holds no readable run."""
    run_dir = RunDir.existing(path)
    problems: list[str] = []
    data = ReportData(run_dir, run_dir.read_runs(problems), problems=problems)
    data.manifest = _optional(run_dir.read_manifest, MANIFEST, run_dir, problems)
    data.evidence = _optional(run_dir.read_evidence, EVIDENCE, run_dir, problems)
    data.recommendation = _optional(run_dir.read_recommendation, RECOMMENDATION, run_dir, problems)
    if not data.runs and data.recommendation is None:
        raise RunDataError(
            f"{run_dir.path / 'runs'}: no readable "
            "runs/<placement>/rate-<r>/result.json (is this a sweep's run directory?)"
        )
    return data


BUSY_SHARE = 0.9  # a run that kept this share of the host's cores busy is marked


def busy_host(data: ReportData) -> int | None:
    """This host's usable cores when the instances ran on it (the sweep launched them), so
    that their CPU and the client's add up to the host's load; else None."""
    m = data.manifest or {}
    cfg = m.get("config") or {}
    if not m or cfg.get("collocated_url") or cfg.get("disagg_url") or data.simulated:
        return None
    return (m.get("host") or {}).get("cpus_usable")


def fills_host(busy: float | None, cores: int | None) -> bool:
    """Whether `busy` cores (RunResult.host_cores_busy) are BUSY_SHARE of the host's
    `cores` or more (False when either is unknown)."""
    return busy is not None and bool(cores) and busy >= BUSY_SHARE * cores


def _cores(run: RunResult, cores: int | None) -> tuple[str, bool]:
    """The run's CPU cores busy as "instances + client" and whether it kept at least
    BUSY_SHARE of the host's `cores` busy."""
    engines, client = run.cores_busy()
    busy = fills_host(run.host_cores_busy(), cores)
    return f"{fmt(engines)} + {fmt(client)}" + (" *" if busy else ""), busy


def cores_note(data: ReportData) -> str | None:
    """What the table's * says, when a run has one."""
    cores = busy_host(data)
    if not any(_cores(r, cores)[1] for r in data.runs):
        return None
    return (f"* the instances and the measuring client together kept {BUSY_SHARE:.0%} or more "
            f"of this host's {cores} cores busy: latency tails there include waiting for a "
            "core, which a host with cores to spare would not show.")


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    left: bool = False


def table(data: ReportData) -> tuple[list[Column], list[dict]]:
    """Every placement x rate with counts, attainment and each latency percentile recorded."""
    pct_keys = sorted(
        {
            k
            for r in data.runs
            for k in r.stats
            if k.startswith("p") and k.endswith("_ms") and k[1].isdigit()
        },
        key=lambda k: (k.split("_", 1)[1], float(k[1:].split("_")[0])),
    )
    cols = [
        Column("placement", "placement", True),
        Column("rate", "rate (req/s)"),
        Column("num_requests", "requests"),
        Column("completed", "completed"),
        Column("failed", "failed"),
        Column("slo_attainment", "attainment"),
        Column("request_goodput", "goodput (req/s)"),
        Column("pace", "kept pace (completed / arrived)"),
        Column("median_ttft_ms", "TTFT median"),
    ]
    cols += [Column(k, k.removesuffix("_ms").replace("_", " ").upper()) for k in pct_keys]
    cols.append(Column("emulated", "emulated KV link", True))
    cores = busy_host(data)
    if any(x is not None for r in data.runs for x in r.cores_busy()):
        cols.append(Column("cores", "CPU cores busy (instances + client)"))
    rows = []
    for p in data.placements:
        for run in data.series(p):
            row = {c.key: fmt(run.shown(c.key)) for c in cols}
            row.update(
                placement=p,
                rate=fmt(run.rate),
                emulated=run.emulated or "",
                failed=fmt(run.get("failed")),
                pace=fmt(run.pace()),
            )
            row["cores"] = _cores(run, cores)[0]
            row["failed_any"] = bool(run.get("failed"))
            rows.append(row)
    return cols, rows


def setup(data: ReportData) -> list[tuple[str, str]]:
    """(label, value) pairs: hardware, probe, model, workload, SLO, versions, command line."""
    m = data.manifest or {}
    cfg, host, probe = m.get("config") or {}, m.get("host") or {}, m.get("probe") or {}
    links, ran, sized = probe.get("links") or {}, m.get("dtype") or {}, m.get("sizing") or {}
    items = [("simulated", data.simulated)] if data.simulated else []
    items += [
        ("model", f"{cfg.get('model')} ({ran.get('ran', cfg.get('dtype'))}, {cfg.get('device')})"),
        ("dtype", f"{ran.get('ran')}: {ran.get('reason')}" if ran else cfg.get("dtype")),
        (
            "workload",
            f"{cfg.get('workload')}, scale {fmt(sized.get('scale', cfg.get('scale')))}, "
            f"output scale {fmt(sized.get('output_scale', cfg.get('output_scale')))}"
            f"{' (sized from the calibration)' if sized else ''}, seed {m.get('seed')}",
        ),
        ("placements", ", ".join(data.placements)),
        ("SLO", ", ".join(f"{k} {v}" for k, v in data.slo.items()) or "-"),
        (
            "KV link",
            f"{cfg.get('connector')}" + (f", emulated {data.emulated}" if data.emulated else ""),
        ),
        (
            "host",
            f"{host.get('cpu')}, {host.get('cpus_usable')} usable cores ({host.get('platform')})",
        ),
        (
            "GPUs",
            ", ".join(g.get("name", "?") for g in probe.get("gpus") or [])
            or (probe.get("gpu_note") or "none"),
        ),
        (
            "measured links",
            ", ".join(
                f"{k} {v.get('gbps', 0):.2f} GB/s" for k, v in links.items() if isinstance(v, dict)
            )
            or probe.get("links_note") or "-",
        ),
        ("versions", ", ".join(f"{k} {v}" for k, v in (m.get("versions") or {}).items() if v)),
        ("calibration", data.evidence.calibration.summary()
         if data.evidence and data.evidence.calibration else "-"),
        ("sizing", "; ".join(sized.get("notes") or []) or "as given"),
        ("command line", " ".join(m.get("command") or [])),
    ]
    return items
