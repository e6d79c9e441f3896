"""A deployment run by a shell command (`--collocated-cmd`, `--disagg-cmd`, as `vllm bench
sweep serve --serve-cmd` takes them; vLLM's scripts as advisor.engines.vllm writes them), or
one at a URL that someone started, waited for until ready. A command's deployment runs in
its own process group, alone (both placements share the GPUs), and is stopped (SIGTERM,
then SIGKILL after a grace period) with its port free again before the next one starts."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

from advisor.engines.engine import still_running
from advisor.engines.placement import Placement
from advisor.errors import UsageError
from advisor.measure.ready import wait_ready

GRACE_S = 30.0  # SIGTERM -> SIGKILL
PORT_FREE_S = 30.0  # how long a stopped deployment's port may stay bound


@contextlib.contextmanager
def started(p: Placement, log_dir: Path, model: str | None, api_key: str | None,
            ready_timeout: float) -> Iterator[Callable[[], str | None]]:
    """Run `p.cmd` (when it has one) until the block exits, its output in
    `log_dir/NAME.log`; wait until each of `p.instances`, then `p.url`, is ready. UsageError
    naming the log when the command exits or never becomes ready. Yields what says, when
    asked, why the deployment is gone (its command exited), else None."""
    url = p.url
    assert url is not None  # a deployment measured at a URL
    if not p.cmd:
        wait_ready(url, model, api_key, ready_timeout)
        yield still_running
        return
    log_path = log_dir / f"{p.name}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(p.cmd, shell=True, start_new_session=True, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT)
    first: set[int] = set()  # the processes the script started (ours: its instances, front)
    try:
        def exited(when: str) -> str | None:
            code = proc.poll()
            if code is not None:
                return f"{p.flag}-cmd exited with code {code} {when}: see {log_path}"
            if not p.instances:  # someone's command: what it runs below it is its own
                return None
            now = _children(proc.pid)
            if not first:
                first.update(now)
            return f"a process of {p.name} exited {when}: see {log_path}" \
                if first - now else None

        try:
            for each in (*p.instances, url):
                wait_ready(each, model, api_key if each == url else None, ready_timeout,
                           partial(exited, f"before {each} was ready"))
        except UsageError as e:
            if exited("") is None:  # all of it still running, never ready
                raise UsageError(f"{p.flag}-cmd: {e}: see {log_path}") from None
            raise
        yield partial(exited, "while it was measured")
    finally:
        stop_group(proc)
        wait_port_free(url)


def _children(pid: int) -> set[int]:
    """The processes `pid` started that still run (Linux's /proc: neither reaped nor zombies)."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return set()
    return {int(k) for k in kids if _running(int(k))}


def _running(pid: int) -> bool:
    try:  # the state follows the parenthesised name, which may hold spaces
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = GRACE_S) -> None:
    """SIGTERM `proc`'s process group, SIGKILL it after `grace_s`; reap the leader and
    kill whatever of the group is left."""
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + grace_s
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    _signal_group(proc.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def wait_port_free(url: str, timeout_s: float = PORT_FREE_S) -> None:
    """Wait until nothing accepts connections at `url`'s host and port."""
    u = urllib.parse.urlsplit(url)
    port = u.port or (443 if u.scheme == "https" else 80)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection((u.hostname or "127.0.0.1", port), timeout=1).close()
        except OSError:
            return
        time.sleep(0.2)
