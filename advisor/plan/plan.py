"""`advisor plan`: predict every placement of a model on GPUs we cannot run here, by
simulation, and decide as a sweep would.

Each placement (collocated replicas, every xPyD split, at the smallest TP the model fits)
runs the workload at a grid of rates through the simulator (advisor.plan.simulate) with
roofline step times for the GPU; its max goodput at the SLO ranks it (per GPU); the best
collocated and the best disaggregated go through the decision table. The run directory
has a sweep's files, every figure labelled as simulated.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np

from advisor.engines.placement import Placement
from advisor.errors import UsageError
from advisor.goodput.outcomes import Outcome, goodput_interval, max_goodput_rate
from advisor.measure.stats import check_judged
from advisor.output import console
from advisor.output.progress import progress_bars
from advisor.plan import candidates as cands
from advisor.plan import hardware, kernels, pareto, screen, sensitivity, sim_runs
from advisor.plan.candidates import Candidate
from advisor.plan.options import DEFAULT_MODEL, PlanOptions
from advisor.plan.pd_costs import pd_costs
from advisor.plan.simulate import Simulation
from advisor.plan.steptime import Step, prefill_step
from advisor.plan.system import StepModel, System
from advisor.probe import p2p, p2p_pairs
from advisor.probe.links import HOST_STAGED, Link
from advisor.probe.p2p import P2PMatrix
from advisor.probe.p2p_pairs import GpuPlacement, place
from advisor.probe.shapes import ModelShape, shape_of
from advisor.rundata.bounds import MAX_GPUS_PER_NODE, MAX_NODES, MAX_PLACEMENT_GPUS
from advisor.rundata.evidence import Calibration
from advisor.rundata.manifest import Manifest, PlanFacts, Screened
from advisor.rundata.recommendation import PlacementRank
from advisor.rundata.result import AS_RUN
from advisor.rundata.rundir import RunDir
from workloads.arrivals import Arrivals
from workloads.lengths import LengthDist
from workloads.presets import preset_spec, seed_for
from workloads.spec import SyntheticSpec

RATES = 10  # grid points when no --rates are given
MAX_PLAN_PROMPTS = 100_000  # simulated requests per rate
# placements one plan screens (8 GPUs give tens; 128 of a small model 580, ~1 s each)
MAX_CANDIDATES = 1000
PRECISION = {"bf16": "bfloat16", "fp8": "fp8", "int4": "int4", None: "bfloat16"}


@dataclasses.dataclass(frozen=True)
class _Setup:
    shape: ModelShape
    gpu: hardware.GPU
    link: Link  # with P2P as --p2p says (auto without a matrix: assumed)
    spec: SyntheticSpec
    candidates: list[cands.Candidate]
    matrix: P2PMatrix | None = None  # --p2p auto: what decides each P/D's link
    p2p_source: str | None = None  # the matrix's file or command
    p2p_said: str = ""  # where P2P came from, or that it was assumed
    weights: str = "bfloat16"  # the weights' precision (advisor.probe.shapes.BYTES)
    kv: str = "bfloat16"  # the KV cache's
    per_node: int = 0  # GPUs on each node (0: one node)
    inter: Link | None = None  # between nodes

    def link_for(self, c: Candidate) -> tuple[Link, GpuPlacement | None]:
        """Candidate `c`'s KV link, and its GPUs on the matrix (disaggregated, with one; any
        of the matrix's GPUs): the GPUs' own fabric where every P->D pair it is placed on
        has P2P, else host-staged."""
        if self.inter is not None and cands.crossing(c, self.per_node) > 0:
            return self.inter, None  # every transfer priced on it: an upper bound
        if self.matrix is None or c.kind != "disagg":
            return self.link, None
        placed = place(self.matrix, list(range(len(self.matrix.gpus))), c.prefill, c.decode,
                       c.tp, c.dtp)
        ok = all(p.status.startswith("OK") for p in placed.pairs)
        return (self.link if ok else HOST_STAGED), placed


def _setup(o: PlanOptions) -> _Setup:
    """Everything the options name, checked: UsageError naming the flag otherwise."""
    check_judged(o.slo)
    for bad, what in ((not 1 <= o.gpus <= MAX_GPUS_PER_NODE,
                       f"--gpus must be 1 to {MAX_GPUS_PER_NODE}, not {o.gpus}"),
                      (not 1 <= o.nodes <= MAX_NODES,
                       f"--nodes must be 1 to {MAX_NODES}, not {o.nodes}"),
                      (o.gpus * o.nodes > MAX_PLACEMENT_GPUS,
                       f"--gpus x --nodes must be at most {MAX_PLACEMENT_GPUS} GPUs"),
                      (not 10 <= o.requests <= MAX_PLAN_PROMPTS,
                       f"--num-prompts must be 10 to {MAX_PLAN_PROMPTS}, not {o.requests}"),
                      (any(r <= 0 for r in o.rates), "--rates must each be > 0")):
        if bad:
            raise UsageError(what)
    try:
        shape = shape_of(o.model or DEFAULT_MODEL)
    except ValueError as e:
        raise UsageError(f"--model: {e}") from None
    try:
        g = hardware.gpu(o.gpu)
        for flag, v in (("--scale", o.scale), ("--output-scale", o.output_scale)):
            if not 0 < v < math.inf:
                raise ValueError(f"{flag} {v:g}: expected a finite number above 0")
        spec = _spec(o)
    except ValueError as e:
        raise UsageError(str(e) if str(e).startswith("--") else f"--workload: {e}") from None
    matrix, source, said = _p2p(o)
    try:
        lk = hardware.link(o.link, o.p2p != "no", g)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if spec.turns > 1:
        raise UsageError(f"--workload {o.workload}: multi-turn workloads are not simulated "
                         "(turn k's prompt depends on turn k-1's reply); measure them")
    weights = PRECISION[o.weights or shape.weights or "bf16"]
    kv = PRECISION[o.kv_dtype]
    inter = None
    if o.nodes > 1:
        if matrix is not None:
            raise UsageError("--p2p-matrix describes one host; with --nodes give --p2p yes|no")
        try:
            inter = hardware.link(o.inter_node, True, g)
        except ValueError as e:
            raise UsageError(str(e).replace("--link", "--inter-node")) from None
    try:
        g.tflops(weights)
        found = cands.candidates(shape, g, o.gpus * o.nodes, weights, o.gpus)
    except ValueError as e:
        raise UsageError(str(e) if str(e).startswith("--") else
                         f"--model {o.model} on --gpus {o.gpus} --gpu {o.gpu}: {e}") from None
    if o.placements:
        unknown = [n for n in o.placements if n not in {c.name for c in found}]
        if unknown:
            raise UsageError(f"--placements: no placement {', '.join(unknown)} of {o.model} on "
                             f"{o.gpus * o.nodes} x {g.name}; there are "
                             f"{', '.join(c.name for c in found)}")
        found = [c for c in found if c.name in o.placements]
    if len(found) > MAX_CANDIDATES:
        raise UsageError(f"--gpus {o.gpus} --nodes {o.nodes}: {len(found)} placements to "
                         f"simulate, over {MAX_CANDIDATES}: name the ones to compare "
                         "(--placements) or plan fewer GPUs")
    return _Setup(shape, g, lk, spec, found, matrix, source, said, weights, kv,
                  o.gpus if o.nodes > 1 else 0, inter)


def _spec(o: PlanOptions) -> SyntheticSpec:
    """The workload the options name: a preset at its scales, or vllm bench's random
    dataset; arriving as --arrivals says. ValueError naming the flag."""
    if o.dataset_name == "random":
        kind = "uniform" if o.random_range_ratio else "fixed"
        spec = SyntheticSpec(input=LengthDist(kind, o.random_input_len, o.random_range_ratio),
                             output=LengthDist(kind, o.random_output_len, o.random_range_ratio))
    else:
        spec = preset_spec(o.workload, o.scale, output_scale=o.output_scale)
    return dataclasses.replace(spec, arrivals=parse_arrivals(o.arrivals))


def parse_arrivals(text: str) -> Arrivals:
    """--arrivals poisson | constant | gamma:CV (gamma gaps of that coefficient of
    variation: shape 1 / CV^2, vLLM's --burstiness); ValueError naming the flag."""
    kind, _, cv = text.lower().partition(":")
    if kind in ("poisson", "constant") and not cv:
        return Arrivals(kind)
    if kind == "gamma":
        try:
            v = float(cv)
        except ValueError:
            v = 0.0
        if 0 < v < math.inf:
            return Arrivals("gamma", burstiness=1 / v ** 2)
    raise ValueError(f"--arrivals {text!r}: expected poisson, constant or gamma:CV with CV "
                     "a number above 0 (gamma:2 is burstier than Poisson, gamma:0.5 steadier)")


def _p2p(o: PlanOptions) -> tuple[P2PMatrix | None, str | None, str]:
    """--p2p auto: the matrix of --p2p-matrix, else nvidia-smi's here, else none (P2P
    assumed); yes / no as given. With where P2P came from, said for the label."""
    if o.p2p != "auto":
        if o.p2p_matrix:
            raise UsageError(f"--p2p {o.p2p} and --p2p-matrix: give one (--p2p auto reads "
                             "the matrix)")
        return None, None, f"P2P {o.p2p} (--p2p {o.p2p})"
    matrix, source = p2p.read(o.p2p_matrix)
    if matrix is None:
        return None, None, ("P2P assumed (no matrix: give --p2p-matrix FILE, or plan where "
                            "nvidia-smi runs)")
    if len(matrix.gpus) < o.gpus:
        raise UsageError(f"--p2p-matrix {source}: {len(matrix.gpus)} GPUs, but --gpus {o.gpus}")
    return matrix, source, f"P2P from {source} (P and D placed on pairs with it)"


def label(s: _Setup) -> str:
    p2p = "" if s.link.name != "host-staged" else " (no P2P)"
    staged = (f", host-staged ({HOST_STAGED.source}) for a P/D placed on a pair without it"
              if s.matrix is not None else "")
    nodes = (f"; nodes of {s.per_node} GPUs, instances in order (prefillers first), KV "
             f"crossing nodes over {s.inter.name} ({s.inter.source}), every transfer of a "
             "P/D with any pair across them priced on it" if s.inter is not None else "")
    return (f"simulated by advisor plan: {s.shape.name} on {s.gpu.name}, weights "
            f"{_short(s.weights)}, KV cache {_short(s.kv)}, KV over "
            f"{s.link.name}{p2p} ({s.link.source}){staged}{nodes}; {s.p2p_said}; step times "
            f"priced by {priced_by(s)}")


def _first_step(s: _Setup) -> StepModel:
    """The step model of the plan's first placement: every one is priced the same way
    (measured kernel tables, or the roofline)."""
    c = s.candidates[0]
    return cands.step_model(s.shape, s.gpu, c.tp, s.weights, s.kv, c.layout)


def _tables_vllm(s: _Setup) -> str | None:
    """The vLLM whose kernel tables price the plan (None: the roofline)."""
    step = _first_step(s)
    return step.tables.versions["gemm"] if isinstance(step, kernels.TableStep) else None


def priced_by(s: _Setup) -> str:
    """What prices the plan's step times."""
    return _first_step(s).source


FALLEN = 2  # rates in a row a placement has collapsed at before its higher ones are skipped


def _fallen(outcomes: list[Any]) -> bool:
    """Whether a placement collapsed (advisor.goodput.outcomes.COLLAPSE) at its last
    FALLEN rates: at a higher one it surely misses too, as a sweep's grid stops there."""
    return len(outcomes) >= FALLEN and all(o.collapsed for o in outcomes[-FALLEN:])


def _short(precision: str) -> str:
    return "bf16" if precision == "bfloat16" else precision


def _system(s: _Setup, o: PlanOptions, c: Candidate) -> System:
    """Candidate `c` as the simulator runs it: on its link, with the token budgets given."""
    return cands.system(c, s.shape, s.gpu, s.link_for(c)[0], s.weights,
                        o.max_num_batched_tokens, kv_dtype=s.kv,
                        prefill_batched_tokens=o.prefill_max_num_batched_tokens)


def unloaded(s: _Setup, o: PlanOptions) -> Calibration:
    """What one request alone gets on a collocated instance, as a sweep's calibration."""
    system = _system(s, o, s.candidates[0])
    engine = system.decode[0]
    mean = float(np.mean(s.spec.input.sample(200, np.random.default_rng(o.seed))))
    prompts = [max(1, round(mean * f)) for f in (0.25, 0.5, 1.0)]
    ttft = []
    for p in prompts:  # the prompt's chunks one after another, plus the front's hop
        done, ms = 0, system.front_ms
        while done < p:
            n = min(engine.max_batched_tokens, p - done)
            ms += float(engine.step.ms(prefill_step(n, done)))
            done += n
        ttft.append(ms)
    steps = [float(engine.step.ms(Step(decodes=b, pairs=b * mean, kv_read_tokens=b * mean)))
             for b in (1, 8)]
    slope, base = np.polyfit(prompts, ttft, 1)
    return Calibration(prompts, ttft, [1, 8], steps, max(float(slope), 1e-9), float(base),
                       s.weights, f"{s.candidates[0].name} (simulated)")


def grid(s: _Setup, o: PlanOptions, cal: Calibration) -> list[float]:
    """--rates, else RATES rates up to about twice what the GPUs could prefill back to back
    (no placement sustains more), from a fiftieth of it (where decodes rarely meet a
    prefill)."""
    if o.rates:
        return sorted(o.rates)
    top = 2 * o.gpus * o.nodes / (cal.ttft_ms[-1] / 1000)
    return [float(f"{r:.3g}") for r in np.geomspace(top / 50, top, RATES)]


def run_plan(o: PlanOptions, argv: list[str] | None = None) -> sim_runs.Planned:
    """Simulate, rank and decide; the recommendation (with `ranking` and `simulated`)."""
    o = dataclasses.replace(o, model=o.model or DEFAULT_MODEL)
    s = _setup(o)
    what = label(s)
    cal = unloaded(s, o)
    run_dir = RunDir.create(o.out, f"plan-{o.workload_name}")
    config = {k: v for k, v in dataclasses.asdict(o).items() if k != "as_json"}
    run_dir.write_manifest(Manifest.new(o.seed, config, argv, simulated=what, plan=PlanFacts.of({
        "gpu": s.gpu, "link": s.link, "vllm": _tables_vllm(s), "candidates": s.candidates})))
    prompt = float(cal.prompt_tokens[-1])  # the workload's mean prompt
    rates = grid(s, o, cal)
    with progress_bars() as bars:
        task = bars.add_task("screening")
        finals, screened = screen.finalists(
            s.candidates, lambda c: _system(s, o, c),
            s.spec, rates, o.slo, o.attainment, o.seed,
            lambda what: bars.update(task, description=what), o.max_concurrency)
    if screened:
        run_dir.update_manifest(screened=Screened(screen.SCREEN_REQUESTS, screened))
        print(f"screened {len(screened)} placements ({screen.SCREEN_REQUESTS} requests per "
              f"rate); simulating {len(finals)} in full: {', '.join(c.name for c in finals)}")
    s = dataclasses.replace(s, candidates=finals)
    placements = [Placement(c.name, c.kind) for c in s.candidates]
    done: dict[str, list[Outcome]] = {p.name: [] for p in placements}
    transfers: dict[str, list[Simulation]] = {p.name: [] for p in placements}
    frontier_rows: list[Any] = []  # (placement, rate, statistics, GPUs, met the SLO) per run
    missed = [m for m, v in cal.floors(prompt).items() if m in o.slo and v > o.slo.ms(m)]
    if missed:  # as the sweep: the floor misses the SLO, nothing to search
        rates = []
    with progress_bars() as bars:
        task = bars.add_task("simulating", total=len(placements) * len(rates))
        for c, p in zip(s.candidates, placements):
            system = _system(s, o, c)
            for rate in rates:
                # the default grid only, and never capped: a closed loop's comparison is
                # of throughput at saturation, which only the rates past collapse show
                if not o.rates and o.max_concurrency is None and _fallen(done[p.name]):
                    bars.advance(task)
                    continue
                bars.update(task, description=f"simulating {p.name} at {rate:g} req/s")
                reqs = sim_runs.requests(s.spec, rate, o.requests, seed_for(o.seed, rate))
                sim = sim_runs.run(system, reqs, p, rate, o.slo, o.attainment, what,
                                   o.workload_name, _params(o), o.max_concurrency)
                run_dir.write_run(sim.result)
                done[p.name].append(sim.outcome)
                frontier_rows.append((p.name, rate, sim.result.stats, c.gpus, sim.outcome.meets))
                transfers[p.name].append(sim.sim)
                bars.advance(task)
    attained = {(name, rate): stats.slo_attainment or 0.0
                for name, rate, stats, _, _ in frontier_rows}
    ranking = _ranking(s, placements, done, attained)
    shown = _best(placements, ranking)
    dis = next((p for p in shown if p.kind == "disagg"), None)
    kv = p2p_ev = None
    if dis:
        c = next(c for c in s.candidates if c.name == dis.name)
        lk, placed = s.link_for(c)
        kv = sim_runs.kv_evidence(transfers.get(dis.name, []), s.shape.kv_bytes_per_token(s.kv),
                              lk.name)
        if s.matrix is not None:
            p2p_ev = p2p_pairs.evidence(s.matrix, s.p2p_source or "nvidia-smi", placed,
                                        o.model, prompt, s.kv)
    notes = _uncertain(run_dir, s, o, shown, rates, prompt) if rates else ()
    planned = sim_runs.decide(run_dir, o, shown, placements, done, rates, cal, prompt, kv, what,
                              o.model or DEFAULT_MODEL, tp=s.candidates[0].tp, ranking=ranking,
                              p2p=p2p_ev, pareto=pareto.points(frontier_rows),
                              gpus={c.name: c.gpus for c in s.candidates}, notes=notes)
    if o.as_json:
        print(json.dumps(planned.to_json(), indent=2, default=str))
    else:
        _print_ranking(ranking, s.candidates)
        console.print_recommendation(planned.recommendation)
        print(f"run directory: {run_dir}: report.html, report.md, evidence.json, "
              "recommendation.json (every figure simulated)")
    return planned


def _uncertain(run_dir: RunDir, s: _Setup, o: PlanOptions, shown: list[Placement],
               rates: list[float], prompt: float) -> tuple[str, ...]:
    """What the shown P/D placement is charged and where the verdict between the shown
    pair would turn, into the manifest; the latter's sentences, for the reasons."""
    by_name = {c.name: c for c in s.candidates}
    col = next((by_name[p.name] for p in shown if p.kind == "collocated"), None)
    dis = next((by_name[p.name] for p in shown if p.kind == "disagg"), None)
    if col is None or dis is None:
        return ()
    systems = [_system(s, o, c) for c in (col, dis)]
    found = sensitivity.flips(systems[0], systems[1], s.spec, rates, o.slo, o.attainment, o.seed,
                              o.max_concurrency, min(screen.SCREEN_REQUESTS, o.requests))
    facts = run_dir.read_manifest().plan
    if facts is not None:
        costs = pd_costs(systems[1], prompt, s.shape.kv_bytes_per_token(s.kv))
        run_dir.update_manifest(plan=dataclasses.replace(facts, pd_costs=costs,
                                                         sensitivity=found))
    return tuple(f"simulated sensitivity: {f.said}" for f in found)


def _params(o: PlanOptions) -> dict[str, Any]:
    """A simulated run's workload_params: what made its workload, its cap on requests in
    flight, and whether it is judged on what it served alone (--num-prompts given:
    `AS_RUN`)."""
    made = ({"dataset": "random", "random_input_len": o.random_input_len,
             "random_output_len": o.random_output_len,
             "random_range_ratio": o.random_range_ratio} if o.dataset_name else
            {"preset": o.workload, "scale": o.scale, "output_scale": o.output_scale})
    capped = {"max_concurrency": o.max_concurrency} if o.max_concurrency else {}
    return {**made, "arrivals": o.arrivals, "simulated": True, **capped,
            **({AS_RUN: True} if o.num_prompts else {})}


def _ranking(s: _Setup, placements: list[Placement], done: dict[str, Any],
             attained: dict[tuple[str, float], float]) -> list[PlacementRank]:
    """Placements by max goodput per GPU, best first; a tie by the SLO attainment at the
    rate it was judged at (its best, else the lowest tried), so that where none meets the
    SLO the one nearest to it is shown."""
    out, near = [], {}
    for c, p in zip(s.candidates, placements):
        if not done[p.name]:
            continue
        best = max_goodput_rate(done[p.name])
        lo, hi = goodput_interval(done[p.name])
        near[p.name] = attained.get((p.name, best or min(o.rate for o in done[p.name])), 0.0)
        out.append(PlacementRank(p.name, p.kind, c.tp, c.gpus, best, best / c.gpus, [lo, hi]))
    return sorted(out, key=lambda r: (-r.goodput_per_gpu, -near[r.placement]))


def _best(placements: list[Placement], ranking: list[PlacementRank]) -> list[Placement]:
    """The best collocated and the best disaggregated placement (collocated first)."""
    by_name = {p.name: p for p in placements}
    out = []
    for kind in ("collocated", "disagg"):
        top = next((r.placement for r in ranking if r.kind == kind), None)
        top = top or next((p.name for p in placements if p.kind == kind), None)
        if top:
            out.append(by_name[top])
    return out


def _print_ranking(ranking: list[PlacementRank], candidates: list[Any]) -> None:
    if not ranking:
        return
    tps = {c.name: c.tp_text for c in candidates}
    print("placements by max goodput per GPU (simulated):")
    for r in ranking:
        lo, hi = r.interval_rps
        print(f"  {r.placement:>22} ({tps.get(r.placement, f'TP {r.tp}')}, {r.gpus} GPUs): "
              f"{r.max_goodput_rps:.3g} req/s, {r.goodput_per_gpu:.3g} per GPU "
              f"(between {lo:.3g} and {'?' if hi is None else f'{hi:.3g}'})")
