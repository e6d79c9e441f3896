"""Terminal output: a benchmark result as a rich table."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from advisor.rundata.fmt import fmt_items
from advisor.rundata.recommendation import Recommendation
from advisor.rundata.result import KEEP_PACE

_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E latency"}


_MULTI_TURN_BEHIND = (" (over conversations): fewer were under way at once than this rate keeps, "
                      "or the server fell behind them, so it never saw this rate: more "
                      "requests (--num-prompts) or a lower rate")


def print_summary(result: dict, metrics: tuple[str, ...], percentiles: list[float],
                  pace: float | None = None, out: Console | None = None,
                  failure: str | None = None) -> None:
    """The headline counts (with the commonest `failure`, where any failed) and
    throughputs (with the run's `pace`, `RunResult.pace`, where known and any request
    completed), then one row per latency metric (ms), where any was measured."""
    out = out or Console()
    head = Table(title=f"{result['model_id']} @ {result['base_url']}", show_header=False)
    rows = [("requests", f"{result['num_requests']} ({result['completed']} completed, "
                         f"{result['failed']} failed)"
             + (f"; the commonest failure: {failure}" if failure else "")),
            ("duration", f"{result['duration']:.2f} s"),
            ("request throughput", f"{result['request_throughput']:.3f} req/s"),
            ("output throughput", f"{result['output_throughput']:.1f} tok/s")]
    if pace is not None and result["completed"]:
        rows.append(("kept pace", f"{pace:.2f} of the arrival rate" + (
            "" if pace >= KEEP_PACE else _MULTI_TURN_BEHIND if "per_turn" in result else
            ": the server fell behind its arrivals (its queue grew), so a longer run at this "
            "rate would show worse latencies and goodput")))
    if result["goodput_slos"]:
        slo = " ".join(f"{k}:{v:g}" for k, v in result["goodput_slos"].items())
        rows += [("SLO", f"{slo} ms (itl: each request's p99 gap)"),
                 ("SLO attainment", f"{result['slo_attainment']:.1%} of all requests"),
                 ("request goodput", f"{result['request_goodput']:.3f} req/s")]
    for k, v in rows:
        head.add_row(k, v)
    out.print(head)
    if not result["completed"]:  # NOTE: vLLM's statistics read 0 ms where none was measured
        out.print("no request completed: no latency was measured")
        return
    lat = Table(title="latency (ms)")
    cols = ["mean", "median", "std"] + [f"p{p:g}" for p in percentiles]
    lat.add_column("metric")
    for c in cols:
        lat.add_column(c, justify="right")
    for m in metrics:
        lat.add_row(_NAMES[m], *(f"{result[f'{c}_{m}_ms']:.2f}" for c in cols))
    out.print(lat)


def print_recommendation(rec: Recommendation, out: Console | None = None) -> None:
    """The action first, then why, then every decision-table row with its numbers."""
    out = out or Console()
    if rec.simulated:
        out.print(f"[bold]SIMULATED, not measured[/]: {rec.simulated}")
    out.print(f"[bold]recommendation: {rec.action}[/]")
    for reason in rec.reasons:
        out.print(f"  {reason}")
    if rec.secondary_actions:
        out.print(f"  also: {', '.join(rec.secondary_actions)}")
    if rec.judged_at:
        out.print(f"  rows judged at {rec.judged_at}")
    if rec.calibration:
        out.print(f"  calibration: {rec.calibration}")
    table = Table(title="decision table")
    for col in ("row", "fired", "action", "evidence", "thresholds"):
        table.add_column(col)
    for r in rec.rows:
        table.add_row(r.id, r.verdict, r.action, fmt_items(r.evidence), fmt_items(r.thresholds))
    out.print(table)
