"""Where a disaggregated placement's instances go on a P2P matrix, and what the evidence
says of it: each prefiller-decoder pair on GPUs that read each other directly wherever the
matrix has such pairs, and what a pair without P2P costs a prompt's KV (staged through the
host, at the planner's host-staged rate)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from advisor.errors import UsageError
from advisor.probe.kvsize import kv_size
from advisor.probe.links import HOST_STAGED
from advisor.probe.p2p import P2PMatrix
from advisor.rundata.evidence import P2PEvidence, P2PPair

# GPU orders tried, each costing its GPUs and P->D pairs: past it the best found so far
# stands (a 16p16d on 32 GPUs took 16 s at 200,000 orders; now ~1-2 s)
SEARCH_WORK = 1_000_000


@dataclass(frozen=True)
class GpuPlacement:
    """Each prefiller's and decoder's GPUs (its tensor-parallel ranks), the P->D GPU pairs
    their KV crosses (rank k of a prefiller to rank k of each decoder) with their status,
    and how they were chosen."""

    prefill: list[list[int]]
    decode: list[list[int]]
    pairs: list[P2PPair]
    how: str

    @property
    def gpus(self) -> list[int]:
        """Every instance's GPUs: prefillers first, then decoders."""
        return [g for inst in self.prefill + self.decode for g in inst]


def place(matrix: P2PMatrix | None, gpus: list[int], prefill: int, decode: int,
          tp: int = 1, decode_tp: int | None = None) -> GpuPlacement:
    """`prefill` instances of `tp` GPUs and `decode` of `decode_tp` (default: `tp`) on
    `gpus`: in order without a matrix; with one, on the order whose P->D pairs have the most
    P2P (of equals, the first in order). ValueError when there are too few GPUs or one is
    not in the matrix."""
    dtp = decode_tp or tp
    need = prefill * tp + decode * dtp
    if need > len(gpus):
        raise ValueError(f"{prefill}P{decode}D needs {need} GPUs; {len(gpus)} given")
    if matrix is None:
        return _split(gpus[:need], prefill, decode, tp, dtp, None, "in order (no P2P matrix)")
    outside = [g for g in gpus if not 0 <= g < len(matrix.gpus)]
    if outside:
        raise ValueError(f"GPU {outside[0]} is not in the P2P matrix ({len(matrix.gpus)} GPUs)")
    best, best_score = None, -1
    most = prefill * decode * max(tp, dtp)
    orders = max(1, SEARCH_WORK // (need + most))
    for order in itertools.islice(itertools.permutations(gpus, need), orders):
        score = sum(matrix.ok(p, d) for p, d in _pair_gpus(list(order), prefill, decode, tp,
                                                           dtp))
        if score > best_score:
            best, best_score = list(order), score
            if score == most:
                break
    assert best is not None
    how = ("every P->D pair on GPUs with P2P" if best_score == most else
           f"{best_score} of {most} P->D GPU pairs with P2P, the most this matrix allows"
           if best_score else "no GPU pair here has P2P: KV stages through the host")
    return _split(best, prefill, decode, tp, dtp, matrix, how)


def _groups(order: list[int], prefill: int, decode: int, tp: int, dtp: int
            ) -> tuple[list[list[int]], list[list[int]]]:
    """Each prefiller's GPUs, then each decoder's, in `order`."""
    pre = [order[i * tp:(i + 1) * tp] for i in range(prefill)]
    start = prefill * tp
    return pre, [order[start + i * dtp:start + (i + 1) * dtp] for i in range(decode)]


def _pair_gpus(order: list[int], prefill: int, decode: int, tp: int, dtp: int
               ) -> list[tuple[int, int]]:
    """The GPU pairs a P->D transfer crosses: ranks holding the same KV heads. With TP
    sizes m and n, rank r of max(m, n) pairs prefill rank r*m//max with decode rank
    r*n//max (equal sizes: rank k to rank k)."""
    pre, dec = _groups(order, prefill, decode, tp, dtp)
    wide = max(tp, dtp)
    return [(p[r * tp // wide], d[r * dtp // wide]) for p in pre for d in dec
            for r in range(wide)]


def _split(order: list[int], prefill: int, decode: int, tp: int, dtp: int,
           matrix: P2PMatrix | None, how: str) -> GpuPlacement:
    pairs = [P2PPair(p, d, matrix.label(p, d) if matrix else "unknown")
             for p, d in _pair_gpus(order, prefill, decode, tp, dtp)]
    return GpuPlacement(*_groups(order, prefill, decode, tp, dtp), pairs, how)


def evidence(matrix: P2PMatrix, source: str, placed: GpuPlacement | None,
             model: str | None, prompt_tokens: float | None,
             dtype: str = "bfloat16") -> P2PEvidence:
    """The matrix as evidence: the pairs `placed` uses (none known: a deployment whose GPUs
    are its own), and a mean prompt's KV staged through the host where a pair, or every
    pair, lacks P2P (model and prompt known)."""
    ok = [[a, b] for a, b in matrix.ok_pairs()]
    kv_mb = staged_ms = None
    lacking = (any(not p.status.startswith("OK") for p in placed.pairs) if placed
               else len(matrix.gpus) > 1 and not ok)
    if lacking and model and prompt_tokens:
        try:
            nbytes = kv_size(model, round(prompt_tokens), dtype).total_bytes
        except UsageError:
            nbytes = None
        if nbytes is not None:
            kv_mb, staged_ms = nbytes / 1e6, HOST_STAGED.seconds(nbytes) * 1000
    return P2PEvidence(
        source=source, gpus=matrix.gpus, status=matrix.status,
        used=placed.pairs if placed else [], p2p_pairs=ok,
        placed=placed.how if placed else "unknown: the deployment's GPUs are its own",
        paths=matrix.paths, kv_mb=kv_mb,
        host_staged_gbps=HOST_STAGED.gbps if kv_mb is not None else None,
        host_staged_ms=staged_ms,
        host_staged_source=HOST_STAGED.source if kv_mb is not None else None)


def summary(ev: P2PEvidence) -> str:
    """One line: the P->D pairs used and their status, or that they are unknown."""
    used = ", ".join(f"GPU{p.prefill_gpu}->GPU{p.decode_gpu} {p.status}" for p in ev.used)
    return (f"{used} ({ev.source})" if used else
            f"pairs used unknown; with P2P here: {pairs_text(ev.p2p_pairs)} ({ev.source})")


def pairs_text(pairs: list[list[int]]) -> str:
    """`GPU0-GPU2, GPU1-GPU3`, or `none`."""
    return ", ".join(f"GPU{a}-GPU{b}" for a, b in pairs) or "none"
