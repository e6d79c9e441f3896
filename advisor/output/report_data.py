"""A run directory read into what a report shows (reports.model.Report): its runs as
series for the plots, its recommendation worded, every run as a table row, its setup.

Nothing here raises on a damaged run directory except when there is nothing to report at
all (no readable run): every missing or corrupt file becomes a line in `problems`, which
the renderers show.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from advisor.rundata.evidence import Evidence
from advisor.rundata.files import RunDataError
from advisor.rundata.formatting import fmt, fmt_items
from advisor.rundata.manifest import Host, Manifest, ProbeFindings, RunConfig
from advisor.rundata.recommendation import Recommendation
from advisor.rundata.result import RunResult
from advisor.rundata.rundir import EVIDENCE, MANIFEST, RECOMMENDATION, RunDir
from reports import model
from reports.model import Column, Report, SloLines

BUSY_SHARE = 0.9  # a run that kept this share of the host's cores busy is marked


@dataclasses.dataclass
class _Read:
    """What a run directory holds, as read (None where missing or damaged)."""

    run_dir: RunDir
    runs: list[RunResult]
    problems: list[str]
    manifest: Manifest | None = None
    evidence: Evidence | None = None
    recommendation: Recommendation | None = None

    def placements(self) -> list[str]:
        """Collocated first, then by name."""
        return sorted({r.placement for r in self.runs if r.placement is not None},
                      key=lambda p: (self.kind(p) != "collocated", p))

    def kind(self, placement: str) -> str | None:
        return next((r.kind for r in self.runs if r.placement == placement), None)

    def series(self, placement: str) -> list[RunResult]:
        return sorted((r for r in self.runs if r.placement == placement),
                      key=lambda r: r.rate or 0.0)

    @property
    def simulated(self) -> str | None:
        """What predicted these results, when they were simulated rather than measured."""
        return (self.manifest.simulated if self.manifest else None) or next(
            (r.described.simulated for r in self.runs if r.described.simulated), None)

    @property
    def imported(self) -> str | None:
        """Which tools measured these results, when another tool did (`advisor import`)."""
        said = self.manifest.imported if self.manifest else None
        if said is None or not said.tools:
            return None
        return f"measured by {', '.join(said.tools)}; not in their files: " + "; ".join(
            said.unknown or ["-"])

    @property
    def emulated(self) -> str | None:
        return next((r.emulated for r in self.runs if r.emulated), None)

    @property
    def slo(self) -> SloLines:
        """The SLO in force, as the report draws it (none without evidence)."""
        ev = self.evidence
        if ev is None:
            return SloLines()
        return SloLines(ev.slo.for_share(ev.attainment), ev.slo.get("ttft"), ev.slo.gap_ms,
                        ev.attainment)


_T = TypeVar("_T")


def _optional(read: Callable[[], _T], name: str, run_dir: RunDir, problems: list[str]
              ) -> _T | None:
    """What `read()` returns, or None with a line in `problems` saying what is wrong."""
    try:
        return read()
    except RunDataError as e:
        exists = run_dir.file(name).is_file()
        problems.append(f"{name} is corrupt ({e})" if exists else f"{name} is missing")
        return None


def load(path: str | Path) -> Report:
    """A sweep's (or a plan's) run directory as a report. RunDataError when it is not one
    or holds no readable run."""
    run_dir = RunDir.existing(path)
    problems: list[str] = []
    data = _Read(run_dir, run_dir.read_runs(problems), problems)
    data.manifest = _optional(run_dir.read_manifest, MANIFEST, run_dir, problems)
    data.evidence = _optional(run_dir.read_evidence, EVIDENCE, run_dir, problems)
    data.recommendation = _optional(run_dir.read_recommendation, RECOMMENDATION, run_dir,
                                    problems)
    if not data.runs and data.recommendation is None:
        raise RunDataError(
            f"{run_dir.path / 'runs'}: no readable "
            "runs/<placement>/rate-<r>/result.json (is this a sweep's run directory?)"
        )
    return _report(data)


def _report(data: _Read) -> Report:
    cfg = data.manifest.config if data.manifest else RunConfig()
    title = f"{cfg.workload or 'workload'} on {cfg.model or 'a model'}"
    p2p = _p2p(data)
    columns, rows = table(data)
    kv_ms, kv_share = _kv_transfers(data.runs)
    return Report(
        title=f"SIMULATED: {title}" if data.simulated else title,
        run_name=data.run_dir.name, series=_series(data), slo=data.slo,
        advice=_advice(data.recommendation), problems=data.problems, emulated=data.emulated,
        created=data.manifest.created if data.manifest else None, columns=columns, rows=rows,
        cores_note=cores_note(data), setup=setup(data),
        p2p=p2p,
        kv_transfer_ms=kv_ms, kv_transfer_share=kv_share, timeline_rate=_timeline_rate(data),
        pareto=_pareto(data))


def _pareto(data: _Read) -> list[model.ParetoView]:
    """A plan's Pareto points, each with its placement's kind."""
    rec = data.recommendation
    return [model.ParetoView(p.placement, data.kind(p.placement) or "disagg",
                             p.tokens_per_s_per_user, p.tokens_per_s_per_gpu, p.meets_slo,
                             p.frontier, p.chosen)
            for p in (rec.pareto or [] if rec else [])]


def _p2p(data: _Read) -> model.P2P | None:
    """The P2P matrix the evidence carries, with the pairs the placement used; else the one
    the manifest's probe recorded (run directories from before the evidence had it)."""
    ev = data.evidence.p2p if data.evidence else None
    if ev is not None:
        return model.P2P(ev.gpus, ev.status, ev.source,
                         [f"GPU{p.prefill_gpu}->GPU{p.decode_gpu} {p.status}" for p in ev.used],
                         ev.placed)
    probe = data.manifest.probe if data.manifest else None
    matrix = probe.p2p if probe else None
    return model.P2P(matrix.gpus, matrix.status) if matrix else None


