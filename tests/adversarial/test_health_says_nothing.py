"""Finding 9, /health: a front's /health is open without the API key (as vLLM's), so it says
"ok" and nothing more: the internal instances' URLs once listed there stay unnamed."""

import json
import urllib.request

import pytest

from engine.fronts.proxy import Proxy
from engine.fronts.render_front import RenderFront
from tests.serving.helpers import running_app

pytestmark = pytest.mark.integration

INSIDE = ["http://127.0.0.1:18101", "http://127.0.0.1:18201"]


@pytest.mark.parametrize("front", [lambda: Proxy([INSIDE[1]], [INSIDE[0]]),
                                   lambda: Proxy(INSIDE),
                                   lambda: RenderFront(INSIDE[0], INSIDE[1])])
def test_a_fronts_health_names_no_instance(front):
    with running_app(front().app) as url, urllib.request.urlopen(url + "/health",
                                                                  timeout=10) as r:
        body = r.read()
    assert json.loads(body) == {"status": "ok"} and b"127.0.0.1" not in body
