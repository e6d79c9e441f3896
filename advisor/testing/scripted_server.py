"""An OpenAI-compatible server whose timing is known exactly, a ruler for clients: each
streamed request's first token `ttft_ms` after it arrived, the rest every `itl_ms` on an
absolute schedule, with optional failures, slow steps, wake-up costs and vLLM's refusal of
a request past its context. What it received and when it wrote each chunk is kept for
inspection (`GET /debug/requests`).

    python -m advisor.testing.scripted_server --port 8100 --ttft-ms 200 --itl-ms 50"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from advisor.measure.arrival import SO_TIMESTAMPNS, receive_time
from engine.api import error_body


@dataclass(frozen=True)
class Script:
    ttft_ms: float = 100.0
    itl_ms: float = 20.0
    max_tokens: int = 16  # used when a request names none
    fail_every: int = 0
    wake_ms_per_s: float = 0.0
    stall_ms: float = 0.0
    max_model_len: int = 0  # 0: no limit
    lists_context: bool = True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive; streams use chunked encoding
    # NOTE: with Nagle on, an event written after the headers waits for their ACK, which
    # a client on a reused connection delays ~40 ms: the ruler would be late, not the client
    disable_nagle_algorithm = True
    server: ScriptedServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _json(self, status: int, obj: object) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._json(200, {"status": "ok"})
        elif self.path == "/v1/models":
            s = self.server.script
            model = {"id": "scripted", "object": "model",
                     **({"max_model_len": s.max_model_len}
                        if s.max_model_len and s.lists_context else {})}
            self._json(200, {"object": "list", "data": [model]})
        elif self.path == "/debug/requests":
            self._json(200, self.server.received)
        else:
            self._json(404, error_body(f"no route {self.path}", "not_found", 404))

    def setup(self) -> None:
        super().setup()
        # not Linux: arrival falls back to when this thread saw the request
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)

    def handle_one_request(self) -> None:
        self.arrived = self._kernel_arrival()
        super().handle_one_request()

    def _kernel_arrival(self) -> float:
        """When the kernel received the request's first bytes (time.monotonic() seconds),
        not when a thread picked it up: the client rightly counts that delay."""
        try:
            _, ancillary, _, _ = self.connection.recvmsg(1, socket.CMSG_SPACE(16), socket.MSG_PEEK)
        except OSError:
            return time.monotonic()
        return receive_time(ancillary)

    def do_POST(self) -> None:
        arrived = self.arrived
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        s, chat = self.server.script, self.path.endswith("chat/completions")
        timing = {"arrived": arrived, "writes": []}
        with self.server.lock:
            self.server.received.append({"body": body, "timing": timing})
            count = len(self.server.received)
            wake = 0.0 if self.server.in_flight else \
                max(0.0, arrived - self.server.idle_since) * s.wake_ms_per_s
            timing["wake_ms"] = wake  # what this request was scripted to pay, for tests
            self.server.in_flight += 1
        try:
            self._answer(body, chat, arrived, s.ttft_ms + wake, count, timing)
        finally:
            with self.server.lock:
                self.server.in_flight -= 1
                self.server.idle_since = time.monotonic()

    def _answer(self, body: dict[str, Any], chat: bool, arrived: float, ttft_ms: float, count: int,
                timing: dict[str, Any]) -> None:
        s = self.server.script
        if s.fail_every and count % s.fail_every == 0:
            return self._json(500, error_body("scripted failure", "server_error", 500))
        n = int(body.get("max_tokens") or s.max_tokens)
        prompt = body.get("messages") if chat else body.get("prompt")
        tokens = len(prompt) if isinstance(prompt, list) else 1
        if s.max_model_len and tokens + n > s.max_model_len:
            return self._json(400, error_body(
                f"prompt ({tokens} tokens) + max_tokens ({n}) exceeds the model's context of "
                f"{s.max_model_len} tokens", "invalid_request_error", 400))
        usage = {"prompt_tokens": tokens, "completion_tokens": n, "total_tokens": n + tokens}
        def due(k: int) -> float:
            return arrived + (ttft_ms + k * s.itl_ms
                              + (s.stall_ms if k >= max(1, n // 2) else 0.0)) / 1000

        if not body.get("stream"):
            time.sleep(max(0.0, due(n - 1) - time.monotonic()))
            choice = {"message": {"role": "assistant", "content": "tok" * n}} if chat \
                else {"text": "tok" * n}
            return self._json(200, {"id": "scripted", "object": "completion", "usage": usage,
                                    "choices": [{"index": 0, **choice, "token_ids": list(range(n)),
                                                 "finish_reason": "length"}]})
        kind = "chat.completion.chunk" if chat else "text_completion"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for k in range(n):
            time.sleep(max(0.0, due(k) - time.monotonic()))
            timing["writes"].append(time.monotonic())
            piece: dict[str, Any] = {"delta": {"content": "tok"}} if chat else {"text": "tok"}
            if k == 0 and body.get("return_token_ids") and isinstance(prompt, list):
                piece["prompt_token_ids"] = prompt  # as vLLM echoes it: one long first event
            self._event({"id": "scripted", "object": kind, "choices": [{
                "index": 0, **piece, "token_ids": [k],
                "finish_reason": "length" if k == n - 1 else None}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            self._event({"id": "scripted", "object": kind, "choices": [], "usage": usage})
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _event(self, obj: dict[str, Any]) -> None:
        self._chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


class ScriptedServer(ThreadingHTTPServer):
    """Serves `script` on (host, port); `serve_forever()` to run, `shutdown()` to stop."""

    daemon_threads = True
    request_queue_size = 1024  # a burst of new connections must not be dropped

    def __init__(self, script: Script, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__((host, port), _Handler)
        self.script, self.lock = script, threading.Lock()
        self.received: list[dict[str, Any]] = []  # each request's body, as it came
        self.in_flight, self.idle_since = 0, time.monotonic()  # for Script.wake_ms_per_s


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8100)
    ap.add_argument("--ttft-ms", type=float, default=100.0)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--fail-every", type=int, default=0)
    ap.add_argument("--wake-ms-per-s", type=float, default=0.0)
    ap.add_argument("--stall-ms", type=float, default=0.0)
    ap.add_argument("--max-model-len", type=int, default=0)
    ap.add_argument("--unlisted-context", action="store_true",
                    help="leave max_model_len out of /v1/models")
    a = ap.parse_args(argv)
    sys.setswitchinterval(2e-4)  # a thread due to write must not wait 5 ms for the GIL
    script = Script(a.ttft_ms, a.itl_ms, a.max_tokens, a.fail_every, a.wake_ms_per_s,
                    a.stall_ms, a.max_model_len, not a.unlisted_context)
    server = ScriptedServer(script, a.host, a.port)
    print(f"scripted server ready on http://{a.host}:{a.port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
