"""A conversation id is a field a client controls and the front copies into headers to its
instances (issue 56, items 2 and 7): one that is long, not ASCII or not printable is a 400
at the front, before anything goes upstream, and the instance stays in the rotation."""

import json
import socket
import urllib.error
import urllib.request

import pytest

from engine.fronts.proxy import Proxy
from tests.advisor.helpers import received, scripted
from tests.serving.helpers import running_app

pytestmark = pytest.mark.integration

BODY = {"model": "scripted", "prompt": [1, 2, 3], "max_tokens": 2}


def _post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url + "/v1/completions", body,
                                 {"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, {}
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _raw_header(url: str, value: bytes) -> bytes:
    """A request whose X-Conversation-Id is `value`, bytes as sent (no client re-encodes)."""
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps(BODY).encode()
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nX-Conversation-Id: " + value + b"\r\nContent-Length: "
                  + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
        return s.recv(65536)


def test_odd_conversation_ids_are_400s_and_eject_no_instance():
    with scripted(ttft_ms=1, itl_ms=1) as instance:
        proxy = Proxy([instance])
        with running_app(proxy.app) as url:
            for body in ({**BODY, "conversation_id": "c" * 9000},
                         {**BODY, "conversation_id": "a\x01b"},
                         {**BODY, "conversation_id": "café"},
                         {**BODY, "conversation_id": 7}):
                status, err = _post(url, json.dumps(body).encode())
                assert status == 400 and err["error"]["param"] == "conversation_id", body
            # a lone surrogate, as JSON may spell it
            status, _ = _post(url, b'{"model": "scripted", "prompt": [1], "max_tokens": 2, '
                                   b'"conversation_id": "\\ud800"}')
            assert status == 400
            status, _ = _post(url, json.dumps(BODY).encode(), {"X-Conversation-Id": "x" * 8000})
            assert status == 400
            assert _raw_header(url, b"\xff\xfe").startswith(b"HTTP/1.1 400")
            assert received(instance) == []  # nothing went upstream
            for _ in range(3):  # and ordinary requests are served, the instance in rotation
                assert _post(url, json.dumps({**BODY, "conversation_id": "ok-1"}).encode())[0] \
                    == 200
            assert not proxy.liveness.down
