"""Which planned inputs the verdict rests on, and where it would flip: the two placements
compared are screened again (screen.SCREEN_REQUESTS requests a rate, their highest rate
meeting the SLO found by bisection; where neither meets it, the nearer at the lowest rate,
by the multiple of the SLO its attainment share met) with one uncertain input scaled at a
time, out to FACTORS either way, and the first factor that turns the comparison is
bisected once.

The uncertain inputs are what no kernel table measured for these GPUs: how fast the GPUs
step (the step times priced, a derated GPU's derating included) and the KV link's reached
rate. A verdict that holds over the whole range is said to; one that flips names the factor,
so a reader can set it against what they know of their hardware."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from advisor.plan.screen import scale_at, screened
from advisor.plan.steptime import Step, Work
from advisor.plan.system import EngineSpec, StepModel, System
from advisor.rundata.manifest import Sensitive
from advisor.rundata.slo import Slo
from workloads.spec import SyntheticSpec

FACTORS = (2 ** 0.5, 2.0, 4.0)  # each input scaled by these, and by their inverses
TIE = 0.10  # goodputs within this share of each other: neither wins (Thresholds' margin)


@dataclass(frozen=True)
class _Scaled:
    """A step model `factor` times slower (a factor under 1: faster)."""

    inner: StepModel
    factor: float

    def ms(self, s: Step) -> Work:
        return self.inner.ms(s) * self.factor

    @property
    def source(self) -> str:
        return f"{self.inner.source}, x{self.factor:.3g}"


def _steps(system: System, factor: float) -> System:
    def scaled(e: EngineSpec) -> EngineSpec:
        return dataclasses.replace(e, step=_Scaled(e.step, factor))

    return dataclasses.replace(system, decode=tuple(map(scaled, system.decode)),
                               prefill=tuple(map(scaled, system.prefill)))


def _link(system: System, factor: float) -> System:
    """`system` with its KV link's rate divided by `factor` (slower above 1)."""
    if system.link is None:
        return system
    return dataclasses.replace(system, link=dataclasses.replace(
        system.link, gbps=system.link.gbps / factor))


INPUTS: tuple[tuple[str, str, Callable[[System, float], System]], ...] = (
    ("step times", "the GPUs' step times", _steps),
    ("KV link", "the KV link's transfer times", _link),
)


def flips(col: System, dis: System, spec: SyntheticSpec, rates: list[float], slo: Slo,
          attainment: float, seed: int, concurrency: int | None = None) -> list[Sensitive]:
    """For each uncertain input, where the comparison of `col` and `dis` turns (both
    systems scaled alike); empty where the screen at the planned inputs separates
    neither way (no verdict to hold)."""
    def verdict(c: System, d: System) -> str:
        best = [screened(x, spec, rates, slo, attainment, seed, concurrency)
                for x in (c, d)]
        (got_c, scale_c), (got_d, scale_d) = best
        if got_c == got_d == 0:  # neither meets it: the nearer one, by its SLO multiple
            scale_c, scale_d = (scale_at(x, spec, rates[0], slo, attainment, seed,
                                         concurrency) for x in (c, d))
            got_c, got_d = 1 / scale_c, 1 / scale_d
        if got_d > got_c * (1 + TIE) and got_d > 0:
            return "disaggregate"
        if got_c > got_d * (1 + TIE) and got_c > 0:
            return "stay-collocated"
        return "within noise"

    planned = verdict(col, dis)
    if planned == "within noise":
        return []
    out = []
    for name, what, scale in INPUTS:
        if name == "KV link" and dis.link is None:
            continue
        found = None
        for direction in (1, -1):
            before = 1.0
            for f in FACTORS:
                factor = f ** direction
                got = verdict(scale(col, factor), scale(dis, factor))
                if got != planned:
                    mid = math.sqrt(before * factor)
                    if verdict(scale(col, mid), scale(dis, mid)) != planned:
                        factor = mid
                    found = (factor, got) if found is None or \
                        abs(math.log(factor)) < abs(math.log(found[0])) else found
                    break
                before = factor
        out.append(_said(name, what, planned, found))
    return sorted(out, key=lambda f: math.inf if f.factor is None else abs(math.log(f.factor)))


AHEAD = {"disaggregate": "disaggregated ahead", "stay-collocated": "collocated ahead",
         "within noise": "within noise of each other"}


def _said(name: str, what: str, planned: str, found: tuple[float, str] | None) -> Sensitive:
    span = f"{1 / FACTORS[-1]:g}x to {FACTORS[-1]:g}x"
    if found is None:
        return Sensitive(name, None, None, f"{AHEAD[planned]} with {what} anywhere from "
                                           f"{span} those priced")
    factor, becomes = found
    side = "at most" if factor > 1 else "at least"
    return Sensitive(name, factor, becomes,
                     f"{AHEAD[planned]} while {what} are {side} about {factor:.2g}x those "
                     f"priced (there: {AHEAD[becomes]})")
