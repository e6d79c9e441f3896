"""`advisor sweep`: both placements under the same workload, a rate search, the evidence
and the recommendation, in one resumable run directory (advisor.rundata.rundir)."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field

from advisor import console
from advisor.decide.table import recommend
from advisor.errors import UsageError
from advisor.measure.client import CHAT, COMPLETIONS, Endpoint
from advisor.measure.prom import parse_frontend, scrape_text
from advisor.measure.run import discover_model, measure, progress_bars, record_row
from advisor.measure.stats import parse_percentiles, parse_slos, summarize
from advisor.report import run_report
from advisor.rundata.files import RunDataError
from advisor.rundata.result import RunResult
from advisor.rundata.rundir import MANIFEST, RunDir
from advisor.sweep.evidence import build_evidence, sweep_manifest, write_summary
from advisor.sweep.placements import Placement, parse_topologies
from advisor.sweep.rate_search import Outcome, SearchPlan, grid_of, next_rate
from engine.core.config import DTYPES
from engine.kv import connectors
from engine.kv.links import parse_emulation
from engine.model.dtype import DtypeChoice
from engine.model.dtype import resolve as resolve_dtype
from engine.serve.launch import launch
from workloads.presets import PRESETS, preset

REQUEST_TIMEOUT_S = 180.0
# NOTE: on a GPU, a 7B model decodes 256 tokens in ~8x the time it prefills 8k (the guide's
# L40S run: TTFT 0.7 s, ITL 22 ms). A CPU prefills relatively much faster than it decodes
# (`small`: 0.67 ms per prompt token, 20 ms per output token), so shrinking both lengths
# alike would leave almost no decode for prefills to stall. Prompts shrink 20x (8k -> ~410
# tokens) and outputs 4x (256 -> 64), which keeps decode at several times prefill time.
CPU_SCALE, CPU_OUTPUT_SCALE = 0.05, 0.25
COLLAPSE = 2.0  # p99 ITL at twice its SLO has "fallen apart": the grid stops growing there
# (as has a run where more than half the requests failed)


@dataclass(frozen=True)
class SweepOptions:
    workload: str = "long-prompt"
    scale: float | None = None  # None: CPU_SCALE on a CPU, 1 on GPUs
    output_scale: float | None = None  # None: CPU_OUTPUT_SCALE on a CPU, else scale
    model: str = "small"
    dtype: str = "auto"  # resolved once per sweep (engine.model.dtype); the manifest says why
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
    # NOTE: a secret: never written to the manifest (resume takes it from the flag again)
    api_key: str | None = field(default=None, repr=False)

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
        """Raise UsageError naming the bad flag; return the placements to measure."""
        if self.workload not in PRESETS:
            raise UsageError(
                f"--workload {self.workload!r} is unknown; one of {', '.join(PRESETS)}"
            )
        if not 0 < self.attainment <= 1:
            raise UsageError(f"--attainment must be in (0, 1], not {self.attainment}")
        if any(r <= 0 for r in self.rates):
            raise UsageError("--rates must all be > 0")
        if self.start_rate <= 0 or self.max_steps < 1 or self.bisect_steps < 0:
            raise UsageError("--start-rate must be > 0, --max-steps >= 1, --bisect-steps >= 0")
        if self.num_prompts is not None and self.num_prompts < 1:
            raise UsageError("--num-prompts must be >= 1")
        if self.connector not in connectors.NAMES:
            raise UsageError(
                f"--connector must be one of {', '.join(connectors.NAMES)}, not {self.connector!r}"
            )
        if self.link_emulation:
            try:
                parse_emulation(self.link_emulation)
            except ValueError as e:
                raise UsageError(f"--link-emulation: {e}") from None
        slos = parse_slos(list(self.slo))
        if "ttft" not in slos or "itl" not in slos:
            raise UsageError("--slo needs ttft:MS and itl:MS (the decision table uses both)")
        parse_percentiles(self.percentiles)
        return parse_topologies(self)


def run_sweep(
    opts: SweepOptions, resume: str | None = None, argv: list[str] | None = None
) -> RunDir:
    """Measure every placement (resuming `resume` if given), decide, and write the run dir."""
    if resume:
        run_dir = RunDir.existing(resume)
        opts = dataclasses.replace(_resumed_options(run_dir), api_key=opts.api_key)
        ran = (run_dir.read_manifest().get("dtype") or {}).get("ran", opts.dtype)
        choice = DtypeChoice(ran, "as the interrupted sweep ran", {})
    else:
        if opts.dtype not in DTYPES:
            raise UsageError(f"--dtype must be one of {', '.join(DTYPES)}, not {opts.dtype!r}")
        choice = resolve_dtype(opts.dtype, opts.device)
    asked, opts = opts, dataclasses.replace(opts, dtype=choice.dtype)  # what the engines run
    placements = opts.validate()
    if not resume:
        run_dir = RunDir.create(opts.out or "results", opts.workload)
        run_dir.write_manifest(sweep_manifest(asked, argv, choice))
        print(f"dtype: {choice.dtype} ({choice.reason})", flush=True)
    print(
        f"run directory: {run_dir} (resume an interrupted sweep with --resume {run_dir})",
        flush=True,
    )
    slos, pcts = parse_slos(list(opts.slo)), parse_percentiles(opts.percentiles)
    plan = SearchPlan(
        opts.start_rate if not opts.rates else opts.rates[0], opts.max_steps, opts.bisect_steps
    )
    grid = list(opts.rates) or None
    done: dict[str, list[Outcome]] = {}
    kv_metrics: dict | None = None
    with progress_bars() as bars:
        sweep_task = bars.add_task("sweep", total=None)
        for p in placements:
            outcomes, metrics = _measure_placement(
                p, opts, plan, grid, slos, pcts, run_dir, bars, sweep_task
            )
            done[p.name] = outcomes
            if grid is None:
                grid = grid_of(outcomes, plan)
            kv_metrics = metrics or kv_metrics
    evidence = build_evidence(opts, placements, done, grid, run_dir, slos, kv_metrics)
    run_dir.write_evidence(evidence)
    rec = recommend(evidence)
    run_dir.write_recommendation(rec)
    write_summary(run_dir, placements, done)
    run_report(str(run_dir))
    console.print_recommendation(rec)
    print(f"run directory: {run_dir}: report.html, report.md, evidence.json, recommendation.json")
    return run_dir


def _measure_placement(
    p: Placement,
    opts: SweepOptions,
    plan: SearchPlan,
    grid,
    slos,
    pcts,
    run_dir: RunDir,
    bars,
    sweep_task,
) -> tuple[list[Outcome], dict | None]:
    """Run the rate search for one placement; a deployment starts only if a run is missing."""
    outcomes: list[Outcome] = []
    metrics_text = None
    with contextlib.ExitStack() as stack:
        url = p.url
        # where front-end CPU is read: every instance we started, else what the URL offers
        metric_urls = [url.rstrip("/") + "/metrics"] if url else []
        while (rate := next_rate(outcomes, plan, grid, fixed=bool(opts.rates))) is not None:
            if not run_dir.has_run(p.name, rate):
                if url is None:
                    bars.update(sweep_task, description=f"starting {p.name}")
                    dep = stack.enter_context(launch(p.topology))
                    url = dep.url
                    metric_urls = [u + "/metrics" for us in dep.instance_urls.values() for u in us]
                    _warm_up(url, opts, bars)
                run_dir.write_run(
                    _run_one(url, metric_urls, p, rate, opts, slos, pcts, bars, sweep_task)
                )
            result = run_dir.read_run(p.name, rate)
            meets = result.get("slo_attainment") >= opts.attainment
            itl = slos.get("itl")
            # fallen apart: p99 ITL far past its SLO, or most requests failing outright
            collapsed = (
                itl is not None and (result.get("p99_itl_ms") or 0) > COLLAPSE * itl
            ) or result.get("failed") > result.described.num_prompts / 2
            outcomes.append(Outcome(rate, meets, collapsed))
            bars.advance(sweep_task)
        if p.kind == "disagg" and url is not None:
            metrics_text = _scrape([url.rstrip("/") + "/metrics"])
    return outcomes, ({"text": metrics_text, "placement": p.name} if metrics_text else None)


def _run_one(
    url: str,
    metric_urls: list[str],
    p: Placement,
    rate: float,
    opts: SweepOptions,
    slos,
    pcts,
    bars,
    sweep_task,
) -> RunResult:
    bars.update(sweep_task, description=f"{p.name} @ {rate:g} req/s")
    workload = opts.workload_at(rate, seed_for(opts.seed, rate), prompts_for(opts, rate))
    before = _frontend_cpu(metric_urls)
    run = measure(
        _endpoint(url, workload, opts.api_key),
        workload,
        label=f"{p.name} @ {rate:g} req/s",
        bars=bars,
    )
    after = _frontend_cpu(metric_urls)
    return RunResult.of(
        summarize(run.records, run.duration, slos, pcts),
        [record_row(r, run.start) for r in run.records],
        # the front end's CPU during this run, summed over instances (None: not reported)
        frontend_cpu=dataclasses.asdict(after.minus(before)) if before and after else None,
        topology=p.name,
        kind=p.kind,
        request_rate=rate,
        num_prompts=workload.num_requests,
        workload=workload.name,
        workload_params=workload.params,
        emulated=p.emulated,
        arrival_offsets=[c.start for c in workload.conversations],
        multi_turn=any(len(c.turns) > 1 for c in workload.conversations),
    )


def _warm_up(url: str, opts: SweepOptions, bars) -> None:
    """Two requests one at a time (first-call costs), with prompts no measured run uses."""
    w = opts.workload_at(1000.0, seed_for(opts.seed, 0.0) + 1, 2)
    measure(_endpoint(url, w, opts.api_key), w, max_concurrency=1, label="warmup", bars=bars)


def _endpoint(url: str, workload, api_key: str | None) -> Endpoint:
    return Endpoint(
        url,
        discover_model(url, api_key),
        path=CHAT if workload.chat else COMPLETIONS,
        ignore_eos=True,
        timeout_s=REQUEST_TIMEOUT_S,
        api_key=api_key,
    )


def _scrape(urls: list[str]) -> str | None:
    try:
        return scrape_text(urls, timeout_s=10)
    except OSError:
        return None


def _frontend_cpu(urls: list[str]):
    text = _scrape(urls) if urls else None
    return parse_frontend(text) if text else None


def parse_rates(text: str | None) -> tuple[float, ...]:
    """--rates "0.2,0.4" -> (0.2, 0.4); UsageError when it is not a list of numbers."""
    try:
        return tuple(float(r) for r in text.split(",") if r.strip()) if text else ()
    except ValueError:
        raise UsageError(f"--rates {text!r}: expected comma-separated numbers") from None


def seed_for(seed: int, rate: float) -> int:
    """One seed per rate (same across placements): prompts never repeat across rates, so a
    prefix cache cannot carry work from one rate to the next."""
    return seed * 100_003 + round(rate * 10_000)


def prompts_for(opts: SweepOptions, rate: float) -> int:
    return opts.num_prompts or max(8, min(40, round(rate * opts.window_s)))


def _resumed_options(run_dir: RunDir) -> SweepOptions:
    config = run_dir.read_manifest().get("config")
    if not isinstance(config, dict):
        raise RunDataError(
            f"{run_dir.path / MANIFEST}: missing field 'config' (the options to resume with)"
        )
    fields = {f.name for f in dataclasses.fields(SweepOptions)}
    config = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items() if k in fields}
    return SweepOptions(**config)
