"""evidence.json's P2P part: the matrix a sweep's manifest recorded, with the GPU pairs its
disaggregated placement used."""

from __future__ import annotations

from advisor.engines.placement import Placement
from advisor.probe.p2p import P2PMatrix
from advisor.probe.p2p_pairs import evidence
from advisor.rundata.evidence import P2PEvidence
from advisor.rundata.manifest import ProbeFindings


def p2p_evidence(placements: list[Placement], probe: ProbeFindings | None, model: str | None,
                 prompt_tokens: float | None, dtype: str) -> P2PEvidence | None:
    """evidence.json's p2p: the matrix a sweep's manifest recorded, with the pairs its
    disaggregated placement used (unknown for a deployment at a URL); None without one."""
    if probe is None or not probe.p2p:
        return None
    dis = [p for p in placements if p.kind == "disagg"]
    dis.sort(key=lambda p: p.bidirectional)  # the plain P/D the advice compares first
    return evidence(P2PMatrix.from_record(probe.p2p), probe.p2p_source or "nvidia-smi",
                    dis[0].on_gpus if dis else None, model, prompt_tokens,
                    dtype if dtype in ("float32", "bfloat16", "float16") else "bfloat16")
