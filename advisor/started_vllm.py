"""`advisor bench`, `serve` and `probe --transfer-check` on a vLLM this process starts
(--engine vllm): the placement started as the sweep starts it (advisor.sweep.on_vllm, the
commands `advisor deploy` prints), waited for instance by instance, then measured, served or
checked, and stopped. Without --engine, each verb runs as it always has."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from advisor.deploy.vllm import PROXY_OFFSET
from advisor.errors import UsageError
from advisor.goodput.placements import Placement
from advisor.measure.bench import run_bench
from advisor.measure.bench_options import BenchOptions
from advisor.probe.options import ProbeOptions
from advisor.probe.probe import run_probe
from advisor.rundata.manifest import EngineRan
from advisor.rundata.result import RunResult
from advisor.serve import ServeOptions, run_serve
from advisor.sweep.deployments import started
from advisor.sweep.on_vllm import engine_ran, placements
from advisor.sweep.topologies import TopologySpec
from advisor.vllm_engine.runtime import VLLM_DEFAULT_MODEL, VllmSettings
from engine import api

ENGINES = ("vllm",)
READY_S = 600.0  # a vLLM instance's start-up, at most (~40-60 s on 2 cores)
WATCH_S = 2.0  # how often `serve` looks for a process that exited


@dataclass(frozen=True)
class Running:
    """A vLLM placement this process started: where it serves, what a manifest records of
    it, and what says, when asked, why it is gone (None while it all runs)."""

    placement: Placement
    model: str  # the name it serves
    engine: EngineRan
    gone: Callable[[], str | None]

    @property
    def url(self) -> str:
        assert self.placement.url is not None  # every placement started here has a front
        return self.placement.url


@contextlib.contextmanager
def running(spec: TopologySpec, model: str | None, dtype: str, device: str,
            ready_timeout: float, console: Console,
            base_port: int | None = None) -> Iterator[Running]:
    """`spec` on vLLM (the model a preset or HF directory, default VLLM_DEFAULT_MODEL), its
    ports from `base_port` (default: a free range), up until the block exits; its logs in a
    directory named on the console."""
    name = model or VLLM_DEFAULT_MODEL
    if dtype == "auto":
        dtype = api.resolve_dtype(dtype, device).dtype
    settings = VllmSettings.found(name, dtype, device)
    [p] = placements((spec,), settings, base_port)
    logs = Path(tempfile.mkdtemp(prefix="advisor-vllm-"))
    console.print(f"starting {p.name} on {settings.install.distribution} "
                  f"{settings.install.version} ({name}, {dtype}); logs in {logs}")
    with started(p, logs, name, None, ready_timeout) as gone:
        yield Running(p, name, engine_ran(settings, [p]), gone)


def checked_engine(engine: str | None) -> str | None:
    """--engine as given; UsageError naming it where it is not one started here."""
    if engine is not None and engine not in ENGINES:
        raise UsageError(f"--engine must be {' or '.join(ENGINES)}, not {engine!r}")
    return engine


def bench(opts: BenchOptions, argv: list[str] | None = None) -> RunResult:
    """`advisor bench`: the endpoint at --base-url, or (--engine vllm) one vLLM instance
    started here and measured, its version and script in the manifest."""
    if checked_engine(opts.engine) is None:
        return run_bench(opts, argv)
    if opts.base_url != BenchOptions.base_url or opts.host or opts.port:
        raise UsageError("--engine starts the server it measures; --base-url / --host / "
                         "--port measure one that runs already: give one or the other")
    with running(TopologySpec("collocated", 0, 1), opts.model, "auto", "cpu",
                 opts.ready_timeout, Console(stderr=True)) as up:
        return run_bench(dataclasses.replace(opts, base_url=up.url, engine=None,
                                             model=up.model), argv, up.engine)


def probe(opts: ProbeOptions) -> None:
    """`advisor probe`: with --engine vllm, its transfer check runs on a vLLM 1P1D started
    here (NixlConnector, behind advisor proxy), read from the decoder's own counters."""
    if checked_engine(opts.engine) is None:
        run_probe(opts)
        return
    if opts.transfer_check or opts.metrics_urls:
        raise UsageError("--engine starts the P/D pair it checks; --transfer-check URL / "
                         "--metrics-url check one that runs already: give one or the other")
    with running(TopologySpec("disagg", 1, 1), opts.model, "auto", "cpu", opts.ready_timeout,
                 Console(stderr=True)) as up:
        run_probe(dataclasses.replace(opts, engine=None, transfer_check=up.url,
                                      metrics_urls=up.placement.metrics[1:],
                                      model=up.model))


def serve(opts: ServeOptions, console: Console | None = None) -> None:
    """`advisor serve`: the bundled engine, or (--engine vllm) the same topology on vLLM,
    until SIGINT or SIGTERM, or until one of its processes exits (said on the console)."""
    if checked_engine(opts.engine) is None:
        run_serve(opts, console)
        return
    console = console or Console()
    spec = {"collocated": TopologySpec("collocated", 0, opts.replicas),
            "disagg": TopologySpec("disagg-bidi" if opts.bidirectional else "disagg",
                                   opts.prefill, opts.decode)}.get(opts.mode)
    if spec is None:
        raise UsageError(f"--mode {opts.mode}: --engine vllm serves collocated or disagg")
    # the front on --port: a proxy or round-robin front at base + PROXY_OFFSET, except one
    # data-parallel server on GPUs, which is its own front
    alone = spec.kind == "collocated" and not opts.device.startswith("cpu")
    base = opts.port - (0 if alone else PROXY_OFFSET)
    if base < 1024:
        raise UsageError(f"--port {opts.port}: --engine vllm puts its instances below the front "
                         f"(from --port - {PROXY_OFFSET}); give a port of {1024 + PROXY_OFFSET} "
                         "or more")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with running(spec, opts.model, opts.dtype, opts.device, READY_S, console, base) as up:
        console.print(f"[bold]{up.placement.name}[/] on vLLM ready\n  front: {up.url}")
        for url in up.placement.instances:
            console.print(f"  instance: {url}")
        console.print("Ctrl-C to stop.", style="dim")
        while not stop.wait(WATCH_S):
            if (why := up.gone()) is not None:
                console.print(f"[yellow]{why}[/]")
                break
    console.print("stopped; all instances are down.")