def _series(data: _Read) -> list[model.Series]:
    rate = _timeline_rate(data)
    out = []
    for p in data.placements():
        runs = data.series(p)
        emulated = next((r.emulated for r in runs if r.emulated), None)
        color = "bidirectional" if p.startswith("disagg-bidi") else data.kind(p) or "disagg"
        at = next((r for r in runs if r.rate == rate), None)
        recs = [x for x in ((at.records or []) if at else []) if x.get("chunks")
                and x.get("sent") is not None]
        out.append(model.Series(
            p, color, f"{p} (emulated link {emulated})" if emulated else p,
            [_point(r) for r in runs],
            [model.Span(x["sent"], x["chunks"]) for x in sorted(recs, key=lambda x: x["sent"])]))
    return out


def _point(run: RunResult) -> model.Point:
    s = run.stats
    turns = [model.Turn(t.turn, t.median_ttft_ms) for t in s.per_turn or []]
    return model.Point(run.rate or 0.0, s.slo_attainment or 0.0, s.latency_ms("itl", "p50"),
                       s.latency_ms("itl", "p99"), s.latency_ms("ttft", "median"),
                       s.latency_ms("ttft", "p99"), turns)


def _timeline_rate(data: _Read) -> float:
    """The highest rate every placement ran (the timeline's)."""
    rates = [max(r.rate or 0.0 for r in data.series(p)) for p in data.placements()]
    return min(rates) if rates else 0.0


def _kv_transfers(runs: list[RunResult]) -> tuple[list[float], list[float]]:
    """Each disaggregated request's KV transfer (ms), and its share of that request's TTFT."""
    ms, share = [], []
    for run in runs:
        for rec in run.records or []:
            t = rec.get("kv_transfer_ms")
            if t is not None and rec.get("ok") and rec.get("chunks"):
                ms.append(t)
                ttft = (rec["chunks"][0] - rec["sent"]) * 1000
                share.append(t / ttft if ttft > 0 else math.nan)
    return ms, share


def _advice(rec: Recommendation | None) -> model.Advice | None:
    if rec is None:
        return None
    rows = [model.AdviceRow(r.id, r.fired, r.verdict, r.action, fmt_items(r.evidence),
                            fmt_items(r.thresholds)) for r in rec.rows]
    advice = model.Advice(rec.action, rec.reasons, rec.secondary_actions, rec.judged_at, rows)
    if (cmp := rec.comparison) is not None:
        advice = dataclasses.replace(advice, ratio=cmp.ratio,
                                     collocated_rps=cmp.collocated_max_goodput_rps,
                                     disaggregated_rps=cmp.disaggregated_max_goodput_rps)
    if (dep := rec.deploy) is not None:
        plans = [model.DeployView(p.placement, p.shell, p.notes, p.placement == dep.recommended)
                 for p in dep.plans]
        advice = dataclasses.replace(advice, deploy_model=dep.model, deploy_gpus=dep.gpus,
                                     deploy_notes=dep.notes, plans=plans)
    return advice


