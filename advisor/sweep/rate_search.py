"""Which request rate to measure next: a pure function of what has been measured, so a
resumed sweep makes the same choices. The first pass (every placement's) builds a bracket
around each max goodput, up to a rate that surely misses; the second (`refine`), only
while two intervals overlap, measures again the bounds within noise, steps down and
bisects; the third (`to_sharpen`), where the decision states a ratio of two placements' max
goodputs, bisects their intervals until the ratio's is narrower than the grid's factor of
2. docs/design/sweep.md has the procedure step by step."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import cast

from advisor.decide.thresholds import RATIO_WIDTH
from advisor.goodput.outcomes import Outcome, apart, goodput_interval, top

# halvings below the first rate `to_sharpen` may step to find a rate that surely meets:
# each costs twice the time of the last for the same requests
DOWN_TO_BOUND = 2


@dataclass(frozen=True)
class SearchPlan:
    start: float = 0.5
    max_steps: int = 4  # doublings while building the grid; also the bracket's extension budget
    bisect_steps: int = 1
    # steps of 1/sqrt(2) below the grid when nothing meets: the first rate is sized near the
    # knee, so a small step usually finds one that meets; low rates are slow to measure (30
    # requests at 0.3 req/s: 100 s), so one step below `start`, and the interval says the
    # rest (a follower replaying from high rates steps down freely until it gets there)
    max_down: int = 1
    min_ratio: float = 1.15  # stop bisecting when hi / lo is this close
    max_confirm: int = 2  # rates above the lowest miss, to find one that surely misses


def grid_of(leading: list[Outcome], plan: SearchPlan) -> list[float]:
    """The doubling grid the leading topology measured: up to and including the first
    rate where it surely missed the SLO or its p99 ITL collapsed, at most `max_steps` rates.

    Past a sure miss the leader's rates decide nothing: the others start there and double
    on their own while they meet."""
    grid = []
    for o in leading[: plan.max_steps]:
        grid.append(o.rate)
        if _stops(o):
            break
    return grid


def _stops(o: Outcome) -> bool:
    """Whether the leader's doubling ends at `o`."""
    return o.collapsed or o.sure_misses


def replay_grid(leading: list[Outcome], plan: SearchPlan) -> list[float]:
    """The rates the other topologies measure first: the lowest rate where the leading
    topology surely missed the SLO (any rate its search measured; else the lowest grid rate
    where its p99 ITL collapsed, else where it missed at all; its top grid rate alone if it
    missed at none), then the grid's rates above it.

    A miss that is not a sure one is within noise of the target: comparing there decides no
    more than at the sure miss above it, and low rates are the slowest to measure."""
    grid = grid_of(leading, plan)
    on_grid = [o for o in leading if o.rate in grid]
    sure = [o.rate for o in leading if o.sure_misses]
    collapsed = [o.rate for o in on_grid if o.collapsed]
    missed = [o.rate for o in on_grid if not o.meets]
    first = min(sure or collapsed or missed, default=max(grid, default=0.0))
    return [first, *(r for r in grid if r > first)]


