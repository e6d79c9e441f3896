"""`advisor serve`: run a bundled-engine topology until interrupted."""

from __future__ import annotations

import dataclasses
import signal
import threading

from rich.console import Console

from advisor.errors import UsageError
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


def run_serve(topology: Topology, frontend: FrontendConfig, console: Console | None = None) -> None:
    """Start `topology`, print its URLs, restart any child that exits (said on the
    console), block until SIGINT or SIGTERM, then stop everything."""
    topology = check_topology(topology, frontend)
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
