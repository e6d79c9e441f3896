"""`advisor sweep`: calibrate the engine, size the workload, then measure both placements
under it with a rate search, and decide; one resumable run directory
(advisor.rundata.rundir) holds everything."""

from __future__ import annotations

import contextlib
import dataclasses
from functools import partial

from advisor.conclude import conclude
from advisor.engines.engine import Engine
from advisor.engines.placement import Placement
from advisor.goodput.from_runs import build_evidence
from advisor.goodput.p2p_evidence import p2p_evidence
from advisor.measure.ready import served_context, served_model
from advisor.measure.records import CHAT, COMPLETIONS, Endpoint
from advisor.output import console
from advisor.output.progress import Bars, progress_bars
from advisor.probe import p2p_pairs
from advisor.probe.wakeup import host_wakeup
from advisor.rundata.result import RunResult
from advisor.rundata.rundir import RunDir
from advisor.sweep import sizing
from advisor.sweep.budget import TimeBudget
from advisor.sweep.calibrate import calibrate as calibrate_engine
from advisor.sweep.calibrate import warm_up
from advisor.sweep.kept_placements import KeptPlacements
from advisor.sweep.options import (
    SweepOptions,
    collocated_instances,
    first_pass_run_s,
)
from advisor.sweep.rate_run import run_rate
from advisor.sweep.setup import SweepSetup, setup
from advisor.sweep.state import SweepState
from advisor.sweep.steps import Steps, Urls
from engine.api import load_model_config
from workloads.presets import seed_for

REQUEST_TIMEOUT_S = 180.0
URL_CONTEXT = 32768  # for sizing calibration prompts, where a front lists no context


def run_sweep(opts: SweepOptions, resume: RunDir | None = None,
              argv: list[str] | None = None, report: bool = True) -> RunDir:
    """Measure every placement, decide, and write the run dir; with `resume` (and the
    options `setup.resolved` took back), go on in that interrupted sweep's directory; with
    `report`, draw its HTML and Markdown reports too."""
    s = setup(opts, resume, argv)
    print(f"run directory: {s.run_dir} (resume an interrupted sweep with --resume "
          f"{s.run_dir})", flush=True)
    state = SweepState.start(s.opts, s.manifest.calibration, s.manifest.sizing)
    with progress_bars() as bars, contextlib.ExitStack() as kept:
        sweep = Sweep(state, s.run_dir, TimeBudget(s.opts.budget_s()), KeptPlacements(kept),
                      bars, s.engine, calibrates=s.manifest.format >= 2,
                      widen_slo=bool(s.manifest.widen_slo))
        if sweep.state.missed:
            _say_missed(sweep.state)
        sweep.measure_all(s.placements)
    _decide(sweep.state, s, sweep.budget.note(), report)
    return s.run_dir


def _say_missed(state: SweepState) -> None:
    slo = state.slo
    print("the SLO cannot be met even unloaded: " + "; ".join(
        f"{m} floor {v:.0f} ms > {m}:{slo.ms(m):g}" for m, v in state.missed.items())
        + ": no rate search", flush=True)


def _decide(state: SweepState, s: SweepSetup, stopped: str | None, report: bool) -> None:
    """The evidence, the recommendation with its deploy commands, summary.csv and (with
    `report`) the reports, written; the advice printed."""
    run_dir = s.run_dir
    evidence = build_evidence(state.opts, s.placements, state.done, state.grid or [], run_dir,
                              state.calibration, state.prompt_tokens, stopped)
    ran = s.manifest.dtype_ran or state.opts.dtype
    p2p = p2p_evidence(s.placements, s.manifest.probe, state.opts.model,
                       evidence.workload.mean_prompt_tokens, ran)
    kv = evidence.kv_transfer
    if p2p is not None and kv is not None:
        kv = dataclasses.replace(kv, p2p=p2p_pairs.summary(p2p))
    evidence = dataclasses.replace(evidence, p2p=p2p, kv_transfer=kv)
    rec = conclude(run_dir, evidence, s.placements, state.done, state.opts.model)
    if report:
        from advisor.output.report import run_report  # matplotlib: ~1 s to import

        run_report(str(run_dir))
    console.print_recommendation(rec)
    drawn = "report.html, report.md, " if report else ""
    print(f"run directory: {run_dir}: {drawn}evidence.json, recommendation.json"
          + ("" if report else f" (draw its report with: advisor report {run_dir})"))