def next_rate(
    done: list[Outcome], plan: SearchPlan, grid: list[float] | None, fixed: bool = False,
    refine: bool = True,
) -> float | None:
    """The next rate for a topology, or None when it is finished.

    `grid`: None for the leading topology (it builds the grid by doubling);
    otherwise the rates to replay first. `fixed`: only the grid, no search.
    `refine`: the second pass (down-steps and bisection) too; without it, the first.
    """
    rates = {o.rate for o in done}
    if grid is None:  # leading: double until a sure miss, a collapse or out of steps
        if len(done) < plan.max_steps and not any(_stops(o) for o in done):
            return cast("float | None", plan.start * 2 ** len(done))
        grid = grid_of(done, plan)
    for r in grid:
        if r not in rates:
            return r
    if fixed:
        return None
    ok = [o.rate for o in done if o.meets]
    bad = [o.rate for o in done if not o.meets]
    if not ok:  # nothing meets: look lower (second pass), else bound it from above
        below = _down(done, plan, grid, refine)
        return below if below is not None else _bound(done, plan, 0.0, min(rates))
    lo = max(ok)
    above = [r for r in bad if r > lo]
    if not above:  # everything meets: look higher
        return lo * 2 if len(done) - len(grid) < plan.max_steps else None
    hi = min(above)
    # a follower's replayed rates may be the leader's bisections: not its own
    bisections = sum(1 for o in done if not _on_lattice(o.rate, plan.start) and o.rate not in grid)
    if refine and bisections < plan.bisect_steps and hi / lo >= plan.min_ratio:
        return round(math.sqrt(lo * hi), 4)
    step = _bound(done, plan, lo, hi)
    if step is None and not any(o.sure_meets for o in done):
        # met, but at no rate surely: the interval has no lower bound until a lower
        # rate surely meets
        return _down(done, plan, grid, refine)
    return step


def _down(done: list[Outcome], plan: SearchPlan, grid: list[float], refine: bool) -> float | None:
    """1/sqrt(2) below the lowest rate measured, in a second pass: freely while above the
    first rate (`plan.start`) and the grid, `max_down` times below them; else None."""
    rates = {o.rate for o in done}
    down = sum(1 for r in rates if r < min([*grid, plan.start]))
    below = round(min(rates) / math.sqrt(2), 4)
    return below if refine and (down < plan.max_down or below >= plan.start) else None


def top_up(done: list[Outcome], others: dict[str, list[Outcome]] | None = None) -> float | None:
    """The rate to measure again, or None: the highest rate that met the SLO if it did not
    surely meet it, else the lowest higher rate that missed if it did not surely miss it
    (the rates whose noise holds the max-goodput interval open), each once; but first the
    one of them that, come out sure, would part the interval from every one of `others`'.

    Only the bound facing another interval can part it: the miss where the other lies
    above, the met rate where it lies below."""
    ok = [o for o in done if o.meets]
    if not ok:
        return None
    best = max(ok, key=lambda o: o.rate)
    miss = min((o for o in done if not o.meets and o.rate > best.rate),
               key=lambda o: o.rate, default=None)
    todo = [o for o, sure in ((best, best.sure_meets), (miss, miss and miss.sure_misses))
            if o is not None and not sure and not o.topped_up]
    todo.sort(key=lambda o: not (others and _parts(_as_sure(done, o.rate), others)))
    return todo[0].rate if todo else None


def _as_sure(done: list[Outcome], rate: float) -> list[Outcome]:
    """`done` with the outcome at `rate` sure the way it went."""
    return [replace(o, sure_meets=o.meets, sure_misses=not o.meets) if o.rate == rate else o
            for o in done]


def _parts(done: list[Outcome], others: dict[str, list[Outcome]]) -> bool:
    """Whether `done`'s max-goodput interval is apart from every one of `others`'."""
    span = goodput_interval(done)
    return all(apart(span, goodput_interval(outs)) for outs in others.values())


def _bound(done: list[Outcome], plan: SearchPlan, lo: float, hi: float) -> float | None:
    """None once a rate above `lo` surely missed; else the top rate doubled (at most
    `max_confirm` rates above the lowest miss `hi`)."""
    if any(o.sure_misses for o in done if o.rate > lo):
        return None
    beyond = sum(1 for o in done if o.rate > hi)
    return max(o.rate for o in done) * 2 if beyond < plan.max_confirm else None


def unsettled(done: dict[str, list[Outcome]]) -> list[str]:
    """The topologies whose max-goodput interval overlaps another's (every one when there
    is no other): only a second pass can tell them apart."""
    return [name for name, outs in done.items()
            if len(done) < 2 or not _parts(outs, others_of(done, name))]


