"""N worker processes of one server behind one port (vLLM's --renderer-num-workers).

Each worker binds the port itself with SO_REUSEPORT, so the kernel spreads incoming
connections over them with no dispatcher hop. The parent holds the port (bound, never
listening: it takes no connections), forks the workers, restarts one that dies, and stops
them all on SIGTERM or Ctrl-C. Workers share their counters through a `Board` in shared
memory, so whichever worker answers /metrics answers for all of them.
"""

from __future__ import annotations

import mmap
import os
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable

from engine.processes.children import die_with_parent

RESTART_WAIT_S = 1.0  # before forking a worker again (a worker crashing at once must not spin)
STOP_GRACE_S = 5.0


class Board:
    """Per-worker float counters in anonymous shared memory. Made before the workers fork;
    each writes only its own row, anyone sums the columns (a torn read is off by at most one
    request's update, never cumulative)."""

    def __init__(self, workers: int, fields: tuple[str, ...]) -> None:
        self.workers, self.fields = workers, fields
        self._row = struct.Struct(f"{len(fields)}d")
        self._mem = mmap.mmap(-1, self._row.size * workers)

    def publish(self, worker: int, values: dict[str, float]) -> None:
        """Worker `worker`'s current counters (every field of the board)."""
        self._row.pack_into(self._mem, worker * self._row.size,
                            *(float(values[f]) for f in self.fields))

    def total(self, field: str) -> float:
        """`field` summed over all workers."""
        col = self.fields.index(field)
        return float(sum(self._row.unpack_from(self._mem, w * self._row.size)[col]
                         for w in range(self.workers)))


def reuseport_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port with SO_REUSEPORT (not yet listening)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def serve_workers(workers: int, host: str, port: int,
                  run_worker: Callable[[int, socket.socket], None]) -> None:
    """Fork `workers` processes, each calling `run_worker(index, listening socket)` on its
    own SO_REUSEPORT socket of host:port (port 0: a free one, the same for all), until
    SIGTERM or SIGINT reaches this process or a worker exits cleanly (a stop sent to the
    whole process group); a worker that fails meanwhile is forked again."""
    hold = reuseport_socket(host, port)  # bound, never listening: holds the port only
    port = hold.getsockname()[1]
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    pids = {_fork(i, host, port, run_worker): i for i in range(workers)}
    print(f"{workers} workers on http://{host}:{port}", flush=True)
    while not stopping:
        time.sleep(0.1)
        for pid, code in _exited(pids):
            i = pids.pop(pid)
            if code == 0:
                stopping = True
                continue
            print(f"worker {i} (pid {pid}) exited with code {code}; restarting",
                  file=sys.stderr, flush=True)
            time.sleep(RESTART_WAIT_S)
            if not stopping:
                pids[_fork(i, host, port, run_worker)] = i
    _stop(pids)
    hold.close()


def _fork(index: int, host: str, port: int,
          run_worker: Callable[[int, socket.socket], None]) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 0
    try:  # the child: never returns into the parent's loop
        die_with_parent()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sock = reuseport_socket(host, port)
        sock.listen(1024)
        run_worker(index, sock)
    except KeyboardInterrupt:
        pass
    except BaseException as e:
        print(f"worker {index}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _exited(pids: dict[int, int]) -> list[tuple[int, int]]:
    """(pid, exit code) of every worker that has exited since the last look."""
    out = []
    for pid in list(pids):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            out.append((pid, os.waitstatus_to_exitcode(status)))
    return out


def _stop(pids: dict[int, int]) -> None:
    """SIGTERM every worker, SIGKILL those still alive after STOP_GRACE_S, reap all."""
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while pids and time.monotonic() < deadline:
        for pid, _ in _exited(pids):
            pids.pop(pid)
        time.sleep(0.05)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
