"""`advisor sweep`'s options, checked, and what follows from them alone: the workload at a
rate, the seed and the number of requests per rate, how long a run lasts, and how many
engines the collocated placement has."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from advisor.engines.engine import Engine
from advisor.engines.given import GivenDeployment, GivenEngine
from advisor.engines.start import EngineHere, check_here, engine_here
from advisor.engines.topologies import TopologySpec, parse_topologies
from advisor.errors import UsageError
from advisor.flag_groups import (
    DEFAULT_MODELS,
    EngineKind,
    device_option,
    dtype_option,
    engine_option,
    model_option,
    slo_option,
)
from advisor.flags import option
from advisor.measure.stats import check_judged, parse_percentiles, parse_rates
from advisor.measure.urls import check_url
from advisor.rundata.bounds import MAX_CONCURRENCY
from advisor.rundata.slo import DEFAULT_SLO, Slo
from engine.api import CONNECTORS, DTYPES, parse_emulation
from workloads.presets import CHAT_FRONTEND, MULTI_TURN, PRESETS, preset, preset_spec
from workloads.spec import Workload

DEFAULT_TOPOLOGIES = "collocated:2,disagg:1p1d"
# a multi-turn preset also measures P/D with bidirectional transfer (the decision row needs it)
MULTI_TURN_TOPOLOGIES = "collocated:2,disagg:1p1d,disagg-bidi:1p1d"
# a chat preset whose front end does real work also measures the render tier split off
RENDER_SPLIT_TOPOLOGIES = "collocated:2,disagg:1p1d,render-split:2"
MIN_REQUESTS, MAX_REQUESTS = 30, 100  # per rate, by default: p99 ITL and attainment need 30
MAX_REQUESTS_GIVEN = 100_000  # per rate, by --num-prompts
FALLBACK_START = 0.25  # req/s: the first rate when nothing was calibrated
# seconds a default bundled sweep may measure before its second pass starts no more runs:
# five minutes, less the start-up, the evidence and the report; the first pass always runs
# whole (its first rate is sized to fit, advisor.sweep.sizing)
DEFAULT_BUDGET_S = 280.0


@dataclass(frozen=True)
class SweepOptions:
    """`advisor sweep`'s options, each with its flag (advisor.flags)."""

    workload: str = option("long-prompt", f"workload preset: {', '.join(PRESETS)}")
    engine: EngineKind = engine_option(
        "bundled", "the engine the sweep starts: bundled (this project's) or vllm (vLLM itself, "
                   f"from PATH or .tools/vllm; default model {DEFAULT_MODELS['vllm']})")
    toy_proxy: str | None = option(None, "--engine vllm: front the disagg placement with vLLM's "
                                         "toy proxy (toy_proxy_server.py from a vLLM checkout, "
                                         "run by vLLM's Python) instead of advisor proxy")
    # None: the engine's default model (and a default SLO it may widen)
    model: str | None = model_option()
    # None: DEFAULT_SLO, widened to what this machine can meet unless --model is given
    slo: Slo | None = slo_option(None, "SLOs in ms (default ttft:2000 p99_itl:50, widened to what "
                                       "this machine can meet unless --model is given)")
    attainment: float = option(0.9, "share of requests that must meet every SLO")
    rates: tuple[float, ...] = option((), "a fixed grid, e.g. 0.2,0.4,0.8 (default: the search)",
                                      parse=parse_rates)
    # None: MIN_REQUESTS, or `window_s` seconds' worth if more
    num_prompts: int | None = option(None, "requests per rate (default: 30, or ~16 s of them "
                                           "if more, up to 100)")
    shared_prefix: float = option(0.0, "share of each prompt every request shares, as a system "
                                       "prompt (0 to under 1; default 0: unique prompts, so no "
                                       "prefix cache hides a prefill)")
    topologies: str | None = option(
        None, "collocated:N,disagg:XpYd[,disagg-bidi:XpYd] (default: collocated:2,"
              "disagg:1p1d; multi-turn presets add disagg-bidi:1p1d)")
    connector: str = option("shm", f"disagg KV connector: {', '.join(CONNECTORS)}")
    link_emulation: str | None = option(None, "make each KV transfer as slow as a link: 1.3s, "
                                              "800ms or 1GBps (marked as emulated)")
    p2p_matrix: str | None = option(None, "a saved `nvidia-smi topo -p2p r` (or topo -m) "
                                          "output of the GPUs' host (default: nvidia-smi's "
                                          "here, where it runs)")
    collocated_url: str | None = option(None, "measure an existing collocated deployment")
    disagg_url: str | None = option(None, "measure an existing disaggregated deployment")
    collocated_metrics: tuple[str, ...] = option(
        (), "each collocated instance's /metrics (default: --collocated-url's own)")
    disagg_metrics: tuple[str, ...] = option(
        (), "each prefiller's and decoder's /metrics (default: --disagg-url's own)")
    collocated_cmd: str | None = option(
        None, "shell command that starts the collocated deployment at --collocated-url; the "
              "sweep stops it before the next one starts")
    disagg_cmd: str | None = option(
        None, "shell command that starts the disaggregated deployment at --disagg-url")
    ready_timeout: float = option(600.0, "seconds a deployment may take to answer")
    config: str | None = option(None, "a TOML or YAML file of these options (flags win)")
    out: str = option("results", "parent of the run directory")
    scale: float | None = option(None, "prompt length scale (default: sized from the "
                                       "calibration; 1 for deployment URLs)")
    output_scale: float | None = option(None, "output length scale (default: sized from the "
                                              "calibration)")
    # resolved once per sweep (engine.model.dtype); the manifest says why
    dtype: str = dtype_option()
    device: str = device_option()
    start_rate: float | None = option(None, "search: first rate (req/s; default: where the "
                                            "calibration says collocated starts to miss)")
    max_steps: int = option(4, "search: doublings, and the bracket's extra steps")
    bisect_steps: int = option(1, "search: bisections per placement")
    seed: int = option(0, "workload seed")
    operating_rate: float | None = option(None, "your production rate (req/s): the decision "
                                                "rows are judged there")
    repeats: int = option(1, "runs per rate, each with its own seed, pooled")
    max_concurrency: int | None = option(None, "at most this many requests in flight per run, "
                                               "as vllm bench serve's --max-concurrency (a "
                                               "placement the cap holds below the rate falls "
                                               "behind it, and misses)", min=1,
                                         max=MAX_CONCURRENCY)
    # None: advisor.measure.workers.default_workers
    workers: int | None = option(None, "client processes (default: 1 beside the bundled "
                                       "engine or on 2 cores or fewer, else half the cores, "
                                       "up to 8)", min=1)
    time_budget: float | None = option(
        None, f"seconds the sweep may measure before it stops refining (default: "
              f"{DEFAULT_BUDGET_S:g} for the bundled engine with the default requests per rate, "
              "else none; 0: none)")
    # NOTE: never written to the manifest: a resumed sweep takes it from the flag again
    api_key: str | None = option(None, "bearer token for --collocated-url / --disagg-url "
                                       "(default: $OPENAI_API_KEY)", envvar="OPENAI_API_KEY",
                                 secret=True)
    window_s: float = 16.0  # the seconds of arrivals a rate's default request count covers
    percentiles: str = "50,90,99"

    def __post_init__(self) -> None:
        """The flags given as text, parsed here once: a bad one is a UsageError naming it."""
        for parsed in ("percentile_values", "topology_specs"):
            getattr(self, parsed)

    @property
    def local(self) -> bool:
        """Whether the sweep starts the engine itself, here (no deployment URLs given)."""
        return not (self.collocated_url or self.disagg_url)

    @property
    def bundled(self) -> bool:
        """Whether the sweep starts the bundled engine."""
        return self.local and self.engine == "bundled"

    @property
    def topology_text(self) -> str:
        """--topologies as given, else the default for the workload."""
        if self.topologies:
            return self.topologies
        if self.workload in MULTI_TURN:
            return MULTI_TURN_TOPOLOGIES
        render = self.workload in CHAT_FRONTEND and self.engine == "bundled"
        return RENDER_SPLIT_TOPOLOGIES if render else DEFAULT_TOPOLOGIES

    @property
    def judged_slo(self) -> Slo:
        """The SLO runs are judged against: --slo, else the default (as sized, once set)."""
        return self.slo or DEFAULT_SLO

    @cached_property
    def percentile_values(self) -> list[float]:
        return parse_percentiles(self.percentiles)

    @cached_property
    def topology_specs(self) -> tuple[TopologySpec, ...]:
        """The bundled engine's placements to measure (none where deployments are given)."""
        return parse_topologies(self.topology_text) if self.local else ()

    @cached_property
    def deployments(self) -> tuple[GivenDeployment, ...]:
        """The deployments at URLs to measure."""
        return tuple(GivenDeployment(kind, url, tuple(metrics), cmd)
                     for kind, url, metrics, cmd in (
            ("collocated", self.collocated_url, self.collocated_metrics, self.collocated_cmd),
            ("disagg", self.disagg_url, self.disagg_metrics, self.disagg_cmd)) if url)

    def workload_at(self, rate: float, seed: int, num_prompts: int) -> Workload:
        """The preset at `rate`; lengths scaled by `scale` / `output_scale` (1 when unset)."""
        scale = 1.0 if self.scale is None else self.scale
        return preset(self.workload, seed, scale=scale, rate=rate, num_prompts=num_prompts,
                      output_scale=self.output_scale, shared_prefix=self.shared_prefix)

    def budget_s(self) -> float | None:
        """Seconds the sweep may measure before its second pass starts no more runs; None:
        no limit. By default DEFAULT_BUDGET_S where the bundled engine runs with the default
        requests per rate (the five-minute sweep), else none: more requests, repeats, a
        fixed grid or a deployment at a URL make a longer sweep, by choice."""
        if self.time_budget is not None:
            return self.time_budget or None
        default = self.local and not (self.num_prompts or self.repeats > 1 or self.rates)
        return DEFAULT_BUDGET_S if default else None

    def model_to_run(self) -> str | None:
        """The model to run: as given, else the default one for the bundled engine (for a
        deployment, None: its first listed model)."""
        if self.model or not self.local:
            return self.model
        return DEFAULT_MODELS[self.engine]

    def check(self) -> None:
        """UsageError naming a bad flag, before anything starts (validate, with the model
        this sweep would run)."""
        replace(self, model=self.model_to_run()).validate()

    def validate(self) -> None:
        """Raise UsageError naming the bad flag."""
        if self.workload not in PRESETS:
            raise UsageError(f"--workload {self.workload!r} is unknown; "
                             f"one of {', '.join(PRESETS)}")
        self._check_engine()
        if self.dtype not in DTYPES:
            raise UsageError(f"--dtype must be one of {', '.join(DTYPES)}, not {self.dtype!r}")
        if any(r <= 0 for r in self.rates):
            raise UsageError("--rates must all be > 0")
        if (self.start_rate is not None and self.start_rate <= 0) or self.max_steps < 1 \
                or self.bisect_steps < 0:
            raise UsageError("--start-rate must be > 0, --max-steps >= 1, --bisect-steps >= 0")
        if self.repeats < 1:
            raise UsageError(f"--repeats must be >= 1, not {self.repeats}")
        if self.time_budget is not None and not self.time_budget >= 0:
            raise UsageError(f"--time-budget must be >= 0 (0: no limit), not {self.time_budget}")
        if not self.ready_timeout >= 0:
            raise UsageError(f"--ready-timeout must be >= 0, not {self.ready_timeout}")
        if self.num_prompts is not None and not 1 <= self.num_prompts <= MAX_REQUESTS_GIVEN:
            raise UsageError(f"--num-prompts must be 1 to {MAX_REQUESTS_GIVEN}")
        if any(s is not None and not s > 0 for s in (self.scale, self.output_scale)):
            raise UsageError("--scale and --output-scale must be > 0")
        try:
            preset_spec(self.workload, shared_prefix=self.shared_prefix)
        except ValueError as e:
            raise UsageError(f"--shared-prefix: {e}") from None
        if self.connector not in CONNECTORS:
            raise UsageError(f"--connector must be one of {', '.join(CONNECTORS)}, "
                             f"not {self.connector!r}")
        if self.link_emulation:
            if not self.bundled:
                raise UsageError("--link-emulation shapes the bundled engine's connector; it "
                                 "cannot apply to --collocated-url / --disagg-url")
            try:
                parse_emulation(self.link_emulation)
            except ValueError as e:
                raise UsageError(f"--link-emulation: {e}") from None
        check_judged(self.judged_slo, self.attainment, self.operating_rate)
        for kind, url, metrics, cmd in (
                ("collocated", self.collocated_url, self.collocated_metrics, self.collocated_cmd),
                ("disagg", self.disagg_url, self.disagg_metrics, self.disagg_cmd)):
            if (cmd or metrics) and not url:
                raise UsageError(f"--{kind}{'-cmd' if cmd else '-metrics'} needs --{kind}-url "
                                 "(where the deployment answers)")
        for flag, urls in (("--collocated-url", [self.collocated_url]),
                           ("--disagg-url", [self.disagg_url]),
                           ("--collocated-metrics", self.collocated_metrics),
                           ("--disagg-metrics", self.disagg_metrics)):
            for url in urls:
                check_url(flag, url)

    def _check_engine(self) -> None:
        """UsageError naming --engine, --model or --topologies where the engine to start
        cannot run them."""
        if not self.local:
            if self.engine != "bundled":
                raise UsageError("--engine starts an engine here; --collocated-url / "
                                 "--disagg-url measure one that runs already: give one or the "
                                 "other")
            return
        model = self.model_to_run()
        assert model is not None  # a default for every engine started here
        check_here(self.engine, model, self.device)
        if self.bundled:  # the engine's own checks of each topology, before anything starts
            self.engine_to_start(self.dtype).placements(self.topology_specs)
        if self.toy_proxy is not None:
            if self.engine != "vllm":
                raise UsageError("--toy-proxy fronts vLLM's P/D: it needs --engine vllm")
            if not Path(self.toy_proxy).is_file():
                raise UsageError(f"--toy-proxy {self.toy_proxy}: no such file")
            if any(s.kind == "disagg-bidi" for s in self.topology_specs):
                raise UsageError("--toy-proxy: vLLM's toy proxy does not carry conversations; "
                                 "disagg-bidi runs behind advisor proxy --bidirectional only")

    def engine_to_start(self, dtype: str) -> Engine:
        """What the sweep measures with, serving in `dtype` (resolved): the deployments at
        URLs where given, else the engine --engine names (vLLM found here, or UsageError)."""
        if not self.local:
            return GivenEngine(self.deployments, self.model, self.api_key, self.ready_timeout)
        model = self.model_to_run()
        assert model is not None  # a default for every engine started here
        return engine_here(EngineHere(
            self.engine, model, dtype, self.device, self.connector, self.link_emulation,
            self.toy_proxy, bool(preset_spec(self.workload).tools), self.ready_timeout))


def prompts_for(opts: SweepOptions, rate: float) -> int:
    return opts.num_prompts or max(MIN_REQUESTS, min(MAX_REQUESTS, round(rate * opts.window_s)))


def span_s(opts: SweepOptions, rate: float) -> float:
    """Seconds over which a run at `rate` sends its requests (every repeat's)."""
    return prompts_for(opts, rate) * opts.repeats / rate


def first_pass_run_s(opts: SweepOptions) -> Callable[[float], float] | None:
    """Seconds a run at a rate lasts, where the requests per rate are the default (for
    sizing's first-rate budget: the bundled engine's five-minute sweep); None where the
    user asked for more (--num-prompts, --repeats) or measures deployments by URL: a longer
    sweep, by choice, with no time budget (SweepOptions.budget_s)."""
    if opts.num_prompts or opts.repeats > 1 or not opts.local:
        return None
    return lambda rate: span_s(opts, rate)


def collocated_instances(opts: SweepOptions) -> int:
    """How many engines the collocated placement spreads requests over (1 for a URL: a
    deployment's own replicas are unknown here)."""
    return next((s.decode for s in opts.topology_specs if s.kind == "collocated"), 1)
