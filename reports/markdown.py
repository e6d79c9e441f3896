"""A sweep as GitHub-flavoured Markdown: the recommendation first, then the numbers."""

from __future__ import annotations

import pandas as pd

_COLS = {"topology": "topology", "request_rate": "rate (req/s)", "completed": "done",
         "failed": "failed", "slo_attainment": "attainment", "request_goodput": "goodput (req/s)",
         "median_ttft_ms": "TTFT p50", "p99_ttft_ms": "TTFT p99", "p50_itl_ms": "ITL p50",
         "p99_itl_ms": "ITL p99", "emulated_link": "emulated link"}


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v).replace("|", "\\|")


def _table(df: pd.DataFrame) -> list[str]:
    cols = [c for c in _COLS if c in df.columns]
    out = ["| " + " | ".join(_COLS[c] for c in cols) + " |", "|" + "---|" * len(cols)]
    for _, row in df.iterrows():
        out.append("| " + " | ".join(_cell(row[c]) for c in cols) + " |")
    return out


def sweep_markdown(table: pd.DataFrame, evidence: dict, rec: dict, manifest: dict) -> str:
    """The recommendation, fired rows with their numbers, the per-rate table, and the setup."""
    lines = [f"# Recommendation: **{rec['action']}**", ""]
    lines += [f"- {r}" for r in rec["reasons"]]
    if rec["secondary_actions"]:
        lines.append(f"- also: {', '.join(rec['secondary_actions'])}")
    kv = evidence.get("kv_transfer") or {}
    if kv.get("emulated"):
        lines.append(f"- **KV transfers ran over an emulated link ({kv['emulated']})**")
    lines += ["", "## Decision table", "", "| row | fired | action | evidence |", "|---|---|---|---|"]
    for r in rec["rows"]:
        ev = ", ".join(f"{k}={_cell(v)}" for k, v in r["evidence"].items() if v is not None)
        lines.append(f"| {r['id']} | {'**yes**' if r['fired'] else 'no'} | {r['action']} | {ev} |")
    slo = evidence["slo"]
    lines += ["", f"## Every rate (SLO: TTFT {slo['ttft_ms']:g} ms, ITL {slo['itl_ms']:g} ms "
                  f"per request p99, attainment {slo['attainment']:.0%}; latencies in ms)", ""]
    lines += _table(table)
    if kv:
        lines += ["", "## KV transfer", "",
                  f"mean {_cell(kv.get('mean_ms'))} ms, p90 {_cell(kv.get('p90_ms'))} ms, "
                  f"{_cell(kv.get('gbps'))} GB/s over `{kv.get('connector')}`"
                  + (f" (emulated link {kv['emulated']})" if kv.get("emulated") else "")]
    cfg, host = manifest.get("config", {}), manifest.get("host", {})
    lines += ["", "## Setup", "",
              f"- model `{cfg.get('model')}` ({cfg.get('dtype')}), workload `{cfg.get('workload')}`"
              f" (scale {cfg.get('scale') or 'auto'}), seed {cfg.get('seed')}",
              f"- host: {host.get('cpu')}, {host.get('cpus_usable')} usable cores; "
              f"GPUs: {len(manifest.get('probe', {}).get('gpus', [])) or 'none'}",
              f"- command: `{' '.join(manifest.get('command', []))}`", ""]
    return "\n".join(lines)
