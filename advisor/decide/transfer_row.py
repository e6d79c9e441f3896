"""The decision table's `kv_transfer_slow` row, read with the P2P matrix: a measured
transfer decides; a P->D pair without P2P explains a slow one, or predicts one where
nothing was measured (labelled so); a healthy measurement stands whatever the matrix says."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from advisor.decide.thresholds import Thresholds
from advisor.probe.p2p import CODES
from advisor.probe.p2p_pairs import pairs_text
from advisor.rundata.evidence import Evidence, P2PEvidence, P2PPair
from advisor.rundata.formatting import fmt_ms
from advisor.rundata.recommendation import DecisionRow as Row

ROW = "kv_transfer_slow"


def kv_row(ev: Evidence, t: Thresholds) -> Row:
    """The row: fired on the measured mean transfer; with none measured, on the predicted
    host-staged transfer of a P->D pair the matrix shows without P2P."""
    kv, p2p = ev.kv_transfer, ev.p2p
    mean = kv.mean_ms if kv else None
    limit = min(t.kv_slow_ms, t.kv_slow_ttft_share * ev.slo.ttft_ms)
    evidence: dict[str, Any] = {"kv_transfer_mean_ms": mean,
                                "emulated": kv.emulated if kv else None}
    predicted = _predicted_ms(p2p)
    if p2p is not None:
        evidence["p2p_used"] = _used_text(p2p)
        evidence["p2p_pairs"] = pairs_text(p2p.p2p_pairs)
        if predicted is not None:
            evidence.update(kv_mb=p2p.kv_mb, host_staged_gbps=p2p.host_staged_gbps,
                            predicted_host_staged_ms=predicted)
    fired = mean >= limit if mean is not None else (predicted is not None and predicted >= limit)
    # NOTE: P/D measured without its transfers (no decoder metrics, an imported file) says
    # nothing of them: "no" would read as a healthy transfer
    unknown = mean is None and predicted is None and ev.disaggregated is not None
    return Row(ROW, "KV transfer is slow", "fix-transfer", fired, evidence,
               {"kv_slow_ms": t.kv_slow_ms, "kv_slow_ttft_share": t.kv_slow_ttft_share,
                "slow_at_ms": limit},
               undecided="no KV transfer time was measured" if unknown else None)


def slow_text(row: Row) -> str:
    """How slow the fired row says the transfer is: measured, or predicted."""
    e = row.evidence
    if e.get("kv_transfer_mean_ms") is not None:
        return f"the KV transfer is slow ({fmt_ms(e['kv_transfer_mean_ms'])} per transfer)"
    return (f"the KV transfer would be slow (predicted, not measured: "
            f"{fmt_ms(e['predicted_host_staged_ms'])} per transfer staged through the host)")


def p2p_reason(ev: Evidence, row: Row) -> str | None:
    """What the P2P matrix says of the transfer, where a pair the KV crosses (or, the
    placement's GPUs unknown, every pair) lacks P2P; None where it has nothing to add."""
    p2p = ev.p2p
    if p2p is None:
        return None
    lacking = p2p.lacking
    if not lacking and (p2p.used or p2p.p2p_pairs or len(p2p.gpus) < 2):
        return None
    where = (f"{_pairs_status(lacking)} lack P2P" if lacking else
             "no GPU pair in it has P2P, so whichever GPUs the deployment uses")
    head = f"the P2P matrix ({p2p.source}): {where}"
    staged = _staged(p2p)
    mean = row.evidence.get("kv_transfer_mean_ms")
    if mean is not None and not row.fired:
        return (f"{head}, yet the KV transfer measured healthy ({fmt_ms(mean)} per transfer): "
                "the matrix does not slow it here")
    tail = f"; GPU pairs with P2P: {pairs_text(p2p.p2p_pairs)}" + (
        " (put each prefiller and decoder on one: advisor deploy does)" if p2p.p2p_pairs
        else " (enable P2P, or move KV over RDMA)")
    if mean is not None:
        return f"{head}: it explains the slow transfer{staged}{tail}"
    return f"{head}: predicted, not measured{staged}{tail}"


def _predicted_ms(p2p: P2PEvidence | None) -> float | None:
    return p2p.host_staged_ms if p2p is not None else None


def _staged(p2p: P2PEvidence) -> str:
    if p2p.host_staged_ms is None or p2p.kv_mb is None or p2p.host_staged_gbps is None:
        return ", so KV stages through the host"
    return (f", so KV stages through the host: the mean prompt's {p2p.kv_mb:.0f} MB of KV "
            f"at {p2p.host_staged_gbps:.2f} GB/s ({p2p.host_staged_source}) take about "
            f"{fmt_ms(p2p.host_staged_ms)} per transfer")


def _used_text(p2p: P2PEvidence) -> str:
    return ", ".join(f"GPU{p.prefill_gpu}->GPU{p.decode_gpu} {p.status}"
                     for p in p2p.used) or "unknown"


def _pairs_status(pairs: Sequence[P2PPair]) -> str:
    """`GPU0->GPU1 (NS: not supported), ...`."""
    return ", ".join(f"GPU{p.prefill_gpu}->GPU{p.decode_gpu} ({p.status}: "
                     f"{CODES.get(p.status.split()[0], 'unknown')})" for p in pairs)
