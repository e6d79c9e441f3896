"""Keeping a deployment up: a child that exits is restarted with backoff, and said so.

While an instance is down the front has already ejected it (engine.fronts.liveness): its
requests fail at once and new ones go to the others, or get a 503 when none is left.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from engine.core import deployment
from engine.processes.children import LaunchError, log_tail, wait_healthy
from engine.processes.launch import Child, Deployment

BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)  # waits before each restart of one child
POLL_S = 0.5
HEALTH_TIMEOUT_S = 120.0


def supervise(dep: Deployment, stop: threading.Event, log: Callable[[str], None]) -> None:
    """Until `stop` is set: restart every child of `dep` that exits. Blocking: run it on a
    thread. A child that keeps failing waits longer each time (BACKOFF_S)."""
    failures = {id(c): 0 for c in dep.children}
    while not stop.wait(POLL_S):
        for child in dep.children:
            if stop.is_set() or child.proc is None or child.proc.poll() is None:
                continue
            code, tail = child.proc.returncode, log_tail(child.proc, 300).strip()
            wait = BACKOFF_S[min(failures[id(child)], len(BACKOFF_S) - 1)]
            log(f"{child.name} exited with code {code}"
                + (f" ({tail.splitlines()[-1]})" if tail else "")
                + f"; restarting in {wait:g} s")
            if stop.wait(wait):
                return
            failures[id(child)] += 1
            if _restart(child):
                failures[id(child)] = 0
                log(f"{child.name} restarted")


def _restart(child: Child) -> bool:
    """Start `child` again and wait until it is healthy; False when it failed to."""
    if child.proc is not None:
        child.proc.log.close()
    try:
        wait_healthy(child.url, child.start(), HEALTH_TIMEOUT_S, deployment.current(child.env))
        return True
    except LaunchError:  # NOTE: a port held by someone else is one: never routed to
        return False
