"""Finding 9, /health: a front's /health is open without the API key (as vLLM's), so it says
"ok" and nothing more: the internal instances' URLs once listed there stay unnamed. A P/D
or round-robin front says it is up only once an instance is: a sweep started beside
instances that still load waits for them (issue 55)."""

import json
import time
import urllib.error
import urllib.request

import pytest

from engine.fronts.proxy import Proxy
from engine.fronts.render_front import RenderFront
from tests.advisor.helpers import scripted
from tests.serving.helpers import running_app

pytestmark = pytest.mark.integration

INSIDE = ["http://127.0.0.1:18101", "http://127.0.0.1:18201"]


@pytest.mark.parametrize("front", [lambda: Proxy([INSIDE[1]], [INSIDE[0]]),
                                   lambda: Proxy(INSIDE),
                                   lambda: RenderFront(INSIDE[0], INSIDE[1])])
def test_a_fronts_health_names_no_instance(front):
    with running_app(front().app) as url:
        status, body = _health(url)
    assert b"127.0.0.1" not in body
    # no instance answers at INSIDE: the proxy is not up (the render front asks none)
    assert (status, json.loads(body)) == (200, {"status": "ok"}) or status == 503


def _health(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url + "/health", timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_a_proxy_is_up_once_an_instance_is_and_not_before():
    with scripted(ttft_ms=1, itl_ms=1) as instance, running_app(Proxy([instance]).app) as up, \
                running_app(Proxy([INSIDE[0]]).app) as none_up:
        deadline = time.monotonic() + 5
        while _health(up)[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _health(up) == (200, b'{"status": "ok"}')
        status, body = _health(none_up)
    assert status == 503 and "no instance is up" in json.loads(body)["error"]["message"]
