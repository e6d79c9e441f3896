"""Bootstrap 95% intervals of a run's headline statistics.

Requests are resampled whole (an ITL gap belongs to its request: gaps of one request are
not independent), BOOTSTRAP times with a fixed seed, so the same records give the same
intervals.
"""

from __future__ import annotations

import warnings

import numpy as np

BOOTSTRAP = 500
SEED = 0


def intervals(good: list[bool], ttft_ms: list[float | None],
              itl_ms: list[list[float]]) -> dict[str, list[float] | None]:
    """95% intervals of SLO attainment, median TTFT and pooled p99 ITL, one entry per
    request (None TTFT and no gaps for a failed one)."""
    n = len(good)
    if n == 0:
        return {"slo_attainment": None, "median_ttft_ms": None, "p99_itl_ms": None}
    rng = np.random.default_rng(SEED)
    picks = rng.integers(0, n, size=(BOOTSTRAP, n))
    att = np.asarray(good, float)[picks].mean(axis=1)
    ttft = np.array([np.nan if t is None else t for t in ttft_ms])[picks]
    out = {"slo_attainment": _bounds(att)}
    if np.isnan(ttft).any():
        with warnings.catch_warnings():  # a resample of failed requests only has no median
            warnings.simplefilter("ignore", RuntimeWarning)
            out["median_ttft_ms"] = _bounds(np.nanmedian(ttft, axis=1))
    else:  # NOTE: nanmedian goes row by row in Python past 600 columns; median does not
        out["median_ttft_ms"] = _bounds(np.median(ttft, axis=1))
    gaps = [np.asarray(g, float) for g in itl_ms]
    if any(g.size for g in gaps):
        out["p99_itl_ms"] = _bounds(_pooled_p99(gaps, picks))
    else:
        out["p99_itl_ms"] = None
    return out


TAIL = 0.02  # the share of all gaps, largest first, that resamples' p99 is looked up in


def _pooled_p99(gaps: list[np.ndarray], picks: np.ndarray) -> np.ndarray:
    """np.percentile(99) of each resample's pooled gaps, without pooling them: a resample
    holds request i's gaps count_i times, so its p99 is found by rank among the largest
    gaps weighted by those counts (all gaps only when a resample's 1% reaches past them).

    gaps: one array per request; picks: [resamples, requests] request indices."""
    sizes = np.array([g.size for g in gaps])
    owner = np.repeat(np.arange(len(gaps)), sizes)  # [all gaps] its request
    flat = np.concatenate(gaps)
    order = np.argsort(flat)[::-1]  # largest first
    keep = order[: max(1, int(np.ceil(TAIL * flat.size)))]
    counts = np.stack([np.bincount(row, minlength=len(gaps)) for row in picks])  # [R, n]
    weights = counts[:, owner[keep]].cumsum(axis=1)  # [R, kept] multiplicity, running
    total = counts @ sizes  # [R] pooled gaps per resample
    out = np.full(len(picks), np.nan)
    for r, n in enumerate(total):
        if n == 0:
            continue
        h = (n - 1) * 0.99
        lo = int(np.floor(h))
        top = n - 1 - lo  # 0-based positions from the largest of the ranks lo and lo + 1
        if top < weights[r, -1]:
            a = flat[keep[np.searchsorted(weights[r], top, side="right")]]
            b = flat[keep[np.searchsorted(weights[r], top - 1, side="right")]] if top else a
            out[r] = a + (h - lo) * (b - a)
        else:  # the tail kept is too short for this resample: pool it
            out[r] = np.percentile(np.repeat(flat, counts[r][owner]), 99)
    return out


def _bounds(samples: np.ndarray) -> list[float] | None:
    samples = samples[np.isfinite(samples)]
    if not samples.size:
        return None
    return [float(np.percentile(samples, 2.5)), float(np.percentile(samples, 97.5))]


def requests_to_separate(n: int, a: float, a_ci: list[float], b: float, b_ci: list[float]) -> int:
    """About how many requests per rate would make two attainment intervals stop
    overlapping: the sides of the intervals that face each other shrink as 1/sqrt(n).

    # NOTE: the facing sides, not half widths: a bootstrap interval near 1 is lopsided.
    # Measured: 0.95 in [0.896, 0.99] against a 0.9 target at 77 requests; by half widths
    # (0.047 < the 0.05 gap) 77 "would tell", the number already run."""
    gap = abs(a - b)
    if gap < 1e-9:  # NOTE: 63/70 against 0.9 differs by float rounding alone
        return 0  # no difference to resolve at any size
    (hi, hi_ci), (lo, lo_ci) = sorted(((a, a_ci), (b, b_ci)), key=lambda v: v[0], reverse=True)
    facing = (hi - hi_ci[0]) + (lo_ci[1] - lo)
    return int(np.ceil(n * max(1.0, (facing / gap) ** 2)))
