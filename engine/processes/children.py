"""Child processes of a deployment: free ports to give them, starting them with their
stderr kept, waiting for their health, and stopping them. Children get SIGTERM if this
process dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import IO, cast

from engine.core import deployment

_PR_SET_PDEATHSIG = 1


class LaunchError(RuntimeError):
    """An instance exited during start-up or never became healthy (the message says which)."""


_HANDED_OUT: set[int] = set()  # ports free_port gave this process, never given twice


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out on its own (a bind to port 0)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now, for a child to bind, below the kernel's ephemeral range:
    one the kernel picked could be picked again for another bind to 0 (a starting
    instance's KV side channel) before the child binds it."""
    low = _ephemeral_low()
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 20000), low) if low > 2048 else 0
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s, contextlib.suppress(OSError):
            s.bind((host, port))
            port = s.getsockname()[1]
            _HANDED_OUT.add(port)
            return cast("int", port)
    raise OSError(f"no free port below {low} on {host}")


def die_with_parent() -> None:
    """Ask the kernel to SIGTERM this process when its parent dies (Linux; a no-op elsewhere)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Process(subprocess.Popen[bytes]):
    """A child process whose stderr goes to `log`, a file kept open while it runs."""

    log: IO[bytes]


def spawn(args: list[str], cores: list[int] | None, env: dict[str, str]) -> Process:
    """Start `python *args`, its stderr into an unlinked temporary file: a pipe nobody reads
    after start-up would fill and block the child."""
    log = tempfile.TemporaryFile()  # noqa: SIM115  (open as long as the child runs)
    # NOTE: the parent-death signal can only be asked for in the child; die_with_parent
    # makes one prctl call there, nothing that could wait on a lock another thread held
    proc = Process([sys.executable, *args], env=env,
                   preexec_fn=die_with_parent,
                   stdout=subprocess.DEVNULL, stderr=log)
    proc.log = log
    if cores:
        os.sched_setaffinity(proc.pid, cores)
    return proc


def log_tail(proc: Process, nbytes: int = 2000) -> str:
    """The last `nbytes` of what a spawned process wrote to stderr."""
    proc.log.seek(max(0, os.fstat(proc.log.fileno()).st_size - nbytes))
    return proc.log.read().decode(errors="replace")


def wait_healthy(url: str, proc: Process, timeout: float,
                 secret: bytes | None = None) -> None:
    """Return once `url`/health answers 200 (inside a deployment, with the proof that only
    one of its processes can give); LaunchError if `proc` exits, another process answers
    at its port, or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LaunchError(f"instance {url} exited with code {proc.returncode}: "
                              f"{log_tail(proc)}")
        nonce = secrets.token_hex(8)
        asked = f"{url}/health?proof={nonce}" if secret else f"{url}/health"
        # NOTE: an HTTPException is something other than the child answering there, which
        # then fails to bind and exits, for the next pass to report
        with contextlib.suppress(OSError, http.client.HTTPException, ValueError), \
                urllib.request.urlopen(asked, timeout=1) as r:
            if r.status == 200 and secret is None:
                return
            said = json.loads(r.read()).get("proof")
            if r.status == 200 and secret and deployment.proven(secret, nonce, url, said):
                return
            raise LaunchError(f"{url}: another process holds its port (it answered /health "
                              "without this deployment's proof)")
        time.sleep(0.05)
    raise LaunchError(f"instance {url} not healthy after {timeout:.0f} s")


def stop(processes: list[Process], grace_s: float = 5.0) -> None:
    """SIGTERM everything, then SIGKILL what is still alive after `grace_s`."""
    for p in processes:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        if p.poll() is None:
            p.kill()
            p.wait()
        p.log.close()
