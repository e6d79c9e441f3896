"""The report's plots (matplotlib, Agg): each function takes a Report and returns a Figure."""

from __future__ import annotations

import io
from typing import Any

import matplotlib

matplotlib.use("Agg")
import itertools

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from reports.model import Report, Series

# labels are run data, drawn as plain text: a name with $ in it is no mathtext formula
matplotlib.rcParams["text.parse_math"] = False

COLORS = {"collocated": "#1f77b4", "disagg": "#d62728", "bidirectional": "#2ca02c",
          "render-split": "#9467bd"}


def _color(s: Series) -> str:
    return COLORS.get(s.color, COLORS["disagg"])


def _finish(
    fig: Figure, ax: Axes, title: str, data: Report, ylabel: str,
    xlabel: str = "request rate (req/s)",
) -> Figure:
    # the emulation on a line of its own, since tight_layout does not shrink a title
    # that runs past the figure's edge
    ax.set_title(
        title + (f"\n[KV link emulated: {data.emulated}]" if data.emulated else ""), fontsize=10
    )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _vs_rate(
    data: Report,
    keys: tuple[str, str],
    names: tuple[str, str],
    slo_key: str,
    title: str,
    ylabel: str,
) -> Figure:
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for s in data.series:
        x = [p.rate for p in s.points]
        for key, name, style in zip(keys, names, ("--", "-")):
            ax.plot(
                x,
                [getattr(p, key) or np.nan for p in s.points],
                style,
                marker="o",
                color=_color(s),
                label=f"{s.label} {name}",
            )
    limit = getattr(data.slo, slo_key)
    if limit:
        ax.axhline(limit, color="black", lw=1, ls=":", label=f"SLO {limit:g} ms")
    ax.set_yscale("log")
    return _finish(fig, ax, title, data, ylabel)


def itl_vs_rate(data: Report) -> Figure:
    """1. p50 and p99 ITL against rate; the ITL SLO as a line."""
    return _vs_rate(
        data,
        ("p50_itl_ms", "p99_itl_ms"),
        ("p50", "p99"),
        "itl_ms",
        "Inter-token latency: where collocated p99 breaks away from its median",
        "ITL (ms, log)",
    )


def ttft_vs_rate(data: Report) -> Figure:
    """2. median and p99 TTFT against rate; the TTFT SLO as a line."""
    return _vs_rate(
        data,
        ("median_ttft_ms", "p99_ttft_ms"),
        ("median", "p99"),
        "ttft_ms",
        "Time to first token",
        "TTFT (ms, log)",
    )


