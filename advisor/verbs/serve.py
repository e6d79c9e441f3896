"""`advisor serve`: a bundled-engine topology (collocated, disaggregated, a render tier) or
the same placement on vLLM, started here through advisor.engines and served until
interrupted."""

from __future__ import annotations

import dataclasses
import signal
import threading
from dataclasses import dataclass, fields

from rich.console import Console

from advisor.deploy.vllm import PROXY_OFFSET
from advisor.engines.bundled import serving
from advisor.engines.start import running
from advisor.engines.topologies import TopologySpec
from advisor.errors import UsageError
from advisor.flag_groups import (
    DEFAULT_MODELS,
    EngineKind,
    device_option,
    dtype_option,
    engine_option,
    model_option,
)
from advisor.flags import option
from engine import api
from engine.api import CONNECTORS, MODES, FrontendConfig, Topology, load_model_config, supervise

READY_S = 600.0  # a vLLM instance's start-up, at most (~40-60 s on 2 cores)
WATCH_S = 2.0  # how often a vLLM placement is looked at for a process that exited


@dataclass(frozen=True)
class ServeOptions:
    """`advisor serve`'s options, each with its flag (advisor.flags): the topology to
    start (engine.api.Topology's fields by name) and its front end's."""

    mode: str = option("collocated", "collocated (N replicas), disagg (xPyD + proxy) or render "
                                     "(a render-tier server: chat <-> token IDs, no model)")
    replicas: int = option(2, "collocated: number of replicas", min=1)
    prefill: int = option(1, "disagg: number of prefill instances", min=1)
    decode: int = option(1, "disagg: number of decode instances", min=1)
    render_workers: int = option(1, "render: worker processes behind its port (each about one "
                                    "core)", min=1)
    connector: str = option("shm", f"disagg KV connector: {', '.join(CONNECTORS)}")
    bidirectional: bool = option(False, "disagg: a conversation's next turn reuses the KV its "
                                        "decoder kept (prompt and reply); clients send "
                                        "X-Conversation-Id", "--bidirectional")
    engine: EngineKind = engine_option(
        "bundled", "the engine to serve the topology on: bundled, or vllm (collocated or "
                   "disagg; from PATH or .tools/vllm)")
    model: str | None = model_option()
    dtype: str = dtype_option()
    device: str = device_option()
    host: str = option("127.0.0.1", "address to bind (loopback by default)")
    port: int = option(8000, "the front's port", min=0, max=65535)
    chat_template: str | None = option(None, "a jinja2 chat template file (engines and render)")
    reasoning_parser: str = option("qwen3", "qwen3 (<think> markup) or none")
    tool_call_parser: str = option("hermes", "hermes (<tool_call> markup) or none")
    api_key: str | None = option(None, "the front requires 'Authorization: Bearer KEY' on /v1/ "
                                       "and /inference/ (default: $ADVISOR_API_KEY)",
                                 envvar="ADVISOR_API_KEY", secret=True)

    def frontend(self) -> FrontendConfig:
        return FrontendConfig(None, self.chat_template, self.reasoning_parser,
                              self.tool_call_parser)

    def topology(self) -> Topology:
        """The topology these options name (an empty key is none)."""
        given = {f.name: getattr(self, f.name) for f in fields(Topology)
                 if f.name in _FLAGGED}
        return Topology(**{**given, "model": self.model or DEFAULT_MODELS[self.engine],
                           "api_key": self.api_key or None})


_FLAGGED = {f.name for f in fields(ServeOptions)}


def check_topology(topology: Topology, frontend: FrontendConfig) -> Topology:
    """`topology` with the front end's flags, or UsageError naming the bad flag."""
    if topology.mode not in MODES:
        raise UsageError(f"--mode must be {', '.join(MODES[:-1])} or {MODES[-1]}, "
                         f"not {topology.mode!r}")
    if topology.connector not in CONNECTORS:
        raise UsageError(f"--connector must be one of {', '.join(CONNECTORS)}, "
                         f"not {topology.connector!r}")
    try:
        frontend.validate()
        topology.validate()
    except ValueError as e:
        raise UsageError(str(e)) from None
    try:
        load_model_config(topology.model)
    except ValueError as e:
        raise UsageError(f"--model: {e}") from None
    return topology.with_frontend(frontend.args())


def serve(opts: ServeOptions, console: Console | None = None) -> None:
    """`advisor serve`: the topology `opts` name on the engine they name, until SIGINT or
    SIGTERM (or, on vLLM, until one of its processes exits, said on the console)."""
    console = console or Console()
    if opts.engine == "vllm":
        _serve_vllm(opts, console)
    else:
        _serve_bundled(opts, console)


def _serve_bundled(opts: ServeOptions, console: Console) -> None:
    """Start the topology `opts` name, print its URLs, restart any child that exits (said
    on the console), block until SIGINT or SIGTERM, then stop everything."""
    topology = check_topology(opts.topology(), opts.frontend())
    if topology.mode != "render":
        choice = api.resolve_dtype(topology.dtype, topology.device)
        topology = dataclasses.replace(topology, dtype=choice.dtype)
        console.print(f"dtype: {choice.dtype} ({choice.reason})")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with console.status(f"starting {topology.num_instances} instance(s) of {topology.model}..."):
        deployment = serving(topology)
        dep = deployment.__enter__()
    watcher = threading.Thread(target=supervise, name="supervisor", daemon=True,
                               args=(dep, stop, lambda m: console.print(f"[yellow]{m}[/]")))
    watcher.start()
    try:
        console.print(f"[bold]{topology.mode}[/] topology of [bold]{topology.model}[/] ready")
        console.print(f"  front: {dep.url}")
        for role, urls in dep.instance_urls.items():
            for url in urls:
                console.print(f"  {role:>7}: {url}")
        console.print("Ctrl-C to stop.", style="dim")
        stop.wait()
    finally:
        stop.set()
        watcher.join(5)
        deployment.__exit__(None, None, None)
        console.print("stopped; all instances are down.")


def _serve_vllm(opts: ServeOptions, console: Console) -> None:
    """The same placement on vLLM, its front on --port, until a signal or until one of its
    processes exits."""
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
    with running("vllm", spec, opts.model, opts.dtype, opts.device, READY_S, console,
                 base) as r:
        console.print(f"[bold]{r.placement.name}[/] on vLLM ready\n  front: {r.up.url}")
        for url in r.placement.instances:
            console.print(f"  instance: {url}")
        console.print("Ctrl-C to stop.", style="dim")
        while not stop.wait(WATCH_S):
            if (why := r.up.gone()) is not None:
                console.print(f"[yellow]{why}[/]")
                break
    console.print("stopped; all instances are down.")
