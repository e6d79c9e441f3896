"""A report's data, read from a run directory, independent of how it is rendered.

Nothing here raises on a damaged run directory except when there is nothing to
report at all (no readable run): every missing or corrupt file becomes a line
in `problems`, which the renderers show.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


class ReportError(ValueError):
    """The run directory cannot make a report (the message names the file)."""


@dataclass
class Run:
    """One placement at one rate."""

    placement: str
    rate: float
    result: dict
    records: list[dict]
    emulated: str | None = None


@dataclass
class ReportData:
    run_dir: Path
    runs: list[Run]
    manifest: dict | None = None
    evidence: dict | None = None
    recommendation: dict | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def placements(self) -> list[str]:
        return sorted({r.placement for r in self.runs}, key=lambda p: (not p.startswith("colloc"), p))

    def series(self, placement: str) -> list[Run]:
        return sorted((r for r in self.runs if r.placement == placement), key=lambda r: r.rate)

    @property
    def slo(self) -> dict:
        return (self.evidence or {}).get("slo") or {}

    @property
    def emulated(self) -> str | None:
        return next((r.emulated for r in self.runs if r.emulated), None)

    @property
    def title(self) -> str:
        cfg = (self.manifest or {}).get("config") or {}
        return f"{cfg.get('workload', 'workload')} on {cfg.get('model', 'a model')}"


def _json(path: Path, problems: list[str], required: bool = False):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        msg = f"{path.name} is missing"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        msg = f"{path.name} is corrupt ({type(e).__name__}: {e})"
    if required:
        raise ReportError(f"{path}: {msg.split(' ', 1)[1]}")
    problems.append(msg)
    return None


def _records(path: Path, problems: list[str]) -> list[dict]:
    rows = []
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        problems.append(f"{path.parent.parent.name}/{path.parent.name}/{path.name} unreadable: {e}")
        return rows
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            problems.append(f"{path.parent.parent.name}/{path.parent.name}/{path.name} line {no} "
                            "is corrupt and was skipped")
    return rows


def load(run_dir: str | Path) -> ReportData:
    """Read a sweep's run directory. ReportError when it is not one or holds no readable run."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir} is not a directory")
    problems: list[str] = []
    data = ReportData(run_dir, [], problems=problems)
    data.manifest = _json(run_dir / "manifest.json", problems)
    data.evidence = _json(run_dir / "evidence.json", problems)
    data.recommendation = _json(run_dir / "recommendation.json", problems)
    runs_dir = run_dir / "runs"
    for result_path in sorted(runs_dir.glob("*/rate-*/result.json")):
        result = _json(result_path, problems)
        if not isinstance(result, dict) or "request_rate" not in result:
            if result is not None:
                problems.append(f"{result_path.parent.name} of {result_path.parent.parent.name}: "
                                "result.json lacks request_rate")
            continue
        records = _records(result_path.parent / "requests.jsonl", problems)
        data.runs.append(Run(result_path.parent.parent.name, float(result["request_rate"]),
                             result, records, result.get("emulated")))
    if not data.runs:
        raise ReportError(f"{runs_dir}: no readable runs/<placement>/rate-<r>/result.json "
                          "(is this a sweep's run directory?)")
    return data


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    left: bool = False


def fmt(v) -> str:
    """One value as the report shows it: "-" for missing, 3 significant digits for floats."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def fmt_items(d: dict | None) -> str:
    """"key=value, ..." of a dict's present values (a decision row's evidence)."""
    return ", ".join(f"{k}={fmt(v)}" for k, v in (d or {}).items() if v is not None)


def table(data: ReportData) -> tuple[list[Column], list[dict]]:
    """Every placement x rate with counts, attainment and each latency percentile recorded."""
    pct_keys = sorted({k for r in data.runs for k in r.result
                       if k.startswith("p") and k.endswith("_ms") and k[1].isdigit()},
                      key=lambda k: (k.split("_", 1)[1], float(k[1:].split("_")[0])))
    cols = [Column("placement", "placement", True), Column("rate", "rate (req/s)"),
            Column("num_requests", "requests"), Column("completed", "completed"),
            Column("failed", "failed"), Column("slo_attainment", "attainment"),
            Column("request_goodput", "goodput (req/s)"), Column("median_ttft_ms", "TTFT median")]
    cols += [Column(k, k.removesuffix("_ms").replace("_", " ").upper()) for k in pct_keys]
    cols.append(Column("emulated", "emulated KV link", True))
    rows = []
    for p in data.placements:
        for run in data.series(p):
            row = {c.key: fmt(run.result.get(c.key)) for c in cols}
            row.update(placement=p, rate=fmt(run.rate), emulated=run.emulated or "",
                       failed=fmt(run.result.get("failed")))
            row["failed_any"] = bool(run.result.get("failed"))
            rows.append(row)
    return cols, rows


def setup(data: ReportData) -> list[tuple[str, str]]:
    """(label, value) pairs: hardware, probe, model, workload, SLO, versions, command line."""
    m = data.manifest or {}
    cfg, host, probe = m.get("config") or {}, m.get("host") or {}, m.get("probe") or {}
    links = probe.get("links") or {}
    items = [("model", f"{cfg.get('model')} ({cfg.get('dtype')}, {cfg.get('device')})"),
             ("workload", f"{cfg.get('workload')}, scale {cfg.get('scale') or 'auto'}, "
                          f"output scale {cfg.get('output_scale') or 'auto'}, seed {m.get('seed')}"),
             ("placements", ", ".join(data.placements)),
             ("SLO", ", ".join(f"{k} {v}" for k, v in data.slo.items()) or "-"),
             ("KV link", f"{cfg.get('connector')}" + (f", emulated {data.emulated}" if data.emulated else "")),
             ("host", f"{host.get('cpu')}, {host.get('cpus_usable')} usable cores "
                      f"({host.get('platform')})"),
             ("GPUs", ", ".join(g.get("name", "?") for g in probe.get("gpus") or [])
              or (probe.get("gpu_note") or "none")),
             ("measured links", ", ".join(f"{k} {v.get('gbps', 0):.2f} GB/s" for k, v in links.items()
                                          if isinstance(v, dict)) or "-"),
             ("versions", ", ".join(f"{k} {v}" for k, v in (m.get("versions") or {}).items() if v)),
             ("command line", " ".join(m.get("command") or []))]
    return items
