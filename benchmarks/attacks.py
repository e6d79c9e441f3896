"""The soak's hostile mix: what another user of the host tries against a deployment it did
not start (it has neither the deployment's secret nor the user's API key), each attack
counting what it got back. Used by soak.py.

1. KV forgery: an instance's HTTP port asked without the key; kv_transfer_params naming the
   prefiller's side channel and blocks 0-3, and a `reuse` of them, sent through the front.
2. A siege of the prefiller's KV side channel: sockets that begin a frame and trickle a byte
   every 0.5 s, reopened whenever the server closes them.
3. A squatter on the killed decoder's port, answering 200 to everything while it holds it.
4. Bodies past the model's limit and just under it; connections that never finish their
   headers, reopened whenever the server closes them.
5. Lists past their limits: stop_token_ids, logit_bias.
6. Conversation ids a front must not copy upstream: 10,000 characters, control characters,
   non-ASCII (issue 56: long ones once made instances' parsers answer bare 400s, read as
   impostors, and every instance was ejected).
7. A tool call's arguments nested 5,000 deep (once a RecursionError and a 500).
8. Bodies trickled a byte every 0.5 s after whole headers, reopened whenever the server
   closes them (once they held a descriptor for ever).
9. Requests aiohttp's parser refuses (a request line of control characters, a Content-Length
   that is no number): each a JSON 400 that does not echo the request (issue 67).
10. Files handed to the CLI beside the deployment (issue 67): a trace whose timestamps
   overflow when subtracted (advisor bench hung on it), a run directory whose front-end CPU
   would give 1e15 render servers and whose placement names 11-digit counts (advisor deploy
   and recommend ran out of memory): each must end in seconds, exit 2, and stay small.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import struct
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import aiohttp
from aiohttp import web

from engine.core.config import load_model_config, max_body_bytes
from engine.kv import frame

SIEGE, LORIS, TRICKLE_S = 200, 100, 0.5
SQUAT_S = 10.0


def listening_ports(pid: int) -> set[int]:
    """The TCP ports a process listens on (what any local user can find out)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # LISTEN
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