class Sweep(Steps):
    """The steps (advisor.sweep.steps) over real deployments, each started by `engine`
    (advisor.engines: the bundled engine, vLLM, or a deployment at a URL)."""

    def __init__(self, state: SweepState, run_dir: RunDir, budget: TimeBudget,
                 kept: KeptPlacements, bars: Bars, engine: Engine, calibrates: bool = True,
                 widen_slo: bool = False) -> None:
        super().__init__(state, run_dir, budget, kept, bars, calibrates)
        self.engine = engine
        self.widen_slo = widen_slo  # the default SLO may be widened to fit this machine
        self.contexts: dict[str, int | None] = {}  # front URL -> its max_model_len
        # a bundled instance's URL -> the key its deployment's instances require
        self.keys: dict[str, str | None] = {}

    def deploy(self, p: Placement, stack: contextlib.ExitStack) -> Urls:
        """(front URL, every instance's /metrics, one instance's URL) of `p`, started (or,
        for a URL with no command, ready)."""
        self.bars.update(self.task, description=f"starting {p.name}")
        up = self.engine.start(p, stack, self.run_dir.path)
        self.gone[p.name] = up.gone
        if up.key is not None:
            self.keys.update(dict.fromkeys(up.instances, up.key))
        if up.started_here:  # first-call costs (NIXL's handshake) paid now
            self._warm_up(up.url)
        return up.url, list(up.metrics), up.one_instance

    def calibrate(self, p: Placement, url: str) -> None:
        """Time the engine unloaded (advisor.sweep.calibrate), size the workload from it
        (advisor.sweep.sizing), record both in the manifest and run with them."""
        self.bars.update(self.task, description=f"calibrating on {p.name}")
        opts = self.state.opts
        context = load_model_config(opts.model).max_position_embeddings \
            if opts.local and opts.model is not None else self._context(url)
        host = host_wakeup(repeats=2) if opts.local else None
        cal = calibrate_engine(self._endpoint(url, False), context, self.bars, host)
        cal = dataclasses.replace(cal, dtype=opts.dtype, placement=p.name)
        scale = opts.scale if opts.scale is not None or opts.local else 1.0
        sized = sizing.size(opts.workload, self.state.slo, cal, context, scale,
                            opts.output_scale, self.widen_slo, instances=collocated_instances(opts),
                            attainment=opts.attainment, run_s=first_pass_run_s(opts),
                            searched=not opts.rates and opts.start_rate is None)
        for note in sized.notes:
            print(f"sizing: {note}", flush=True)
        self.run_dir.update_manifest(calibration=cal, sizing=sized)
        self.state.size(cal, sized)
        if self.state.missed:
            _say_missed(self.state)

    def run(self, url: str, metrics: list[str], p: Placement, rate: float,
            before: RunResult | None = None) -> RunResult:
        """`p` at `rate` (advisor.sweep.rate_run); with `before`, measured again."""
        self.bars.update(self.task, description=f"{p.name} @ {rate:g} req/s"
                         + (" again" if before else ""))
        return run_rate(self.state.opts, self.state.slo, partial(self._endpoint, url), metrics,
                        p, rate, self.bars, before, self._listed_context(url))

    def _listed_context(self, url: str) -> int | None:
        """The context (tokens) the front at `url` lists, asked once (a deployment's
        context stays); None where it lists none."""
        if url not in self.contexts:
            opts = self.state.opts
            self.contexts[url] = served_context(url, opts.model, opts.api_key)
        return self.contexts[url]

    def _context(self, url: str) -> int:
        """The listed context, else URL_CONTEXT (to size calibration prompts by)."""
        return self._listed_context(url) or URL_CONTEXT

    def _endpoint(self, url: str, chat: bool) -> Endpoint:
        """Where requests go; the model as given for a deployment (nothing is asked), else
        the first the server lists (the bundled engine's served name)."""
        opts = self.state.opts
        key = self.keys.get(url, opts.api_key)  # an instance of ours: its deployment's key
        model = served_model(url, None if opts.bundled else opts.model, key)
        return Endpoint(url, model, path=CHAT if chat else COMPLETIONS, ignore_eos=True,
                        timeout_s=REQUEST_TIMEOUT_S, api_key=key)

    def _warm_up(self, url: str) -> None:
        """Two requests one at a time (first-call costs), with prompts no measured run uses:
        the sized workload's, or, before it sizes anything, the calibration's own short ones
        (the preset's unscaled lengths would cost tens of seconds on a CPU, for nothing)."""
        opts = self.state.opts
        w = None if self.state.calibration is None and self.calibrates else opts.workload_at(
            1000.0, seed_for(opts.seed, 0.0) + 1, 2)
        warm_up(self._endpoint(url, w is not None and w.chat), w, self.bars)

