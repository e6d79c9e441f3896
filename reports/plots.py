"""The report's plots (matplotlib, Agg): each function takes ReportData and returns a Figure."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402

from reports.model import ReportData  # noqa: E402

COLORS = {"collocated": "#1f77b4", "disagg": "#d62728", "bidirectional": "#2ca02c",
          "render-split": "#9467bd"}


def _color(data: ReportData, placement: str) -> str:
    if placement.startswith("disagg-bidi"):
        return COLORS["bidirectional"]
    return COLORS.get(data.kind(placement), COLORS["disagg"])


def _label(data: ReportData, placement: str) -> str:
    runs = data.series(placement)
    emulated = next((r.emulated for r in runs if r.emulated), None)
    return f"{placement} (emulated link {emulated})" if emulated else placement


def _finish(
    fig, ax, title: str, data: ReportData, ylabel: str, xlabel: str = "request rate (req/s)"
):
    # NOTE: the emulation on a line of its own: beside the longest title it ran past the
    # figure's edge, which tight_layout does not shrink titles to fit
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
    data: ReportData,
    keys: tuple[str, str],
    names: tuple[str, str],
    slo_key: str,
    title: str,
    ylabel: str,
):
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for p in data.placements:
        runs = data.series(p)
        x = [r.rate for r in runs]
        for key, name, style in zip(keys, names, ("--", "-")):
            ax.plot(
                x,
                [r.get(key) or np.nan for r in runs],
                style,
                marker="o",
                color=_color(data, p),
                label=f"{_label(data, p)} {name}",
            )
    if data.slo.get(slo_key):
        ax.axhline(
            data.slo[slo_key], color="black", lw=1, ls=":", label=f"SLO {data.slo[slo_key]:g} ms"
        )
    ax.set_yscale("log")
    return _finish(fig, ax, title, data, ylabel)


def itl_vs_rate(data: ReportData):
    """1. p50 and p99 ITL against rate; the ITL SLO as a line."""
    return _vs_rate(
        data,
        ("p50_itl_ms", "p99_itl_ms"),
        ("p50", "p99"),
        "itl_ms",
        "Inter-token latency: where collocated p99 breaks away from its median",
        "ITL (ms, log)",
    )


def ttft_vs_rate(data: ReportData):
    """2. median and p99 TTFT against rate; the TTFT SLO as a line."""
    return _vs_rate(
        data,
        ("median_ttft_ms", "p99_ttft_ms"),
        ("median", "p99"),
        "ttft_ms",
        "Time to first token",
        "TTFT (ms, log)",
    )


def attainment_vs_rate(data: ReportData):
    """3. SLO attainment against rate, the target, and each placement's max goodput rate."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    target = data.slo.get("attainment")
    for p in data.placements:
        runs = data.series(p)
        ax.plot(
            [r.rate for r in runs],
            [r.get("slo_attainment", 0) for r in runs],
            "-o",
            color=_color(data, p),
            label=_label(data, p),
        )
        ok = [r.rate for r in runs if target is not None and r.get("slo_attainment", 0) >= target]
        if ok:
            ax.axvline(
                max(ok),
                color=_color(data, p),
                ls="--",
                lw=1,
                label=f"{p} max goodput rate {max(ok):g} req/s",
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


def ttft_by_turn(data: ReportData):
    """5. Multi-turn: median TTFT against turn index, per placement, at each placement's
    highest rate meeting the SLO (else its lowest): recomputed context grows with the turn."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for p in data.placements:
        runs = [r for r in data.series(p) if r.get("per_turn")]
        if not runs:
            continue
        good = [r for r in runs
                if (r.get("slo_attainment") or 0) >= data.slo.get("attainment", 1.0)]
        run = max(good, key=lambda r: r.rate) if good else min(runs, key=lambda r: r.rate)
        turns = run.get("per_turn")
        ax.plot([t["turn"] for t in turns], [t["median_ttft_ms"] or np.nan for t in turns],
                marker="o", color=_color(data, p), label=f"{_label(data, p)} @ {run.rate:g} req/s")
    if data.slo.get("ttft_ms"):
        ax.axhline(data.slo["ttft_ms"], color="black", lw=1, ls=":",
                   label=f"SLO {data.slo['ttft_ms']:g} ms")
    ax.set_xlabel("turn")
    ax.set_ylabel("median TTFT (ms)")
    ax.set_title("TTFT by turn (multi-turn)", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def kv_transfer(data: ReportData):
    """4. KV transfer time per request, and its share of that request's TTFT."""
    ms, share = [], []
    for run in data.runs:
        for rec in run.records:
            t = rec.get("kv_transfer_ms")
            if t is not None and rec.get("ok") and rec.get("chunks"):
                ms.append(t)
                ttft = (rec["chunks"][0] - rec["sent"]) * 1000
                share.append(t / ttft if ttft > 0 else np.nan)
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


def timeline(data: ReportData):
    """5. Every request at the highest common rate: waiting (send -> first token) and
    decoding (first -> last token); gaps over the ITL SLO marked (prefills stalling decodes)."""
    placements = data.placements
    rates = [max(r.rate for r in data.series(p)) for p in placements]
    rate = min(rates) if rates else 0
    fig, axes = plt.subplots(len(placements), 1, figsize=(7, 2.4 * len(placements)), squeeze=False)
    limit = (data.slo.get("itl_ms") or np.inf) / 1000
    for ax, p in zip(axes[:, 0], placements):
        run = next((r for r in data.series(p) if r.rate == rate), None)
        recs = [
            x for x in (run.records if run else []) if x.get("chunks") and x.get("sent") is not None
        ]
        # NOTE: one collection per kind, not a line per request: a thousand requests drew
        # for seconds
        waiting, decoding, stalls = [], [], ([], [])
        for i, rec in enumerate(sorted(recs, key=lambda x: x["sent"])):
            c = rec["chunks"]
            waiting.append([(rec["sent"], i), (c[0], i)])
            decoding.append([(c[0], i), (c[-1], i)])
            late = [b for a, b in zip(c, c[1:]) if b - a > limit]
            stalls[0].extend(late)
            stalls[1].extend([i] * len(late))
        ax.add_collection(LineCollection(waiting, colors="#bbbbbb", linewidths=2))
        ax.add_collection(LineCollection(decoding, colors=_color(data, p), linewidths=2))
        ax.plot(*stalls, "k|", ms=7)
        ax.autoscale_view()
        ax.set_title(
            f"{_label(data, p)} at {rate:g} req/s: grey waiting, colour decoding, "
            "| a gap over the ITL SLO",
            fontsize=9,
        )
        ax.set_ylabel("request")
    axes[-1, 0].set_xlabel("seconds since the run started")
    fig.tight_layout()
    return fig


def compare(data: ReportData, other: ReportData):
    """6. Two runs overlaid: p99 ITL and SLO attainment against rate."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(7, 3.4))
    for d, style, tag in ((data, "-", "this"), (other, "--", "other")):
        for p in d.placements:
            runs = d.series(p)
            x = [r.rate for r in runs]
            a.plot(
                x,
                [r.get("p99_itl_ms") or np.nan for r in runs],
                style,
                marker="o",
                color=_color(d, p),
                label=f"{tag}: {_label(d, p)}",
            )
            b.plot(
                x, [r.get("slo_attainment", 0) for r in runs], style, marker="o", color=_color(d, p)
            )
    a.set_yscale("log")
    a.set_ylabel("p99 ITL (ms, log)")
    b.set_ylabel("SLO attainment")
    for ax in (a, b):
        ax.set_xlabel("request rate (req/s)")
        ax.grid(alpha=0.3)
    a.legend(fontsize=7)
    fig.suptitle(f"this run vs {other.run_dir.name}", fontsize=10)
    fig.tight_layout()
    return fig


def encoded(fig, svg: bool, png: bool) -> tuple[str | None, bytes | None]:
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
