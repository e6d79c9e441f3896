"""`advisor serve`: run a bundled-engine topology until interrupted."""

from __future__ import annotations

import dataclasses
import signal
import threading
from dataclasses import dataclass, fields

from rich.console import Console

from advisor.errors import UsageError
from advisor.flags import option
from engine import api
from engine.api import (
    CONNECTORS,
    MODES,
    FrontendConfig,
    Topology,
    launch,
    load_model_config,
    supervise,
)

DEFAULT_MODEL = "small"


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
    engine: str | None = option(None, "serve the topology on this engine instead of the "
                                      "bundled one: vllm (collocated or disagg; from PATH or "
                                      ".tools/vllm)")
    model: str | None = option(None, "preset name or a local HF model directory (default "
                                     "small; with --engine vllm, mini)")
    dtype: str = option("auto", "auto (bfloat16 where fast here, else float32), float32, "
                                "bfloat16 or float16")
    device: str = option("cpu", "cpu or cuda")
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
        return Topology(**{**given, "model": self.model or DEFAULT_MODEL,
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


def run_serve(opts: ServeOptions, console: Console | None = None) -> None:
    """Start the topology `opts` name, print its URLs, restart any child that exits (said
    on the console), block until SIGINT or SIGTERM, then stop everything."""
    topology = check_topology(opts.topology(), opts.frontend())
    console = console or Console()
    if topology.mode != "render":
        choice = api.resolve_dtype(topology.dtype, topology.device)
        topology = dataclasses.replace(topology, dtype=choice.dtype)
        console.print(f"dtype: {choice.dtype} ({choice.reason})")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with console.status(f"starting {topology.num_instances} instance(s) of {topology.model}..."):
        deployment = launch(topology)
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
