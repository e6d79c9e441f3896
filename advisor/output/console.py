"""What the advisor prints: a benchmark's result and a recommendation. On a terminal, rich
tables that wrap to its width; into a file or a pipe, plain lines with every value whole
(nothing cut to 80 columns, no box drawing)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

from advisor.rundata.formatting import fmt_items
from advisor.rundata.recommendation import Recommendation
from advisor.rundata.result import KEEP_PACE
from advisor.rundata.slo import Slo

_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E latency"}


_MULTI_TURN_BEHIND = (" (over conversations): fewer were under way at once than this rate keeps, "
                      "or the server fell behind them, so it never saw this rate: more "
                      "requests (--num-prompts) or a lower rate")


def print_summary(result: dict[str, Any], metrics: tuple[str, ...], percentiles: list[float],
                  pace: float | None = None, out: Console | None = None,
                  failure: str | None = None, slo: Slo | None = None) -> None:
    """The headline counts (with the commonest `failure`, where any failed) and
    throughputs (with the run's `pace`, `RunResult.pace`, where known and any request
    completed), goodput where judged against `slo`, then one row per latency metric (ms),
    where any was measured."""
    out = out or Console()
    title = f"{result['model_id']} @ {result['base_url']}"
    rows = [("requests", f"{result['num_requests']} ({result['completed']} completed, "
                         f"{result['failed']} failed)"
             + (f"; the commonest failure: {failure}" if failure else "")),
            ("duration", f"{result['duration']:.2f} s"),
            ("request throughput", f"{result['request_throughput']:.3f} req/s"),
            ("output throughput", f"{result['output_throughput']:.1f} tok/s")]
    if pace is not None and result["completed"]:
        rows.append(("kept pace", f"{pace:.2f} of the arrival rate" + (
            "" if pace >= KEEP_PACE else _MULTI_TURN_BEHIND if "per_turn" in result else
            ": the server fell behind its arrivals (its queue grew), or the run held fewer "
            "requests at once than this rate keeps under way, so a longer run at this rate "
            "would show worse latencies and goodput")))
    check = result.get("client_check")
    if check:
        rows.append(("measuring client", client_line(check)))
    if slo is not None:
        rows += [("SLO", slo.stated),
                 ("SLO attainment", f"{result['slo_attainment']:.1%} of all requests"),
                 ("request goodput", f"{result['request_goodput']:.3f} req/s")]
    show_table(out, title, None, [list(r) for r in rows])
    if not result["completed"]:  # vLLM's statistics read 0 ms where none was measured
        out.print("no request completed: no latency was measured")
        return
    cols = ["mean", "median", "std"] + [f"p{p:g}" for p in percentiles]
    show_table(out, "latency (ms)", ["metric", *cols],
               [[_NAMES[m], *(f"{result[f'{c}_{m}_ms']:.2f}" for c in cols)] for m in metrics],
               right=True, whole=len(cols) + 1)


def client_line(check: Mapping[str, Any]) -> str:
    """What the client's self-check found (advisor.measure.selfcheck), in one line."""
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f} ms"

    share = check.get("cpu_share")
    line = (f"{'-' if share is None else f'{share:.0%}'} of a core; event loop late "
            f"{ms(check.get('loop_lag_p99_ms'))} at p99; sends late "
            f"{ms(check.get('send_late_p99_ms'))} at p99")
    return line + (f"; {check['bound']}, so these figures are partly the client's"
                   if check.get("bound") else "")


def print_recommendation(rec: Recommendation, out: Console | None = None) -> None:
    """The action first, then why, then every decision-table row with its numbers."""
    out = out or Console()
    lines = [f"SIMULATED, not measured: {rec.simulated}"] if rec.simulated else []
    lines += [f"IMPORTED, {rec.imported}"] if rec.imported else []
    lines.append(f"recommendation: {rec.action}")
    if rec.measured_on:
        lines.append(f"  evidence from {rec.measured_on}")
    lines += [f"  {reason}" for reason in rec.reasons]
    if rec.secondary_actions:
        lines.append(f"  also: {', '.join(rec.secondary_actions)}")
    if rec.judged_at:
        lines.append(f"  rows judged at {rec.judged_at}")
    if rec.calibration:
        lines.append(f"  calibration: {rec.calibration}")
    for i, line in enumerate(lines):
        style = "bold" if i < 2 and not line.startswith("  ") else None
        out.print(line, style=style, markup=False, highlight=False, soft_wrap=not out.is_terminal)
    show_table(out, "decision table", ["row", "fired", "action", "evidence", "thresholds"],
               [[r.id, r.verdict, r.action, fmt_items(r.evidence), fmt_items(r.thresholds)]
                for r in rec.rows])


def say(out: Console, line: str) -> None:
    """One line (rich markup allowed): wrapped to a terminal, whole into a file or a pipe."""
    out.print(line, soft_wrap=not out.is_terminal)


def show_table(out: Console, title: str, header: list[str] | None, rows: list[list[str]],
               right: bool = False, whole: int = 1) -> None:
    """A table: on a terminal, rich's, its first `whole` columns kept whole and the rest
    wrapped to fit (never cut); elsewhere a title line and one plain line per row, columns
    padded (`header` None: "key: value"). `right`: numbers, right-aligned after the first
    column."""
    if out.is_terminal:
        table = Table(title=title, show_header=header is not None)
        for i, name in enumerate(header or [""] * max(map(len, rows), default=0)):
            table.add_column(name, overflow="fold", no_wrap=i < whole,
                             justify="right" if right and i else "left")
        for row in rows:
            table.add_row(*row)
        out.print(table)
        return
    plain = [f"{title}:"]
    if header is None:
        plain += [f"  {k}: {' '.join(rest)}" for k, *rest in rows]
    else:
        widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
        for row in (header, *rows):
            cells = [str(c).rjust(w) if right and i else str(c).ljust(w)
                     for i, (c, w) in enumerate(zip(row, widths))]
            plain.append("  " + "  ".join(cells).rstrip())
    for line in plain:
        out.print(line, markup=False, highlight=False, soft_wrap=True)