def busy_host(data: _Read) -> int | None:
    """This host's usable cores when the instances ran on it (the sweep launched them), so
    that their CPU and the client's add up to the host's load; else None."""
    m = data.manifest
    if m is None or m.by_url or data.simulated or data.imported:
        return None
    return m.host.cpus_usable


def fills_host(busy: float | None, cores: int | None) -> bool:
    """Whether `busy` cores (RunResult.host_cores_busy) are BUSY_SHARE of the host's
    `cores` or more (False when either is unknown)."""
    return busy is not None and cores is not None and cores > 0 and busy >= BUSY_SHARE * cores


def _cores(run: RunResult, cores: int | None) -> tuple[str, bool]:
    """The run's CPU cores busy as "instances + client" and whether it kept at least
    BUSY_SHARE of the host's `cores` busy."""
    engines, client = run.cores_busy()
    busy = fills_host(run.host_cores_busy(), cores)
    return f"{fmt(engines)} + {fmt(client)}" + (" *" if busy else ""), busy


def cores_note(data: _Read) -> str | None:
    """What the table's * says, when a run has one."""
    cores = busy_host(data)
    if not any(_cores(r, cores)[1] for r in data.runs):
        return None
    return (f"* the instances and the measuring client together kept {BUSY_SHARE:.0%} or more "
            f"of this host's {cores} cores busy: latency tails there include waiting for a "
            "core, which a host with cores to spare would not show.")


def table(data: _Read) -> tuple[list[Column], list[model.TableRow]]:
    """Every placement x rate with counts, attainment and each latency percentile recorded."""
    pct_keys = sorted(
        {f"{p}_{metric}_ms" for r in data.runs for metric, lat in r.stats.latency.items()
         for p in lat.percentiles},
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
    if any(r.client_bound() for r in data.runs):
        cols.append(Column("client_bound", "measuring client", True))
    rows = []
    for p in data.placements():
        for run in data.series(p):
            cells = {c.key: fmt(run.shown(c.key)) for c in cols}
            cells.update(placement=p, rate=fmt(run.rate), emulated=run.emulated or "",
                         failed=fmt(run.stats.failed), pace=fmt(run.pace()),
                         cores=_cores(run, cores)[0],
                         client_bound=f"{run.client_bound()}; not used for the decision"
                         if run.client_bound() else "")
            rows.append(model.TableRow(cells, bool(run.stats.failed)))
    return cols, rows


def setup(data: _Read) -> list[tuple[str, str]]:
    """(label, value) pairs: hardware, probe, model, workload, SLO, versions, command line."""
    m = data.manifest
    cfg, host = (m.config, m.host) if m else (RunConfig(), Host())
    probe = (m.probe if m else None) or ProbeFindings()
    ran, sized = (m.dtype, m.sizing) if m else (None, None)
    links = probe.links or {}
    items = [("simulated", data.simulated)] if data.simulated else []
    items += [("imported", data.imported)] if data.imported else []
    items += [
        ("model", f"{cfg.model} ({ran.ran if ran else cfg.dtype}, {cfg.device})"),
        ("dtype", f"{ran.ran}: {ran.reason}" if ran else str(cfg.dtype)),
        (
            "workload",
            f"{cfg.workload}, scale {fmt(sized.scale if sized else cfg.scale)}, "
            f"output scale {fmt(sized.output_scale if sized else cfg.output_scale)}"
            f"{' (sized from the calibration)' if sized else ''}, seed {m.seed if m else None}",
        ),
        ("placements", ", ".join(data.placements())),
        ("SLO", data.slo.text or "-"),
        (
            "KV link",
            f"{cfg.connector}" + (f", emulated {data.emulated}" if data.emulated else ""),
        ),
        (
            "host",
            f"{host.cpu}, {host.cpus_usable} usable cores ({host.platform})",
        ),
        (
            "GPUs",
            ", ".join(g.name for g in probe.gpus) or (probe.gpu_note or "none"),
        ),
        (
            "measured links",
            ", ".join(f"{k} {v.gbps:.2f} GB/s" for k, v in links.items())
            or probe.links_note or "-",
        ),
        ("versions", ", ".join(f"{k} {v}" for k, v in
                               (dataclasses.asdict(m.versions) if m else {}).items() if v)),
        ("calibration", data.evidence.calibration.summary()
         if data.evidence and data.evidence.calibration else "-"),
        ("sizing", "; ".join(sized.notes if sized else ()) or "as given"),
        ("command line", " ".join(m.command if m else [])),
    ]
    return items
