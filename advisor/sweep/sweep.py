"""`advisor sweep`: calibrate the engine, size the workload, then measure both placements
under it with a rate search, and decide; one resumable run directory
(advisor.rundata.rundir) holds everything."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

from advisor.decide import deploy
from advisor.decide.table import recommend
from advisor.errors import UsageError
from advisor.goodput.evidence import build_evidence, write_summary
from advisor.goodput.outcomes import Outcome, outcome_of
from advisor.goodput.placements import Placement
from advisor.measure.failures import refused
from advisor.measure.ready import served_context, served_model
from advisor.measure.records import CHAT, COMPLETIONS, Endpoint
from advisor.measure.run import progress_bars
from advisor.measure.stats import DEFAULT_SLO, parse_percentiles
from advisor.output import console
from advisor.probe.wakeup import host_wakeup
from advisor.rundata.evidence import Calibration
from advisor.rundata.result import RunResult
from advisor.rundata.rundir import MANIFEST, RunDir
from advisor.sweep import sizing
from advisor.sweep.budget import TimeBudget
from advisor.sweep.calibrate import calibrate, warm_up
from advisor.sweep.deployments import OnDemand, metric_urls, started
from advisor.sweep.kept import KeptDeployments
from advisor.sweep.manifest import sweep_manifest
from advisor.sweep.options import (
    FALLBACK_START,
    SweepOptions,
    collocated_instances,
    first_pass_run_s,
    span_s,
)
from advisor.sweep.rate_run import run_rate
from advisor.sweep.rate_search import (
    SearchPlan,
    grid_of,
    next_rate,
    others_of,
    replay_grid,
    to_refine,
    top_up,
    unsettled,
)
from engine import api
from engine.api import DTYPES, DtypeChoice, launch, load_model_config
from workloads.presets import seed_for

REQUEST_TIMEOUT_S = 180.0
URL_CONTEXT = 32768  # for sizing calibration prompts, where a front lists no context


def run_sweep(opts: SweepOptions, resume: RunDir | None = None,
              argv: list[str] | None = None, report: bool = True) -> RunDir:
    """Measure every placement, decide, and write the run dir; with `resume` (and the
    options from `options.resumed`), go on in that interrupted sweep's directory; with
    `report`, draw its HTML and Markdown reports too."""
    run_dir, opts = (resume, opts) if resume else _created(opts, argv)
    print(f"run directory: {run_dir} (resume an interrupted sweep with --resume {run_dir})",
          flush=True)
    placements = opts.validate()
    with progress_bars() as bars, contextlib.ExitStack() as kept:
        sweep = _Sweep(opts, run_dir, bars, KeptDeployments(kept))
        # NOTE: a second pass only where the first left intervals that overlap: the lowest
        # rates and bisections are the slowest to measure and, there, decide nothing. The
        # last placement goes on while it is still deployed when it is the one to refine.
        refined: set[str] = set()
        for p in placements:
            last = p is placements[-1]
            if sweep.measure(p, refine=last and (lambda n=p.name: to_refine(
                    sweep.done, set(), deployed=n) == n)):
                refined.add(p.name)
        while not sweep.budget.spent and (name := to_refine(sweep.done, refined)) is not None:
            refined.add(name)
            sweep.measure(next(p for p in placements if p.name == name), refine=True)
    evidence = build_evidence(sweep.opts, placements, sweep.done, sweep.grid or [], run_dir,
                              sweep.calibration, sweep.prompt_tokens, sweep.budget.note())
    run_dir.write_evidence(evidence)
    rec = recommend(evidence)
    rec = dataclasses.replace(rec, deploy=deploy.from_evidence(rec, evidence, sweep.opts.model))
    run_dir.write_recommendation(rec)
    write_summary(run_dir, placements, sweep.done)
    if report:
        from advisor.output.report import run_report  # NOTE: matplotlib: ~1 s to import

        run_report(str(run_dir))
    console.print_recommendation(rec)
    drawn = "report.html, report.md, " if report else ""
    print(f"run directory: {run_dir}: {drawn}evidence.json, recommendation.json"
          + ("" if report else f" (draw its report with: advisor report {run_dir})"))
    return run_dir


def _created(opts: SweepOptions, argv: list[str] | None) -> tuple[RunDir, SweepOptions]:
    """A new run directory with its manifest; the options with dtype, model and SLO filled."""
    if opts.dtype not in DTYPES:
        raise UsageError(f"--dtype must be one of {', '.join(DTYPES)}, not {opts.dtype!r}")
    # NOTE: only a default SLO on the default model may be widened to fit this machine
    widen = not opts.slo and opts.model is None and opts.bundled
    filled = dataclasses.replace(opts, model=opts.model_to_run(),
                                 slo=opts.slo or DEFAULT_SLO)
    filled.validate()
    choice = api.resolve_dtype(opts.dtype, opts.device) if opts.bundled else DtypeChoice(
        opts.dtype, "set by the deployment", {})
    run_dir = RunDir.create(opts.out, opts.workload)
    extra = {"config_file": Path(opts.config).read_text()} if opts.config else {}
    run_dir.write_manifest({**sweep_manifest(filled, argv, choice), "widen_slo": widen, **extra})
    print(f"dtype: {choice.dtype} ({choice.reason})", flush=True)
    return run_dir, dataclasses.replace(filled, dtype=choice.dtype)


class _Sweep:
    """The measuring: calibration and sizing once, then each placement's rate search."""

    def __init__(self, opts: SweepOptions, run_dir: RunDir, bars, kept: KeptDeployments):
        self.run_dir, self.bars, self.kept = run_dir, bars, kept
        self.task = bars.add_task("sweep", total=None)
        manifest = run_dir.read_manifest()
        self.widen_slo = bool(manifest.get("widen_slo"))
        # NOTE: a run directory from before calibration (format 1) is resumed without one
        self.calibrates = manifest.get("format", 1) >= 2
        self.calibration = self.missed = self.prompt_tokens = None
        self.opts = opts
        self.plan = self._plan(opts.start_rate or FALLBACK_START)
        if manifest.get("calibration"):
            self.calibration = Calibration.from_json(manifest["calibration"],
                                                     str(run_dir.path / MANIFEST))
            self._use(manifest["sizing"])
        self.pcts = parse_percentiles(opts.percentiles)
        self.grid: list[float] | None = list(opts.rates) or None  # the leading one's rates
        self.replay: list[float] | None = self.grid  # what the others measure first
        self.leader: str | None = None  # the placement that builds the grid
        self.done: dict[str, list[Outcome]] = {}
        self.budget = TimeBudget(opts.budget_s())
        self.contexts: dict[str, int | None] = {}  # front URL -> its max_model_len
        # placement -> why its deployment is gone (a command that exited), else None
        self.gone: dict[str, Callable[[], str | None]] = {}

    def _plan(self, start: float) -> SearchPlan:
        opts = self.opts
        return SearchPlan(opts.rates[0] if opts.rates else start, opts.max_steps,
                          opts.bisect_steps)

    def _use(self, sized: dict) -> None:
        """Run with a sizing's lengths, SLO and first rate (unless --start-rate was given);
        note which SLO metrics its floor misses."""
        self.opts = dataclasses.replace(self.opts, scale=sized["scale"],
                                        output_scale=sized["output_scale"], slo=tuple(sized["slo"]))
        self.plan = self._plan(self.opts.start_rate or sized.get("start_rate") or FALLBACK_START)
        self.prompt_tokens = sized["prompt_tokens"]
        floors = self.calibration.floors(self.prompt_tokens)
        self.missed = {m: v for m, v in floors.items() if v > self.opts.slos[m]}
        if self.missed:
            print("the SLO cannot be met even unloaded: " + "; ".join(
                f"{m} floor {v:.0f} ms > {m}:{self.opts.slos[m]:g}" for m, v in self.missed.items())
                + ": no rate search", flush=True)

    def measure(self, p: Placement, refine: bool | Callable[[], bool] = False) -> bool:
        """Calibrate on the first deployment, then run `p`'s rate search: its first pass,
        then its second (advisor.sweep.rate_search) when `refine` is true or, called after
        the first, returns true; whether it ran the second. A deployment starts only when a
        run of it is missing."""
        outcomes: list[Outcome] = []
        self.done[p.name] = outcomes
        lead = not self.opts.rates and self.leader in (None, p.name)
        self.leader = p.name if lead else self.leader
        with contextlib.ExitStack() as own:
            # NOTE: the bundled engine's placements stay up for a second pass (advisor.sweep.
            # kept); one at a URL stops before the next starts (they may share GPUs)
            at = self.kept.get(p.name, lambda kept: self.budget.timed(
                lambda: self._deploy(p, kept))) if p.url is None else OnDemand(
                lambda: self.budget.timed(lambda: self._deploy(p, own)))
            if self.calibration is None and self.calibrates:
                self._calibrate(p, at.start())
            if self.missed:
                return False
            second = self._passes(p, outcomes, at, lead, refine)
            self._at_operating_rate(p, outcomes, at)
        return second

    def _passes(self, p: Placement, outcomes: list[Outcome], at: OnDemand, lead: bool,
                refine: bool | Callable[[], bool]) -> bool:
        """`p`'s rate search at `at` into `outcomes`: its first pass, then its second where
        `refine` says; whether it ran the second (`measure`)."""
        grid = None if lead else self.replay
        # NOTE: the first pass is replayed (from the run directory) before the second
        for second in (False, True):
            if second and not (refine() if callable(refine) else refine):
                return False
            # NOTE: the second pass measures again the rates within noise that hold the
            # interval open before each rate it searches, not only before the first: a step
            # down or a bisection may find the new bound (disaggregated missed at every
            # replayed rate, then met at the step down for 0.97 of 33 requests, interval
            # [0.89, 1], and its interval stayed [0, 5.92], within noise of collocated's)
            while (not second or self._settle(p, outcomes, at)) \
                    and (rate := next_rate(outcomes, self.plan, grid, bool(self.opts.rates),
                                           refine=second)) is not None:
                if not self.run_dir.has_run(p.name, rate):
                    if second and not self._fits(rate, at):
                        break
                    self._write_run(p, rate, self._timed_run(at, p, rate))
                outcomes.append(self._outcome(p, rate))
                self.bars.advance(self.task)
            if lead and self.grid is None:
                self.grid = grid_of(outcomes, self.plan)
                self.replay = replay_grid(outcomes, self.plan)
        return True

    def _at_operating_rate(self, p: Placement, outcomes: list[Outcome], at: OnDemand) -> None:
        """`p` measured at the user's --operating-rate where its search did not reach it:
        the rows are judged there, never at a rate beside it. Outside the time budget (asked
        for by name) and after the search, so the search's steps are its own."""
        rate = self.opts.operating_rate
        if rate is None or any(math.isclose(o.rate, rate) for o in outcomes):
            return
        if not self.run_dir.has_run(p.name, rate):
            self._write_run(p, rate, self._timed_run(at, p, rate))
        outcomes.append(self._outcome(p, rate))
        self.bars.advance(self.task)

    def _settle(self, p: Placement, outcomes: list[Outcome], at: OnDemand) -> bool:
        """Measure again the rates within noise that hold `p`'s interval open
        (`rate_search.top_up`) while it overlaps another's and the time budget allows;
        whether it still overlaps and there is time."""
        # NOTE: --rates is a fixed grid: no search, so nothing is measured again
        others = others_of(self.done, p.name)
        while not self.opts.rates and p.name in unsettled(self.done) and (
                rate := top_up(outcomes, others)) is not None and self._fits(rate, at):
            before = self.run_dir.read_run(p.name, rate, records=True)
            self._write_run(p, rate, self._timed_run(at, p, rate, before))
            outcomes[[o.rate for o in outcomes].index(rate)] = self._outcome(p, rate)
            self.bars.advance(self.task)
        return p.name in unsettled(self.done) and not self.budget.spent

    def _write_run(self, p: Placement, rate: float, run: RunResult) -> None:
        """Store `run`; UsageError where `p`'s deployment is gone (its command exited), or
        where it refused every one of its requests: no rate takes a request the deployment
        will not (a prompt past its context, a model it does not serve), and searching on
        would spend minutes measuring refusals."""
        self.run_dir.write_run(run)
        if (why := self.gone.get(p.name, lambda: None)()) is not None:
            # NOTE: the run is kept: its requests failed when the deployment went down,
            # which is what this rate did to it (or what killed it)
            raise UsageError(f"{why}; the run at {rate:g} req/s is kept, failures and all: "
                             f"--resume {self.run_dir.path} measures the rest")
        if (why := refused(run.records or [])) is not None:
            raise UsageError(
                f"{p.name} refused all {len(run.records)} requests at {rate:g} req/s ({why}): "
                "the requests this sweep sends do not fit that deployment; change them "
                "(--scale, --output-scale, --workload, --model) or the deployment. Its "
                f"records: {self.run_dir.run_path(p.name, rate)}")

    def _fits(self, rate: float, at: OnDemand) -> bool:
        """Whether a run at `rate` (and a start, where `at` is not running) ends within
        the time budget."""
        return self.budget.fits(span_s(self.opts, rate), at.live)

    def _timed_run(self, at: OnDemand, p: Placement, rate: float,
                   before: RunResult | None = None) -> RunResult:
        """`_run_one` where `at` runs (started now if it is not), timed for the budget."""
        return self.budget.timed(lambda: self._run_one(*at.urls(), p, rate, before),
                                 span_s(self.opts, rate))

    def _outcome(self, p: Placement, rate: float) -> Outcome:
        return outcome_of(self.run_dir.read_run(p.name, rate), rate, self.opts.attainment,
                          self.opts.slos["itl"])

    def _deploy(self, p: Placement, stack) -> tuple[str, list[str], str]:
        """(front URL, every instance's /metrics, one instance's URL) of `p`, started (or,
        for a URL with no command, ready)."""
        self.bars.update(self.task, description=f"starting {p.name}")
        if p.url is not None:
            self.gone[p.name] = stack.enter_context(started(
                p, self.run_dir.path, self.opts.model, self.opts.api_key,
                self.opts.ready_timeout))
            return p.url, metric_urls(p), p.url
        dep = stack.enter_context(launch(p.topology))
        instances = [u for us in dep.instance_urls.values() for u in us]
        self._warm_up(dep.url)
        return dep.url, [u + "/metrics" for u in instances], (dep.instance_urls.get("both")
                                                                or [dep.url])[0]

    def _calibrate(self, p: Placement, url: str) -> None:
        self.bars.update(self.task, description=f"calibrating on {p.name}")
        opts = self.opts
        context = load_model_config(opts.model).max_position_embeddings if opts.bundled \
            else self._context(url)
        host = host_wakeup(repeats=2) if opts.bundled else None
        cal = calibrate(self._endpoint(url, False), context, self.bars, host)
        self.calibration = dataclasses.replace(cal, dtype=opts.dtype, placement=p.name)
        scale = opts.scale if opts.scale is not None or opts.bundled else 1.0
        sized = sizing.size(opts.workload, opts.slos, self.calibration, context, scale,
                            opts.output_scale, self.widen_slo, instances=collocated_instances(opts),
                            attainment=opts.attainment, run_s=first_pass_run_s(opts),
                            searched=not opts.rates and opts.start_rate is None)
        for note in sized.notes:
            print(f"sizing: {note}", flush=True)
        record = dataclasses.asdict(sized)
        self.run_dir.update_manifest(calibration=self.calibration.to_json(), sizing=record)
        self._use(record)

    def _run_one(self, url: str, metric_urls: list[str], p: Placement, rate: float,
                 before: RunResult | None = None) -> RunResult:
        """`p` at `rate` (advisor.sweep.rate_run); with `before`, measured again."""
        self.bars.update(self.task, description=f"{p.name} @ {rate:g} req/s"
                         + (" again" if before else ""))
        return run_rate(self.opts, lambda chat: self._endpoint(url, chat), metric_urls, p, rate,
                        self.pcts, self.bars, before, self._context(url, listed=True))

    def _context(self, url: str, listed: bool = False) -> int | None:
        """The context (tokens) the front at `url` lists, asked once (a deployment's
        context stays); where it lists none, None if `listed`, else URL_CONTEXT."""
        if url not in self.contexts:
            self.contexts[url] = served_context(url, self.opts.model, self.opts.api_key)
        return self.contexts[url] or (None if listed else URL_CONTEXT)

    def _endpoint(self, url: str, chat: bool) -> Endpoint:
        """Where requests go; the model as given for a deployment (nothing is asked), else
        the first the server lists (the bundled engine's served name)."""
        opts = self.opts
        model = served_model(url, None if opts.bundled else opts.model, opts.api_key)
        return Endpoint(url, model, path=CHAT if chat else COMPLETIONS, ignore_eos=True,
                        timeout_s=REQUEST_TIMEOUT_S, api_key=opts.api_key)

    def _warm_up(self, url: str) -> None:
        """Two requests one at a time (first-call costs), with prompts no measured run uses:
        the sized workload's, or the calibration's own short ones before it sizes anything.

        NOTE: before sizing, the preset's lengths are unscaled (long-prompt: ~8k tokens in,
        256 out); two of those cost ~35 s of a default sweep on a CPU, for nothing."""
        opts = self.opts
        w = None if self.calibration is None and self.calibrates else opts.workload_at(
            1000.0, seed_for(opts.seed, 0.0) + 1, 2)
        warm_up(self._endpoint(url, w is not None and w.chat), w, self.bars)

