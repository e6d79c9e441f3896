"""Which plots a report has, with their captions (shared by the HTML and Markdown renderers)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import matplotlib.figure

from reports import plots
from reports.model import Report


@dataclass(frozen=True)
class FigureSpec:
    name: str  # file stem for the PNG
    caption: str
    make: Callable[[], matplotlib.figure.Figure]


@dataclass(frozen=True)
class Figure:
    """One plot, drawn once, in the formats the report asked for."""

    name: str
    caption: str
    svg: str | None  # inline SVG text, for HTML
    png: bytes | None  # PNG bytes, for Markdown


def draw(data: Report, other: Report | None = None, svg: bool = True,
         png: bool = True) -> list[Figure]:
    """Every plot of the report (`figure_specs`), each built once and saved as asked."""
    return [Figure(s.name, s.caption, *plots.encoded(s.make(), svg, png))
            for s in figure_specs(data, other)]


def figure_specs(data: Report, other: Report | None = None) -> list[FigureSpec]:
    if not data.measured:  # the SLO was out of reach: nothing was measured to plot
        return []
    specs = [
        FigureSpec(
            "itl",
            "p50 (dashed) and p99 (solid) inter-token latency against request rate; "
            "the dotted line is the ITL SLO.",
            lambda: plots.itl_vs_rate(data),
        ),
        FigureSpec(
            "ttft",
            "Median (dashed) and p99 (solid) time to first token; the dotted line is "
            "the TTFT SLO. Disaggregated TTFT includes the KV transfer.",
            lambda: plots.ttft_vs_rate(data),
        ),
        FigureSpec(
            "attainment",
            "Share of requests meeting every SLO; dashed verticals mark each "
            "placement's highest rate that meets the target.",
            lambda: plots.attainment_vs_rate(data),
        ),
        FigureSpec(
            "kv_transfer",
            "KV transfer time per disaggregated request, and its share of that request's TTFT.",
            lambda: plots.kv_transfer(data),
        ),
        FigureSpec(
            "timeline",
            "Each request at the highest rate both placements ran: waiting "
            "(grey), decoding (colour), and gaps over the ITL SLO (|): "
            "collocated prefills stall running decodes.",
            lambda: plots.timeline(data),
        ),
    ]
    if data.pareto:
        specs.append(FigureSpec(
            "pareto",
            "Simulated: each placement at each rate, output tokens/s per GPU against tokens/s "
            "per user; the line joins the frontier no other point beats on both, hollow "
            "points miss the SLO, the ring is the frontier point meeting it with the most "
            "goodput per GPU.",
            lambda: plots.pareto(data)))
    if data.multi_turn:
        specs.append(FigureSpec(
            "ttft_by_turn",
            "Median TTFT by turn of the conversations (the guide: measure TTFT on turn five); "
            "context that is recomputed rather than reused grows it turn by turn.",
            lambda: plots.ttft_by_turn(data)))
    if other is not None:
        specs.append(
            FigureSpec(
                "compare",
                f"This run (solid) against {other.run_name} (dashed).",
                lambda: plots.compare(data, other),
            )
        )
    return specs
