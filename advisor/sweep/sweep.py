"""`advisor sweep`: both placements under the same workload, a rate search, the evidence
and the recommendation, in one resumable run directory.

    RUN_DIR/manifest.json            versions, host, probe, options, command line, seed
    RUN_DIR/runs/<topology>/rate-<r>/result.json, requests.jsonl
    RUN_DIR/summary.csv              one row per topology x rate
    RUN_DIR/evidence.json            what the decision rests on
    RUN_DIR/recommendation.json      the decision
    RUN_DIR/report.html, report.md   all of it, readable, with plots (report-*.png)
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
from dataclasses import dataclass
from pathlib import Path

from advisor import console
from advisor.measure.bench import discover_model, measure, progress_bars, record_row
from advisor.measure.client import CHAT, COMPLETIONS, Endpoint
from advisor.decide.table import recommend
from advisor.measure.stats import parse_percentiles, parse_slos, summarize
from advisor.measure.prom import parse_frontend, scrape_text
from advisor.sweep.rate_search import Outcome, SearchPlan, grid_of, next_rate
from advisor.rundata.files import write_json, write_jsonl
from advisor.report import run_report
from advisor.sweep.evidence import build_evidence, sweep_manifest, write_summary
from advisor.sweep.placements import Placement, parse_topologies
from engine.serve.launch import launch
from engine.kv.links import parse_emulation
from workloads.presets import PRESETS, preset

REQUEST_TIMEOUT_S = 180.0
# NOTE: on a GPU, a 7B model decodes 256 tokens in ~8x the time it prefills 8k (the guide's
# L40S run: TTFT 0.7 s, ITL 22 ms). A CPU prefills relatively much faster than it decodes
# (`small`: 0.67 ms per prompt token, 20 ms per output token), so shrinking both lengths
# alike would leave almost no decode for prefills to stall. Prompts shrink 20x and outputs
# 2.5x, which keeps decode at about 8x prefill time, as on the guide's GPUs.
CPU_SCALE, CPU_OUTPUT_SCALE = 0.05, 0.25
COLLAPSE = 2.0  # p99 ITL at twice its SLO has "fallen apart": the grid stops growing there
# (as has a run where more than half the requests failed)


@dataclass(frozen=True)
class SweepOptions:
    workload: str = "long-prompt"
    scale: float | None = None  # None: 0.05 on a CPU (8k-token prompts -> ~410), 1 on GPUs
    output_scale: float | None = None  # None: 0.4 on a CPU (256 output tokens -> ~102), else scale
    model: str = "small"
    dtype: str = "bfloat16"
    slo: tuple[str, ...] = ("ttft:2000", "itl:50")
    attainment: float = 0.9
    rates: tuple[float, ...] = ()  # a fixed grid instead of the search
    start_rate: float = 0.25
    max_steps: int = 4
    bisect_steps: int = 1
    num_prompts: int | None = None  # None: about `window_s` seconds of requests per rate
    window_s: float = 16.0
    topologies: str = "collocated:2,disagg:1p1d"
    connector: str = "shm"
    link_emulation: str | None = None
    collocated_url: str | None = None
    disagg_url: str | None = None
    out: str | None = None
    seed: int = 0
    device: str = "cpu"
    percentiles: str = "50,90,99"

    @property
    def effective_scale(self) -> float:
        return self.scale if self.scale is not None else (1.0 if self._gpu else CPU_SCALE)

    @property
    def effective_output_scale(self) -> float:
        if self.output_scale is not None:
            return self.output_scale
        return self.effective_scale if self._gpu or self.scale is not None else CPU_OUTPUT_SCALE

    @property
    def _gpu(self) -> bool:
        return self.device.startswith("cuda")

    def workload_at(self, rate: float, seed: int, num_prompts: int):
        return preset(self.workload, seed, scale=self.effective_scale, rate=rate,
                      num_prompts=num_prompts, output_scale=self.effective_output_scale)

    def validate(self) -> list[Placement]:
        """Raise ValueError naming the bad flag; return the placements to measure."""
        if self.workload not in PRESETS:
            raise ValueError(f"--workload {self.workload!r} is unknown; one of {', '.join(PRESETS)}")
        if not 0 < self.attainment <= 1:
            raise ValueError(f"--attainment must be in (0, 1], not {self.attainment}")
        if any(r <= 0 for r in self.rates):
            raise ValueError("--rates must all be > 0")
        if self.start_rate <= 0 or self.max_steps < 1 or self.bisect_steps < 0:
            raise ValueError("--start-rate must be > 0, --max-steps >= 1, --bisect-steps >= 0")
        if self.num_prompts is not None and self.num_prompts < 1:
            raise ValueError("--num-prompts must be >= 1")
        if self.link_emulation:
            parse_emulation(self.link_emulation)
        slos = parse_slos(list(self.slo))
        if "ttft" not in slos or "itl" not in slos:
            raise ValueError("--slo needs ttft:MS and itl:MS (the decision table uses both)")
        parse_percentiles(self.percentiles)
        return parse_topologies(self)


def run_sweep(opts: SweepOptions, resume: str | None = None, argv: list[str] | None = None) -> Path:
    """Measure every placement (resuming `resume` if given), decide, and write the run dir."""
    if resume:
        opts = _resumed_options(Path(resume))
    placements = opts.validate()
    run_dir = Path(resume) if resume else _new_run_dir(opts)
    if not resume:
        write_json(run_dir / "manifest.json", sweep_manifest(opts, argv))
    print(f"run directory: {run_dir} (resume an interrupted sweep with --resume {run_dir})",
          flush=True)
    slos, pcts = parse_slos(list(opts.slo)), parse_percentiles(opts.percentiles)
    plan = SearchPlan(opts.start_rate if not opts.rates else opts.rates[0], opts.max_steps,
                      opts.bisect_steps)
    grid = list(opts.rates) or None
    done: dict[str, list[Outcome]] = {}
    kv_metrics: dict | None = None
    with progress_bars() as bars:
        sweep_task = bars.add_task("sweep", total=None)
        for p in placements:
            outcomes, metrics = _measure_placement(p, opts, plan, grid, slos, pcts, run_dir, bars,
                                                   sweep_task)
            done[p.name] = outcomes
            if grid is None:
                grid = grid_of(outcomes, plan)
            kv_metrics = metrics or kv_metrics
    evidence = build_evidence(opts, placements, done, grid, run_dir, slos, kv_metrics)
    write_json(run_dir / "evidence.json", evidence)
    rec = recommend(evidence)
    write_json(run_dir / "recommendation.json", rec)
    write_summary(run_dir, placements, done)
    run_report(str(run_dir))
    console.print_recommendation(rec)
    print(f"run directory: {run_dir}: report.html, report.md, evidence.json, recommendation.json")
    return run_dir


def _measure_placement(p: Placement, opts: SweepOptions, plan: SearchPlan, grid, slos, pcts,
                       run_dir: Path, bars, sweep_task) -> tuple[list[Outcome], dict | None]:
    """Run the rate search for one placement; a deployment starts only if a run is missing."""
    outcomes: list[Outcome] = []
    metrics_text = None
    with contextlib.ExitStack() as stack:
        url = p.url
        # where front-end CPU is read: every instance we started, else what the URL offers
        metric_urls = [url.rstrip("/") + "/metrics"] if url else []
        while (rate := next_rate(outcomes, plan, grid, fixed=bool(opts.rates))) is not None:
            path = run_dir / "runs" / p.name / f"rate-{rate:g}"
            if not (path / "result.json").is_file():
                if url is None:
                    bars.update(sweep_task, description=f"starting {p.name}")
                    dep = stack.enter_context(launch(p.topology))
                    url = dep.url
                    metric_urls = [u + "/metrics" for us in dep.instance_urls.values() for u in us]
                    _warm_up(url, opts, bars)
                _run_one(url, metric_urls, p, rate, opts, slos, pcts, path, bars, sweep_task)
            result = json.loads((path / "result.json").read_text())
            meets = result["slo_attainment"] >= opts.attainment
            itl = slos.get("itl")
            # fallen apart: p99 ITL far past its SLO, or most requests failing outright
            collapsed = (itl is not None and (result.get("p99_itl_ms") or 0) > COLLAPSE * itl) \
                or result["failed"] > result["num_prompts"] / 2
            outcomes.append(Outcome(rate, meets, collapsed))
            bars.advance(sweep_task)
        if p.kind == "disagg" and url is not None:
            metrics_text = _scrape([url.rstrip("/") + "/metrics"])
    return outcomes, ({"text": metrics_text, "placement": p.name} if metrics_text else None)


def _run_one(url: str, metric_urls: list[str], p: Placement, rate: float, opts: SweepOptions,
             slos, pcts, path: Path, bars, sweep_task) -> None:
    bars.update(sweep_task, description=f"{p.name} @ {rate:g} req/s")
    workload = opts.workload_at(rate, seed_for(opts.seed, rate), prompts_for(opts, rate))
    before = _frontend_cpu(metric_urls)
    run = measure(_endpoint(url, workload), workload, label=f"{p.name} @ {rate:g} req/s", bars=bars)
    after = _frontend_cpu(metric_urls)
    result = summarize(run.records, run.duration, slos, pcts)
    # the front end's CPU during this run, summed over instances (None: not reported)
    result["frontend_cpu"] = dataclasses.asdict(after.minus(before)) if before and after else None
    result.update(topology=p.name, kind=p.kind, request_rate=rate, num_prompts=workload.num_requests,
                  workload=workload.name, workload_params=workload.params, emulated=p.emulated,
                  arrival_offsets=[c.start for c in workload.conversations],
                  multi_turn=any(len(c.turns) > 1 for c in workload.conversations))
    write_jsonl(path / "requests.jsonl", [record_row(r, run.start) for r in run.records])
    write_json(path / "result.json", result)  # last: its presence marks the run complete


def _warm_up(url: str, opts: SweepOptions, bars) -> None:
    """Two requests one at a time (first-call costs), with prompts no measured run uses."""
    w = opts.workload_at(1000.0, seed_for(opts.seed, 0.0) + 1, 2)
    measure(_endpoint(url, w), w, max_concurrency=1, label="warmup", bars=bars)


def _endpoint(url: str, workload) -> Endpoint:
    return Endpoint(url, discover_model(url), path=CHAT if workload.chat else COMPLETIONS,
                    ignore_eos=True, timeout_s=REQUEST_TIMEOUT_S)


def _scrape(urls: list[str]) -> str | None:
    try:
        return scrape_text(urls, timeout_s=10)
    except OSError:
        return None


def _frontend_cpu(urls: list[str]):
    text = _scrape(urls) if urls else None
    return parse_frontend(text) if text else None


def seed_for(seed: int, rate: float) -> int:
    """One seed per rate (same across placements): prompts never repeat across rates, so a
    prefix cache cannot carry work from one rate to the next."""
    return seed * 100_003 + round(rate * 10_000)


def prompts_for(opts: SweepOptions, rate: float) -> int:
    return opts.num_prompts or max(8, min(40, round(rate * opts.window_s)))


def _new_run_dir(opts: SweepOptions) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(opts.out or "results") / f"{stamp}-{opts.workload}"


def _resumed_options(run_dir: Path) -> SweepOptions:
    try:
        config = json.loads((run_dir / "manifest.json").read_text())["config"]
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"--resume {run_dir}: no readable manifest.json ({e})") from None
    fields = {f.name for f in dataclasses.fields(SweepOptions)}
    config = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items() if k in fields}
    return SweepOptions(**config)
