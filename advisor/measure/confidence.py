"""Bootstrap 95% intervals of a run's headline statistics.

Requests are resampled whole (an ITL gap belongs to its request: gaps of one request are
not independent), BOOTSTRAP times with a fixed seed, so the same records give the same
intervals. In a multi-turn run conversations are resampled whole, for the same reason one
level up: a conversation's turns share its history, its instance and each other's waits.
"""

from __future__ import annotations

import warnings

import numpy as np

BOOTSTRAP = 500
SEED = 0


def intervals(good: list[bool], ttft_ms: list[float | None], itl_ms: list[list[float]],
              groups: list[str] | None = None) -> dict[str, list[float] | None]:
    """95% intervals of SLO attainment, median TTFT and pooled p99 ITL, one entry per
    request (None TTFT and no gaps for a failed one); with `groups` (each request's
    conversation), conversations resampled whole."""
    n = len(good)
    if n == 0:
        return {"slo_attainment": None, "median_ttft_ms": None, "p99_itl_ms": None}
    rng = np.random.default_rng(SEED)
    ttft = np.array([np.nan if t is None else t for t in ttft_ms])
    if groups is not None and len(set(groups)) < n:
        counts = _conversation_counts(groups, rng)
        out = _weighted(np.asarray(good, float), ttft, counts)
    else:
        picks = rng.integers(0, n, size=(BOOTSTRAP, n))
        counts = np.stack([np.bincount(row, minlength=n) for row in picks])  # [R, n]
        out = {"slo_attainment": _bounds(np.asarray(good, float)[picks].mean(axis=1)),
               "median_ttft_ms": _median_bounds(ttft[picks])}
    gaps = [np.asarray(g, float) for g in itl_ms]
    if any(g.size for g in gaps):
        out["p99_itl_ms"] = _bounds(_pooled_p99(gaps, counts))
    else:
        out["p99_itl_ms"] = None
    return out


def _conversation_counts(groups: list[str], rng: np.random.Generator) -> np.ndarray:
    """[resamples, requests]: how often each request is drawn when conversations are
    resampled whole."""
    ids = {g: i for i, g in enumerate(dict.fromkeys(groups))}
    member = np.array([ids[g] for g in groups])  # [n] its conversation
    picks = rng.integers(0, len(ids), size=(BOOTSTRAP, len(ids)))
    per_conv = np.stack([np.bincount(row, minlength=len(ids)) for row in picks])  # [R, convs]
    return per_conv[:, member]


def _weighted(good: np.ndarray, ttft: np.ndarray,
              counts: np.ndarray) -> dict[str, list[float] | None]:
    """Attainment and median TTFT intervals of resamples given as request counts."""
    att = counts @ good / counts.sum(axis=1)
    done = ~np.isnan(ttft)
    medians = np.array([np.median(np.repeat(ttft[done], row[done])) if row[done].any()
                        else np.nan for row in counts])
    return {"slo_attainment": _bounds(att), "median_ttft_ms": _bounds(medians)}


def _median_bounds(ttft: np.ndarray) -> list[float] | None:
    """The median TTFT interval of resamples [R, n] (NaN: a failed request)."""
    if np.isnan(ttft).any():
        with warnings.catch_warnings():  # a resample of failed requests only has no median
            warnings.simplefilter("ignore", RuntimeWarning)
            return _bounds(np.nanmedian(ttft, axis=1))
    # nanmedian goes row by row in Python past 600 columns; median does not
    return _bounds(np.median(ttft, axis=1))


TAIL = 0.02  # the share of all gaps, largest first, that resamples' p99 is looked up in


def _pooled_p99(gaps: list[np.ndarray], counts: np.ndarray) -> np.ndarray:
    """np.percentile(99) of each resample's pooled gaps, without pooling them: a resample
    holds request i's gaps count_i times, so its p99 is found by rank among the largest
    gaps weighted by those counts (all gaps only when a resample's 1% reaches past them).

    gaps: one array per request; counts: [resamples, requests] times each is drawn."""
    sizes = np.array([g.size for g in gaps])
    owner = np.repeat(np.arange(len(gaps)), sizes)  # [all gaps] its request
    flat = np.concatenate(gaps)
    k = max(1, int(np.ceil(TAIL * flat.size)))
    largest = np.argpartition(flat, flat.size - k)[flat.size - k:]  # unordered
    keep = largest[np.argsort(flat[largest])[::-1]]  # largest first
    held = counts.astype(np.int32)[:, owner[keep]]  # [R, kept] times each gap is drawn
    running = _Running(held)
    total = counts @ sizes  # [R] pooled gaps per resample
    out = np.full(len(counts), np.nan)
    for r, n in enumerate(total):
        if n == 0:
            continue
        h = (n - 1) * 0.99
        lo = int(np.floor(h))
        top = n - 1 - lo  # 0-based positions from the largest of the ranks lo and lo + 1
        if top < running.total(r):
            a = flat[keep[running.find(r, top)]]
            b = flat[keep[running.find(r, top - 1)]] if top else a
            out[r] = a + (h - lo) * (b - a)
        else:  # the tail kept is too short for this resample: pool it
            out[r] = np.percentile(np.repeat(flat, counts[r][owner]), 99)
    return out


class _Running:
    """Running sums of each row of `held` [R, kept], looked up without computing them all:
    a full cumulative sum of [500, ~20k] is most of a large run's bootstrap, and each row
    needs only the one block its rank falls in."""

    BLOCK = 256

    def __init__(self, held: np.ndarray) -> None:
        pad = -held.shape[1] % self.BLOCK
        self.held = np.pad(held, ((0, 0), (0, pad))) if pad else held
        rows = len(held)
        self.blocks = self.held.reshape(rows, -1, self.BLOCK).sum(axis=2).cumsum(axis=1)

    def total(self, r: int) -> int:
        return int(self.blocks[r, -1])

    def find(self, r: int, rank: int) -> int:
        """The first column whose running sum in row `r` exceeds `rank`: what
        np.searchsorted(held[r].cumsum(), rank, side="right") gives."""
        b = int(np.searchsorted(self.blocks[r], rank, side="right"))
        before = int(self.blocks[r, b - 1]) if b else 0
        within = self.held[r, b * self.BLOCK:(b + 1) * self.BLOCK].cumsum()
        return b * self.BLOCK + int(np.searchsorted(within, rank - before, side="right"))


def _bounds(samples: np.ndarray) -> list[float] | None:
    samples = samples[np.isfinite(samples)]
    if not samples.size:
        return None
    return [float(np.percentile(samples, 2.5)), float(np.percentile(samples, 97.5))]


def requests_to_separate(n: int, a: float, a_ci: list[float], b: float, b_ci: list[float]) -> int:
    """About how many requests per rate would make two attainment intervals stop
    overlapping: the sides of the intervals that face each other shrink as 1/sqrt(n).

    The facing sides, not half widths: near 1 a bootstrap interval is lopsided, and half
    widths would say that the requests already run "would tell"."""
    gap = abs(a - b)
    if gap < 1e-9:  # 63/70 against 0.9 differs by float rounding alone
        return 0  # no difference to resolve at any size
    (hi, hi_ci), (lo, lo_ci) = sorted(((a, a_ci), (b, b_ci)), key=lambda v: v[0], reverse=True)
    facing = (hi - hi_ci[0]) + (lo_ci[1] - lo)
    return int(np.ceil(n * max(1.0, (facing / gap) ** 2)))