def attainment_vs_rate(data: Report) -> Figure:
    """3. SLO attainment against rate, the target, and each placement's max goodput rate."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    target = data.slo.attainment
    for s in data.series:
        ax.plot(
            [p.rate for p in s.points],
            [p.attainment for p in s.points],
            "-o",
            color=_color(s),
            label=s.label,
        )
        ok = [p.rate for p in s.points if target is not None and p.attainment >= target]
        if ok:
            ax.axvline(
                max(ok),
                color=_color(s),
                ls="--",
                lw=1,
                label=f"{s.placement} max goodput rate {max(ok):g} req/s",
            )
    if target is not None:
        ax.axhline(target, color="black", ls=":", lw=1, label=f"target {target:.0%}")
    ax.set_ylim(-0.02, 1.05)
    return _finish(
        fig,
        ax,
        "SLO attainment (failed requests count as misses)",
        data,
        "share of requests meeting every SLO",
    )


def ttft_by_turn(data: Report) -> Figure:
    """5. Multi-turn: median TTFT against turn index, per placement, at each placement's
    highest rate meeting the SLO (else its lowest): recomputed context grows with the turn."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for s in data.series:
        runs = [p for p in s.points if p.per_turn]
        if not runs:
            continue
        good = [p for p in runs if p.attainment >= (data.slo.attainment or 1.0)]
        run = max(good, key=lambda p: p.rate) if good else min(runs, key=lambda p: p.rate)
        ax.plot([t.turn for t in run.per_turn],
                [t.median_ttft_ms or np.nan for t in run.per_turn],
                marker="o", color=_color(s), label=f"{s.label} @ {run.rate:g} req/s")
    if data.slo.ttft_ms:
        ax.axhline(data.slo.ttft_ms, color="black", lw=1, ls=":",
                   label=f"SLO {data.slo.ttft_ms:g} ms")
    ax.set_xlabel("turn")
    ax.set_ylabel("median TTFT (ms)")
    ax.set_title("TTFT by turn (multi-turn)", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def kv_transfer(data: Report) -> Figure:
    """4. KV transfer time per request, and its share of that request's TTFT."""
    ms, share = data.kv_transfer_ms, data.kv_transfer_share
    fig, (a, b) = plt.subplots(1, 2, figsize=(7, 3.2))
    if ms:
        a.hist(ms, bins=30, color=COLORS["disagg"])
        b.hist(np.clip(share, 0, 1), bins=20, range=(0, 1), color=COLORS["disagg"])
    else:
        for ax in (a, b):
            ax.text(
                0.5,
                0.5,
                "no KV transfer recorded",
                ha="center",
                va="center",
                transform=ax.transAxes,
            )
    a.set_xlabel("KV transfer per request (ms)")
    b.set_xlabel("transfer / TTFT")
    a.set_ylabel("requests")
    suffix = f"  [emulated: {data.emulated}]" if data.emulated else ""
    fig.suptitle(f"KV transfer (disaggregated){suffix}", fontsize=10)
    fig.tight_layout()
    return fig


def timeline(data: Report) -> Figure:
    """5. Every request at the highest common rate: waiting (send -> first token) and
    decoding (first -> last token); gaps over the ITL SLO marked (prefills stalling decodes)."""
    shown = data.series
    rate = data.timeline_rate
    fig, axes = plt.subplots(len(shown), 1, figsize=(7, 2.4 * len(shown)), squeeze=False)
    limit = (data.slo.itl_ms or np.inf) / 1000
    for ax, s in zip(axes[:, 0], shown):
        # one collection per kind, not a line per request, which took seconds to draw
        waiting: list[Any] = []
        decoding: list[Any] = []
        stalls: tuple[list[float], list[int]] = ([], [])
        for i, span in enumerate(s.timeline):
            c = span.chunks
            waiting.append([(span.sent, i), (c[0], i)])
            decoding.append([(c[0], i), (c[-1], i)])
            late = [b for a, b in itertools.pairwise(c) if b - a > limit]
            stalls[0].extend(late)
            stalls[1].extend([i] * len(late))
        # rasterized: a thousand requests' stalls as vector marks made a 20 MB SVG
        ax.add_collection(LineCollection(waiting, colors="#bbbbbb", linewidths=2,
                                         rasterized=True))
        ax.add_collection(LineCollection(decoding, colors=_color(s), linewidths=2,
                                         rasterized=True))
        ax.plot(*stalls, "k|", ms=7, rasterized=True)
        ax.autoscale_view()
        ax.set_title(
            f"{s.label} at {rate:g} req/s: grey waiting, colour decoding, "
            "| a gap over the ITL SLO",
            fontsize=9,
        )
        ax.set_ylabel("request")
    axes[-1, 0].set_xlabel("seconds since the run started")
    fig.tight_layout()
    return fig


def pareto(data: Report) -> Figure:
    """7. A plan's placements at each rate: output tokens/s per GPU against tokens/s per
    user; the frontier joined, points missing the SLO hollow, the choice ringed."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for kind in sorted({p.kind for p in data.pareto}):
        pts = [p for p in data.pareto if p.kind == kind]
        color = COLORS.get(kind, COLORS["disagg"])
        for meets in (True, False):
            sel = [p for p in pts if p.meets_slo is meets]
            ax.scatter([p.per_user for p in sel], [p.per_gpu for p in sel], s=18,
                       facecolors=color if meets else "none", edgecolors=color,
                       label=f"{kind}" + ("" if meets else " (misses the SLO)"))
    front = sorted((p for p in data.pareto if p.frontier), key=lambda p: p.per_user)
    ax.plot([p.per_user for p in front], [p.per_gpu for p in front], "k-", lw=1,
            label="frontier")
    for p in data.pareto:
        if p.chosen:
            ax.scatter([p.per_user], [p.per_gpu], s=160, facecolors="none", edgecolors="k",
                       linewidths=1.5, label=f"chosen: {p.placement}")
    ax.set_xlabel("tokens/s per user (1000 / mean TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("simulated: throughput per GPU against speed per user", fontsize=10)
    fig.tight_layout()
    return fig


def compare(data: Report, other: Report) -> Figure:
    """6. Two runs overlaid: p99 ITL and SLO attainment against rate."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(7, 3.4))
    for d, style, tag in ((data, "-", "this"), (other, "--", "other")):
        for s in d.series:
            x = [p.rate for p in s.points]
            a.plot(
                x,
                [p.p99_itl_ms or np.nan for p in s.points],
                style,
                marker="o",
                color=_color(s),
                label=f"{tag}: {s.label}",
            )
            b.plot(x, [p.attainment for p in s.points], style, marker="o", color=_color(s))
    a.set_yscale("log")
    a.set_ylabel("p99 ITL (ms, log)")
    b.set_ylabel("SLO attainment")
    for ax in (a, b):
        ax.set_xlabel("request rate (req/s)")
        ax.grid(alpha=0.3)
    a.legend(fontsize=7)
    fig.suptitle(f"this run vs {other.run_name}", fontsize=10)
    fig.tight_layout()
    return fig


def encoded(fig: Figure, svg: bool, png: bool) -> tuple[str | None, bytes | None]:
    """The figure as inline SVG text (no external references) and as PNG bytes, each only
    where asked; then closed."""
    try:
        text = image = None
        if svg:
            buf = io.StringIO()
            # no metadata block: its Dublin Core namespaces look like links, and the date
            # changes
            fig.savefig(buf, format="svg",
                        metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
            text = buf.getvalue()
            text = text[text.index("<svg"):]
        if png:
            raw = io.BytesIO()
            fig.savefig(raw, format="png", dpi=110)
            image = raw.getvalue()
        return text, image
    finally:
        plt.close(fig)
