"""The measuring client holds only what it must, whatever the server it measures sends
(issue 56, item 6): an error body is read up to a cap, an event up to a cap, a stream up to
the tokens it asked for; a malformed chunk fails its own request, counted, and the run goes
on."""

import asyncio
import json
import subprocess
import sys

import pytest
from aiohttp import web

from tests.serving.helpers import running_app

pytestmark = pytest.mark.integration

GIB = 1 << 30


async def _huge_error(request: web.Request) -> web.StreamResponse:
    """A 1 GiB error body (a broken or hostile server), sent as fast as it is read."""
    await request.read()
    resp = web.StreamResponse(status=500)
    await resp.prepare(request)
    piece = b"x" * (1 << 20)
    try:
        for _ in range(GIB // len(piece)):
            await resp.write(piece)
    except (ConnectionError, asyncio.CancelledError):
        pass
    return resp


async def _stream(request: web.Request, events) -> web.StreamResponse:
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    try:
        for event in events():
            await resp.write(event)
    except (ConnectionError, asyncio.CancelledError):
        pass
    return resp


def _endless():
    """Content without end and no [DONE]."""
    while True:
        yield b'data: {"choices": [{"text": "tok"}]}\n\n'


def _unending_event():
    """One event whose data lines never end."""
    yield b'data: {"choices": [{"text": "tok"}]}\n'
    while True:
        yield b"data: " + b"y" * 65536 + b"\n"


def _malformed(chunk: dict):
    def events():
        yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"
    return events


def _streaming(events):
    async def handler(request: web.Request) -> web.StreamResponse:
        return await _stream(request, events)
    return handler


ROUTES = {
    "/error/v1/completions": _huge_error,
    "/endless/v1/completions": _streaming(_endless),
    "/event/v1/completions": _streaming(_unending_event),
    "/text/v1/completions": _streaming(_malformed({"choices": [{"text": 5}]})),
    "/choices/v1/completions": _streaming(_malformed({"choices": {"0": 1}})),
}

# the client measuring each route, then its errors and its own peak RSS (VmHWM, kB)
CLIENT = """import json, sys
from pathlib import Path
from advisor.measure.records import Endpoint
from advisor.measure.workload_run import measure
from tests.advisor.helpers import workload
out = {}
for route in sys.argv[2:]:
    run = measure(Endpoint(sys.argv[1] + route, "m", timeout_s=60), workload(n=3, out=5))
    out[route] = [r.error for r in run.records]
out["peak_kb"] = int(Path("/proc/self/status").read_text().split("VmHWM:")[1].split()[0])
print(json.dumps(out))
"""


@pytest.mark.timeout(300)
def test_what_a_server_sends_is_bounded_and_fails_its_request_alone():
    app = web.Application()
    for path, handler in ROUTES.items():
        app.router.add_post(path, handler)
    with running_app(app) as url:
        routes = [p.removesuffix("/v1/completions") for p in ROUTES]
        done = subprocess.run([sys.executable, "-c", CLIENT, url, *routes],
                              capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.splitlines()[-1])
    assert said.pop("peak_kb") < 300 << 10
    for route, errors in said.items():  # every request failed, each with its own reason
        assert len(errors) == 3 and all(errors), (route, errors)
    assert all("max_tokens" in e for e in said["/endless"])
    assert all("MiB" in e for e in said["/event"])
    assert all("malformed" in e for e in said["/text"] + said["/choices"])
