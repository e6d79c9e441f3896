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

from advisor.decide.thresholds import Thresholds
from advisor.goodput.outcomes import WITHIN_NOISE, ahead
from advisor.plan.screen import SCREEN_REQUESTS, scale_at, screened
from advisor.plan.steptime import Step, Work
from advisor.plan.system import EngineSpec, StepModel, System
from advisor.rundata.manifest import Sensitive
from advisor.rundata.slo import Slo
from workloads.spec import SyntheticSpec

FACTORS = (2.0, 4.0)  # each input scaled by these and their inverses; a turn bisected once


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
          attainment: float, seed: int, concurrency: int | None = None,
          requests: int = SCREEN_REQUESTS) -> list[Sensitive]:
    """For each uncertain input, where the comparison of `col` and `dis` turns (both
    systems scaled alike), screened with `requests` a rate (no more than the plan ran);
    empty where the screen at the planned inputs separates neither way (no verdict to
    hold)."""
    seen: dict[int, tuple[System, float, float]] = {}  # by identity: an input that
    # leaves a system as it is (the KV link of a collocated one) is not screened again

    def screen(x: System) -> tuple[float, float]:
        if id(x) not in seen:
            best = screened(x, spec, rates, slo, attainment, seed, concurrency,
                            requests=requests)[0]
            # neither may meet it: the nearer one then, by its SLO multiple
            near = scale_at(x, spec, rates[0], slo, attainment, seed, concurrency,
                            requests) if best == 0 else 0.0
            seen[id(x)] = (x, best, near)
        return seen[id(x)][1:]

    def verdict(c: System, d: System) -> str:
        (got_c, near_c), (got_d, near_d) = screen(c), screen(d)
        if got_c == got_d == 0:
            got_c, got_d = 1 / near_c, 1 / near_d
        return ahead(got_c, got_d, Thresholds().goodput_margin)

    planned = verdict(col, dis)
    if planned == WITHIN_NOISE:
        return []
    out = []
    for name, what, scale in INPUTS:
        if name == "KV link" and dis.link is None:
            continue
        turns: list[tuple[float, str] | None] = []  # going up, then going down
        for direction in (1, -1):
            turn = None
            before = 1.0
            for f in FACTORS:
                factor = f ** direction
                got = verdict(scale(col, factor), scale(dis, factor))
                if got != planned:
                    mid = math.sqrt(before * factor)
                    if verdict(scale(col, mid), scale(dis, mid)) != planned:
                        factor = mid
                    turn = (factor, got)
                    break
                before = factor
            turns.append(turn)
        out.append(_said(name, what, planned, turns[0], turns[1]))
    return sorted(out, key=lambda f: math.inf if f.factor is None else abs(math.log(f.factor)))


AHEAD = {"disaggregate": "disaggregated ahead", "stay-collocated": "collocated ahead",
         WITHIN_NOISE: "within noise of each other"}


def _said(name: str, what: str, planned: str, up: tuple[float, str] | None,
          down: tuple[float, str] | None) -> Sensitive:
    """The sentence for one input, turning at `up` (above 1) and `down` (below), each the
    factor and what it turns into; the nearer of them kept as the input's factor."""
    ahead = AHEAD[planned]
    if up is None and down is None:
        span = f"{1 / FACTORS[-1]:g}x to {FACTORS[-1]:g}x"
        return Sensitive(name, None, None, f"{ahead} with {what} anywhere from {span} "
                                           "those priced")
    if up is not None and down is not None:
        said = (f"{ahead} while {what} are between about {down[0]:.2g}x and {up[0]:.2g}x "
                f"those priced (below: {AHEAD[down[1]]}; above: {AHEAD[up[1]]})")
    else:
        factor, becomes = up if up is not None else down  # type: ignore[misc]
        side = "at most" if up is not None else "at least"
        said = (f"{ahead} while {what} are {side} about {factor:.2g}x those priced "
                f"(there: {AHEAD[becomes]})")
    near = min((t for t in (up, down) if t is not None), key=lambda t: abs(math.log(t[0])))
    return Sensitive(name, near[0], near[1], said)