class Attacks:
    """Counts, per attack, of what came back (statuses, closes, requests a squatter got)."""

    def __init__(self, front: str, prefill: str, side_port: int, model: str):
        self.front, self.prefill, self.side_port = front, prefill, side_port
        self.limit = max_body_bytes(load_model_config(model).max_position_embeddings)
        self.got: dict[str, Counter] = defaultdict(Counter)

    def bodies(self) -> list[tuple[str, str, bytes]]:
        """(attack, URL, body) of one round of hostile requests."""
        forged = {"do_remote_prefill": True, "remote_engine_id": "e", "remote_request_id": "r",
                  "remote_host": "127.0.0.1", "remote_port": self.side_port,
                  "remote_block_ids": [0, 1, 2, 3]}
        plain = {"model": "m", "prompt": [5, 6, 7], "max_tokens": 3}
        front, pre = self.front + "/v1/completions", self.prefill + "/v1/completions"
        nested = {"model": "m", "max_tokens": 3, "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "", "tool_calls": [{
                "id": "c", "type": "function",
                "function": {"name": "f", "arguments": "[" * 5000}}]}]}
        return [
            *((f"6 conversation id: {what}", front,
               json.dumps({**plain, "conversation_id": cid}).encode())
              for what, cid in (("10,000 characters", "c" * 10_000),
                                ("control characters", "a\x01\x7fb"),
                                ("not ASCII", "gespr\u00e4ch\ud800"))),
            ("7 tool-call arguments nested 5,000 deep", self.front + "/v1/chat/completions",
             json.dumps(nested).encode()),
            ("1 instance port without the key", pre, json.dumps(plain).encode()),
            ("1 forged kv_transfer_params", front,
             json.dumps({**plain, "kv_transfer_params": forged}).encode()),
            ("1 forged reuse", front, json.dumps({**plain, "kv_transfer_params": {
                "do_remote_decode": True, "reuse": forged}}).encode()),
            ("4 body past the limit", front,
             json.dumps({**plain, "prompt": "x " * self.limit}).encode()),
            ("4 body just under the limit", front,
             json.dumps({**plain, "prompt": "x " * (self.limit // 2 - 100)}).encode()),
            ("5 stop_token_ids past the limit", front,
             json.dumps({**plain, "stop_token_ids": list(range(100_000))}).encode()),
            ("5 logit_bias past the limit", front,
             json.dumps({**plain, "logit_bias": {str(t): 1 for t in range(5000)}}).encode()),
        ]

    async def requests(self, until: float, every_s: float = 5.0) -> None:
        """A round of `bodies` every `every_s` until `until` (time.monotonic)."""
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < until:
                for name, url, body in self.bodies():
                    try:
                        async with session.post(url, data=body) as r:
                            await r.read()
                            self.got[name][r.status] += 1
                    except (TimeoutError, aiohttp.ClientError) as e:
                        self.got[name][type(e).__name__] += 1
                await asyncio.sleep(every_s)

    async def _held(self, name: str, port: int, opening: bytes, trickle: bytes | None,
                    until: float) -> None:
        """One hostile connection, opened again each time the server closes it."""
        while time.monotonic() < until:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                self.got[name]["refused"] += 1
                await asyncio.sleep(TRICKLE_S)
                continue
            self.got[name]["opened"] += 1
            try:
                writer.write(opening)
                while time.monotonic() < until:
                    if trickle:
                        writer.write(trickle)
                    await writer.drain()
                    with contextlib.suppress(TimeoutError):
                        if await asyncio.wait_for(reader.read(1), TRICKLE_S) == b"":
                            self.got[name]["closed by the server"] += 1
                            break
            except (ConnectionError, OSError):
                self.got[name]["closed by the server"] += 1
            finally:
                writer.close()

    async def sieges(self, until: float) -> None:
        """Attacks 2, 4 and 8's slow connections, held until `until`."""
        opening = struct.pack("!4sH", frame.MAGIC, frame.VERSION)
        host_port = int(self.front.rsplit(":", 1)[1])
        partial = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/"
        headers = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                   b"application/json\r\nContent-Length: 100000\r\n\r\n{")
        await asyncio.gather(
            *(self._held("8 body trickled a byte at a time", host_port, headers, b" ", until)
              for _ in range(LORIS)),
            *(self._held("2 side-channel siege", self.side_port, opening, b"\0", until)
              for _ in range(SIEGE)),
            *(self._held("4 headers never finished", host_port, partial, None, until)
              for _ in range(LORIS)))

    async def squat(self, port: int, within_s: float = 5.0) -> None:
        """Take `port` as soon as it is free (within `within_s`) and hold it SQUAT_S,
        answering 200 to everything and counting what is not a health check."""
        name = "3 squatter on the killed decoder's port"

        async def answer(request: web.Request) -> web.Response:
            self.got[name]["health checks" if request.path == "/health"
                           else f"{request.method} {request.path} received"] += 1
            return web.json_response({"status": "ok"})

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        deadline = time.monotonic() + within_s
        try:
            while True:
                try:
                    sock = socket.create_server(("127.0.0.1", port))
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        self.got[name]["port never free"] += 1
                        return
                    await asyncio.sleep(0.01)
            await web.SockSite(runner, sock).start()
            self.got[name]["held"] += 1
            await asyncio.sleep(SQUAT_S)
        finally:
            await runner.cleanup()

    async def parser(self, until: float, every_s: float = 5.0) -> None:
        """Attack 9: requests the HTTP parser refuses, each answer's status and type."""
        port = int(self.front.rsplit(":", 1)[1])
        while time.monotonic() < until:
            for raw in (b"GET /\x01\x02 HTTP/1.1\r\nHost: x\r\n\r\n",
                        b"POST /v1/completions HTTP/1.1\r\nContent-Length: zz\r\n\r\n"):
                try:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.write(raw)
                    answer = await asyncio.wait_for(reader.read(), 10)
                    writer.close()
                    json_body = b"application/json" in answer.split(b"\r\n\r\n")[0]
                    self.got["9 refused by the HTTP parser"][
                        f"{answer[9:12].decode()} {'json' if json_body else 'not json'}"] += 1
                except (OSError, TimeoutError) as e:
                    self.got["9 refused by the HTTP parser"][type(e).__name__] += 1
            await asyncio.sleep(every_s)

    async def files(self, until: float, where: Path, every_s: float = 30.0) -> None:
        """Attack 10: hostile files handed to the CLI, every `every_s`: each run's exit code,
        whether it took under 10 s and its peak RSS under 300 MB."""
        trace = where / "overflow.jsonl"
        trace.write_text('{"timestamp": 1e308, "input_length": 10, "output_length": 8}\n'
                         '{"timestamp": -1e308, "input_length": 10, "output_length": 8}\n')
        run = _hostile_run_dir(where / "run")
        cli = [sys.executable, "-m", "advisor.cli"]
        runs = {"bench --trace (timestamps of +-1e308)":
                [*cli, "bench", "--trace", str(trace), "--base-url", self.front],
                "deploy (1e15 ms a request, 11-digit counts)":
                [*cli, "deploy", str(run), "--format", "k8s"],
                "recommend (the same)": [*cli, "recommend", str(run)]}
        while time.monotonic() < until:
            for name, argv in runs.items():
                code, seconds, rss_mb = await asyncio.to_thread(_timed, argv)
                self.got[f"10 {name}"][f"exit {code}, {'under' if seconds < 10 else 'OVER'} "
                                       f"10 s, {'under' if rss_mb < 300 else 'OVER'} "
                                       "300 MB"] += 1
            await asyncio.sleep(every_s)

    def lines(self) -> dict[str, str]:
        """What each attack got back, one line each."""
        return {f"attack {name}": ", ".join(f"{k}: {v}" for k, v in sorted(
            c.items(), key=lambda kv: str(kv[0]))) for name, c in sorted(self.got.items())}


def _timed(argv: list[str]) -> tuple[int, float, float]:
    """(exit code, seconds, peak RSS in MB) of `argv` run to its end."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, time.monotonic() - start, usage.ru_maxrss / 1024


def _hostile_run_dir(path: Path) -> Path:
    """A run directory as advisor writes one, then given a front-end CPU of 1e15 ms a
    request and a collocated placement of 100,000,000,000 replicas."""
    from advisor.rundata.evidence import (
        Evidence,
        FrontendEvidence,
        PlacementEvidence,
        WorkloadEvidence,
    )
    from advisor.rundata.manifest import Manifest
    from advisor.rundata.recommendation import Recommendation
    from advisor.rundata.rundir import RunDir
    from advisor.rundata.slo import Slo

    r = RunDir(path)
    r.write_manifest(Manifest.new(0, {"model": "qwen2.5-7b", "device": "cuda"}))
    r.write_evidence(Evidence(Slo.of(2000, 50), PlacementEvidence("collocated-2", 1.0),
                              WorkloadEvidence(mean_prompt_tokens=2000, concurrency=2.0),
                              disaggregated=PlacementEvidence("disagg-1p1d", 2.0),
                              frontend=FrontendEvidence(cpu_ms_per_request=5.0)))
    r.write_recommendation(Recommendation("split-render-tier", [], [], None, [], {}))
    evidence = json.loads((path / "evidence.json").read_text())
    evidence["frontend"]["cpu_ms_per_request"] = 1e15
    evidence["collocated"]["placement"] = "collocated-100000000000"
    (path / "evidence.json").write_text(json.dumps(evidence))
    return path
