"""Values as the console and the reports show them."""

from __future__ import annotations

from typing import Any


def fmt(v: object) -> str:
    """One value: "-" when missing, 3 significant digits for floats."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def fmt_items(d: dict[str, Any] | None) -> str:
    """ "key=value, ..." of a dict's present values (a decision row's evidence or thresholds)."""
    return ", ".join(f"{k}={fmt(v)}" for k, v in (d or {}).items() if v is not None)


def fmt_ms(v: float) -> str:
    """A latency: seconds from 1 s up, else milliseconds."""
    return f"{v / 1000:.2g} s" if v >= 1000 else f"{v:.3g} ms"
