"""What aiohttp's HTTP parser refuses before any handler runs (issue 67, item 7) is answered
as every other error of ours: an OpenAI-style JSON body, not aiohttp's text/plain that echoes
the request line back."""

import json
import socket
import urllib.parse

import pytest

from engine.processes.launch import serve_module

pytestmark = pytest.mark.integration
HOSTILE = (b"GET /<script>\x01 HTTP/1.1\r\nHost: x\r\n\r\n",
           b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: zz\r\n\r\n",
           b"NOT-A-METHOD\x7f / HTTP/1.1\r\n\r\n")


def answer(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(raw)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


def test_a_request_the_parser_refuses_gets_a_json_error_without_its_request_line():
    with serve_module("engine.fronts.render_server", ["--model", "tiny"]) as url:
        port = urllib.parse.urlsplit(url).port
        assert port is not None
        for raw in HOSTILE:
            status, headers, body = answer(port, raw)
            assert status == 400 and headers["content-type"].startswith("application/json")
            error = json.loads(body)["error"]
            assert error["type"] == "invalid_request_error" and error["code"] == 400
            assert b"script" not in body and b"NOT-A-METHOD" not in body
