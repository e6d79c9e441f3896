"""The launcher's ports: picked where the kernel never picks on its own, and a port that
answers with something other than HTTP is waited out, never a traceback."""

import socket
import subprocess
import sys
import tempfile
import threading

import pytest

from engine.processes.children import LaunchError, _ephemeral_low, free_port, wait_healthy

pytestmark = pytest.mark.unit


def test_free_ports_are_below_the_kernels_own_range_and_never_given_twice():
    low = _ephemeral_low()
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports) and max(ports) < low
    # what the kernel hands a bind to port 0 (a KV side channel's) is in its range
    kernel = []
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            kernel.append(s.getsockname()[1])
    assert min(kernel) >= low and not set(kernel) & set(ports)


def test_a_port_answered_by_something_else_waits_for_the_child_and_names_its_exit():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def answer_like_a_side_channel():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(1024)
                conn.sendall(b"AKV1\x00\x00\x00\x09{\"error\":\"bad magic\"}")

    threading.Thread(target=answer_like_a_side_channel, daemon=True).start()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    proc.log = tempfile.TemporaryFile()  # noqa: SIM115  (the launcher reads it as the log)
    try:
        with pytest.raises(LaunchError, match="exited with code 0"):
            wait_healthy(f"http://127.0.0.1:{server.getsockname()[1]}", proc, 10)
    finally:
        server.close()
        proc.wait()
        proc.log.close()
