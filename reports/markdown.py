"""The report as GitHub-flavoured Markdown, with PNG plots beside it, linked relatively."""

from __future__ import annotations

import re

from reports.figures import Figure
from reports.model import P2P, Report


def _cell(v: object) -> str:
    """`v` as Markdown text on one line: HTML, code spans, links and table pipes shown as
    written, never rendered, and nothing that ends the line."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(v))
    return text.translate(_ESCAPED)


# no tag opens without "<"; code spans, links and emphasis need the rest
_ESCAPED = str.maketrans({"<": "&lt;", "\\": "\\\\", "`": "\\`", "|": "\\|", "[": "\\[",
                          "]": "\\]", "*": "\\*"})


def _fenced(lang: str, lines: list[str]) -> list[str]:
    """`lines` in a code fence longer than any run of backticks in them, so none closes it."""
    longest = max((len(run) for line in lines for run in re.findall("`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + lang, *lines, fence]


def png_name(fig: Figure) -> str:
    """The file a figure's PNG is written to, beside the Markdown that links it."""
    return f"report-{fig.name}.png"


def render(data: Report, figures: list[Figure]) -> str:
    """Markdown text linking `figures` (drawn with png=True) as `png_name` files."""
    rec = data.advice
    lines = [f"# advisor report: {_cell(data.title)}", ""]
    if data.problems:
        lines += ["> **Missing or damaged in this run directory:**"]
        lines += [f"> - {_cell(p)}" for p in data.problems] + [""]
    if data.emulated:
        lines += [f"> **KV transfers ran over an emulated link ({_cell(data.emulated)}).**", ""]
    if rec:
        lines += [f"## Recommendation: **{_cell(rec.action)}**", ""]
        lines += [f"- {_cell(r)}" for r in rec.reasons]
        if rec.secondary_actions:
            lines.append(f"- also: {_cell(', '.join(rec.secondary_actions))}")
        if rec.judged_at:
            lines.append(f"- rows judged at {_cell(rec.judged_at)}")
        lines += ["", "| row | fired | action | evidence |", "|---|---|---|---|"]
        for r in rec.rows:
            said = "**yes**" if r.fired else _cell(r.verdict)
            lines.append(f"| {_cell(r.id)} | {said} | {_cell(r.action)} | {_cell(r.evidence)} |")
    else:
        lines += ["## Recommendation", "", "No recommendation in this run directory."]
    if rec and rec.deploy_model is not None:
        lines += ["", "## Deploy with vLLM", "", "`advisor deploy RUN_DIR` prints these."]
        lines += [f"- {_cell(n)}" for n in rec.deploy_notes]
        for plan in rec.plans:
            mark = " (recommended)" if plan.recommended else ""
            lines += ["", f"### {_cell(plan.placement)}{mark}", "", *_fenced("sh", plan.shell)]
            lines += [f"- {_cell(n)}" for n in plan.notes]
    lines += ["", "## Plots", ""]
    for fig in figures:
        lines += [f"![{fig.name}]({png_name(fig)})", "", f"*{_cell(fig.caption)}*", ""]
    lines += [
        "## Every placement and rate",
        "",
        "SLO: " + _cell(data.slo.text or "-") + ". Latencies in ms.",
        "",
        "| " + " | ".join(_cell(c.title) for c in data.columns) + " |",
        "|" + "---|" * len(data.columns),
    ]
    lines += ["| " + " | ".join(_cell(r.cells[c.key]) for c in data.columns) + " |"
              for r in data.rows]
    if data.cores_note:
        lines += ["", _cell(data.cores_note)]
    lines += ["", "## Setup", ""] + [f"- **{_cell(k)}**: {_cell(v)}" for k, v in data.setup]
    if data.p2p:
        lines += _p2p(data.p2p)
    return "\n".join(lines) + "\n"


def _p2p(p2p: P2P) -> list[str]:
    """The P2P read matrix as a table, then the pairs the placement used."""
    lines = ["", "### P2P read matrix" + (f" ({_cell(p2p.source)})" if p2p.source else ""), "",
             "| | " + " | ".join(map(_cell, p2p.gpus)) + " |", "|" + "---|" * (len(p2p.gpus) + 1)]
    lines += ["| " + _cell(g) + " | " + " | ".join(map(_cell, row)) + " |"
              for g, row in zip(p2p.gpus, p2p.status)]
    if p2p.used or p2p.placed:
        lines += ["", _cell(f"P->D pairs used: {', '.join(p2p.used) or 'unknown'}"
                            + (f" ({p2p.placed})" if p2p.placed else ""))]
    return lines
