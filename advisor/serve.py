"""`advisor serve`: run a bundled-engine topology until interrupted."""

from __future__ import annotations

import signal
import threading

from rich.console import Console

from engine.serve.launch import Topology, launch


def run_serve(topology: Topology, console: Console | None = None) -> None:
    """Start `topology`, print its URLs, block until SIGINT or SIGTERM, then stop everything."""
    console = console or Console()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with console.status(f"starting {topology.num_instances} instance(s) of {topology.model}..."):
        deployment = launch(topology)
        dep = deployment.__enter__()
    try:
        console.print(f"[bold]{topology.mode}[/] topology of [bold]{topology.model}[/] ready")
        console.print(f"  front: {dep.url}")
        for role, urls in dep.instance_urls.items():
            for url in urls:
                console.print(f"  {role:>7}: {url}")
        console.print("Ctrl-C to stop.", style="dim")
        stop.wait()
    finally:
        deployment.__exit__(None, None, None)
        console.print("stopped; all instances are down.")
