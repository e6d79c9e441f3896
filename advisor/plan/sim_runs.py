"""Simulated runs as a sweep's runs: requests in, `RunResult`s and `Outcome`s out, and the
decision and the files at the end, written by the same code as a measured sweep's.

Every result, the evidence, the recommendation and the manifest carry a `simulated`
label saying what predicted them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from advisor.conclude import conclude
from advisor.deploy.advice import Where
from advisor.engines.placement import Placement
from advisor.goodput.outcomes import Outcome, outcome_of
from advisor.measure.prom import TransferTotals
from advisor.measure.stats import parse_percentiles, summarize
from advisor.measure.transfer import verdict
from advisor.measure.workload_run import record_row
from advisor.plan.options import PlanOptions
from advisor.plan.pareto import reason as pareto_reason
from advisor.plan.simulate import Simulation, simulate
from advisor.plan.system import SimRequest, System
from advisor.rundata.evidence import (
    Calibration,
    FrontendEvidence,
    KVTransferEvidence,
    P2PEvidence,
)
from advisor.rundata.recommendation import ParetoPoint, PlacementRank, Recommendation
from advisor.rundata.result import RunResult
from advisor.rundata.rundir import RunDir
from advisor.rundata.slo import Slo
from workloads.spec import SyntheticSpec

PERCENTILES = parse_percentiles("50,90,99")


def requests(spec: SyntheticSpec, rate: float, n: int, seed: int) -> list[SimRequest]:
    """`n` requests of a single-turn spec at `rate` (its arrival process), lengths only."""
    rng = np.random.default_rng(seed)
    arrivals = dataclasses.replace(spec.arrivals, rate=rate).times(n, rng)
    ins, outs = spec.input.sample(n, rng), spec.output.sample(n, rng)
    return [SimRequest(float(a), int(i), int(o)) for a, i, o in zip(arrivals, ins, outs)]


@dataclasses.dataclass(frozen=True)
class Simulated:
    """One simulated run, ready to write, and the transfers it predicted."""

    result: RunResult
    outcome: Outcome
    sim: Simulation


def run(system: System, reqs: list[SimRequest], placement: Placement, rate: float,
        slo: Slo, attainment: float, label: str, workload: str,
        params: dict[str, Any], concurrency: int | None = None) -> Simulated:
    """Simulate `reqs` on `system` as `placement` at `rate` (at most `concurrency` in
    flight); the result a sweep would write."""
    sim = simulate(system, reqs, concurrency)
    rows = [record_row(r, sim.start) for r in sim.records]
    result = RunResult.of(
        summarize(sim.records, sim.duration, slo, PERCENTILES), rows,
        topology=placement.name, kind=placement.kind, request_rate=rate,
        num_prompts=len(reqs), workload=workload, workload_params=params,
        # when each was sent: a closed loop sends later than its draw's arrival
        arrival_offsets=[r.scheduled - sim.start for r in sim.records], simulated=label)
    return Simulated(result, outcome_of(result, rate, attainment, slo), sim)


def kv_evidence(sims: list[Simulation], bytes_per_token: int,
                link: str) -> KVTransferEvidence | None:
    """The predicted transfers of a disaggregated placement's runs, with the guide's verdict
    (held to the fast links' floor unless the link is TCP)."""
    times = [t for s in sims for t in s.transfers_s]
    if not times:
        return None
    edges = sorted({0.001 * 2 ** k for k in range(16)})
    totals = TransferTotals(len(times), sum(times), sum(s.transfer_bytes for s in sims),
                            {le: float(np.sum(np.array(times) <= le)) for le in edges},
                            "simulated")
    v = verdict(totals, "tcp" if link.startswith("tcp") else "fast")
    return KVTransferEvidence(mean_ms=v["mean_ms"], p90_ms=v["p90_ms"], gbps=v["gbps"],
                              transfers=float(len(times)), bytes_per_token=bytes_per_token,
                              connector="simulated", link=v["link"], verdict=v["verdict"],
                              p2p=link)


@dataclasses.dataclass(frozen=True)
class Planned:
    """What `advisor plan` wrote and what it recommends."""

    run_dir: RunDir
    recommendation: Recommendation

    def to_json(self) -> dict[str, Any]:
        """The recommendation as written, and where (`--json`)."""
        return {**self.recommendation.to_json(), "run_dir": str(self.run_dir)}


def decide(run_dir: RunDir, opts: PlanOptions, shown: list[Placement], every: list[Placement],
           done: dict[str, list[Outcome]], grid: list[float], calibration: Calibration,
           prompt: float, kv: KVTransferEvidence | None, label: str, model: str, tp: int = 1,
           ranking: list[PlacementRank] | None = None,
           compare: list[dict[str, Any]] | None = None, p2p: P2PEvidence | None = None,
           pareto: list[ParetoPoint] | None = None,
           gpus: dict[str, int] | None = None, notes: tuple[str, ...] = ()) -> Planned:
    """Evidence (collocated vs disaggregated in `shown`, each holding its `gpus`),
    recommendation with the deploy commands (and a plan's `ranking` and `pareto`, or a
    replay's `compare`), summary.csv and (with `opts.report`) the report, written to
    `run_dir`; `notes` said after the reasons."""
    # imported here: pandas takes ~0.5 s, and a bad flag must answer before that
    from advisor.goodput.from_runs import build_evidence

    ev = build_evidence(opts, shown, done, grid, run_dir, calibration, prompt, gpus=gpus)
    front = FrontendEvidence(placement=shown[0].name,
                             undecided="simulated: the front end's CPU is not modelled")
    ev = dataclasses.replace(ev, kv_transfer=kv, frontend=front, simulated=label, p2p=p2p)
    said = pareto_reason(pareto) if pareto is not None else None
    rec = conclude(run_dir, ev, every, done, model, Where(tp=tp),
                   ((said,) if said else ()) + notes,
                   ranking=ranking, compare=compare, pareto=pareto)
    if opts.report:
        from advisor.output.report import run_report  # matplotlib: ~1 s to import

        run_report(str(run_dir))
    return Planned(run_dir, rec)