def to_refine(done: dict[str, list[Outcome]], refined: set[str],
              deployed: str | None = None) -> str | None:
    """The next topology for a second pass: of the unsettled ones not refined yet, first one
    whose next top-up would part its interval from the others' if it came out sure, then
    the one whose interval is widest (unbounded above, then from 0, then by hi / lo), then
    `deployed` (the one still running: no restart); None when none is left.

    A top-up measures again a rate already run, most often a high one: the cheapest way to
    part them; a wide interval's lower bound may be one the other cannot part from at all."""
    def width(name: str) -> tuple[float, ...]:
        lo, hi = goodput_interval(done[name])
        return (_parts_by_top_up(done, name), hi is None, lo == 0,
                top((lo, hi)) / lo if lo else math.inf, name == deployed)

    todo = [n for n in unsettled(done) if n not in refined]
    return max(todo, key=width, default=None)


def _parts_by_top_up(done: dict[str, list[Outcome]], name: str) -> bool:
    """Whether `name`'s interval would part from every other's if its next top-up
    (`top_up`) came out sure the way it went the first time."""
    others = others_of(done, name)
    rate = top_up(done[name], others)
    return rate is not None and _parts(_as_sure(done[name], rate), others)


def others_of(done: dict[str, list[Outcome]], name: str) -> dict[str, list[Outcome]]:
    """Every topology's outcomes but `name`'s."""
    return {n: outs for n, outs in done.items() if n != name}


def ratio_width(a: list[Outcome], b: list[Outcome]) -> float:
    """hi / lo of the interval the ratio of two max goodputs lies in (from each one's
    goodput interval); infinite where either is unbounded above or from 0."""
    (la, ha), (lb, hb) = goodput_interval(a), goodput_interval(b)
    if la <= 0 or lb <= 0 or ha is None or hb is None:
        return math.inf
    return (ha / la) * (hb / lb)


def to_sharpen(done: dict[str, list[Outcome]], pair: tuple[str, str], stuck: set[str],
               plan: SearchPlan) -> tuple[str, float, bool] | None:
    """What to measure next while the ratio of `pair`'s max goodputs is stated no narrower
    than RATIO_WIDTH: (placement, rate, whether to measure it again). A rate within noise
    that holds an interval open (`top_up`: a bound not sure, a bisection that came out
    within noise) is measured again first; else the interval is bisected at its geometric
    middle, where not measured and wider than `plan.min_ratio`; an interval from 0 (no
    rate surely met) is stepped down by halves, at most DOWN_TO_BOUND halvings below the
    first rate, unless failed requests alone made its lowest rate miss; the wider
    interval (one without a bound widest) first. Placements in `stuck` (a step that
    narrowed nothing) are passed over. None: narrow enough, or nothing left to try."""
    if ratio_width(done[pair[0]], done[pair[1]]) < RATIO_WIDTH:
        return None
    options = []
    for name in pair:
        if name in stuck:
            continue
        lo, hi = goodput_interval(done[name])
        width = hi / lo if lo > 0 and hi is not None else math.inf
        again = top_up(done[name])
        if again is not None:
            options.append((width, name, again, True))
        elif lo <= 0:  # surely met at no rate: no ratio is bounded until one is found
            lowest = min(done[name], key=lambda o: o.rate)
            below = round(lowest.rate / 2, 4)
            # a placement whose failures alone missed it would fail at any rate
            if below >= plan.start / 2 ** DOWN_TO_BOUND and not lowest.failing:
                options.append((width, name, below, False))
        if again is not None or hi is None or lo <= 0:
            continue
        mid = round(math.sqrt(lo * hi), 4)
        if width >= plan.min_ratio and all(abs(o.rate - mid) > 1e-9 for o in done[name]):
            options.append((width, name, mid, False))
    if not options:
        return None
    _, name, rate, again = max(options)
    return name, rate, again


def _on_lattice(rate: float, start: float) -> bool:
    """Grid and bracket rates are start x 2^k; bisection rates fall between."""
    k = math.log2(rate / start)
    return abs(k - round(k)) < 1e-9
