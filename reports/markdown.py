"""The report as GitHub-flavoured Markdown, with PNG plots beside it, linked relatively."""

from __future__ import annotations

from pathlib import Path

from advisor.rundata.files import write_atomic
from advisor.rundata.fmt import fmt_items
from reports import model
from reports.figures import Figure
from reports.model import ReportData


def _cell(v) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def render(data: ReportData, out_dir: Path, figures: list[Figure]) -> str:
    """Markdown text; writes `figures` (drawn with png=True) as `report-<plot>.png` files
    into out_dir, atomically (never through a symlink there)."""
    rec = data.recommendation
    lines = [f"# advisor report: {_cell(data.title)}", ""]
    if data.problems:
        lines += ["> **Missing or damaged in this run directory:**"]
        lines += [f"> - {_cell(p)}" for p in data.problems] + [""]
    if data.emulated:
        lines += [f"> **KV transfers ran over an emulated link ({_cell(data.emulated)}).**", ""]
    if rec:
        lines += [f"## Recommendation: **{rec.action}**", ""]
        lines += [f"- {_cell(r)}" for r in rec.reasons]
        if rec.secondary_actions:
            lines.append(f"- also: {', '.join(rec.secondary_actions)}")
        if rec.judged_at:
            lines.append(f"- rows judged at {_cell(rec.judged_at)}")
        lines += ["", "| row | fired | action | evidence |", "|---|---|---|---|"]
        for r in rec.rows:
            said = "**yes**" if r.fired else _cell(r.verdict)
            lines.append(f"| {r.id} | {said} | {r.action} | {_cell(fmt_items(r.evidence))} |")
    else:
        lines += ["## Recommendation", "", "No recommendation in this run directory."]
    if rec and rec.deploy:
        lines += ["", "## Deploy with vLLM", "", "`advisor deploy RUN_DIR` prints these."]
        lines += [f"- {_cell(n)}" for n in rec.deploy.notes]
        for plan in rec.deploy.plans:
            mark = " (recommended)" if plan.placement == rec.deploy.recommended else ""
            lines += ["", f"### {plan.placement}{mark}", "", "```sh", *plan.shell, "```"]
            lines += [f"- {_cell(n)}" for n in plan.notes]
    lines += ["", "## Plots", ""]
    for fig in figures:
        name = f"report-{fig.name}.png"
        write_atomic(out_dir / name, fig.png)
        lines += [f"![{fig.name}]({name})", "", f"*{_cell(fig.caption)}*", ""]
    columns, rows = model.table(data)
    lines += [
        "## Every placement and rate",
        "",
        "SLO: " + ", ".join(f"{k} {v}" for k, v in data.slo.items()) + ". Latencies in ms.",
        "",
        "| " + " | ".join(c.title for c in columns) + " |",
        "|" + "---|" * len(columns),
    ]
    lines += ["| " + " | ".join(_cell(r[c.key]) for c in columns) + " |" for r in rows]
    if note := model.cores_note(data):
        lines += ["", _cell(note)]
    lines += ["", "## Setup", ""] + [f"- **{k}**: {_cell(v)}" for k, v in model.setup(data)]
    return "\n".join(lines) + "\n"


def write(data: ReportData, path: Path, figures: list[Figure]) -> Path:
    write_atomic(path, render(data, path.parent, figures))
    return path
