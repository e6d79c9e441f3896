"""`--api-key` on the front: /v1/ and /inference/ need the bearer token, /health and
/metrics do not, the internal instances never see it (they want the deployment's own key
instead, which only its processes hold), and no process shows either in argv."""

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from advisor.measure.records import Endpoint
from advisor.measure.workload_run import measure
from engine.processes.launch import Topology, launch
from workloads.presets import preset

pytestmark = pytest.mark.integration  # starts servers

KEY = "s3cret-key"
BODY = json.dumps({"prompt": [5, 6, 7], "max_tokens": 2}).encode()


def call(url: str, path: str, token: str | None = None, data: bytes | None = BODY):
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture(scope="module", params=["collocated", "render"])
def deployment(request):
    topo = Topology(mode=request.param, replicas=1, dtype="float32", api_key=KEY)
    with launch(topo) as d:
        yield d


def test_the_front_wants_the_key_and_only_on_the_api(deployment):
    d = deployment
    path = "/v1/completions" if "both" in d.instance_urls else "/v1/chat/completions/render"
    for token in (None, "wrong", KEY + "x"):
        status, body = call(d.url, path, token)
        assert status == 401, token
        err = json.loads(body)["error"]
        assert err["type"] == "authentication_error" and err["code"] == 401
    assert call(d.url, "/v1/models", None, data=None)[0] == 401
    assert call(d.url, "/health", None, data=None)[0] == 200
    assert call(d.url, "/metrics", None, data=None)[0] == 200
    assert call(d.url, "/v1/models", KEY, data=None)[0] == 200
    if "both" in d.instance_urls:
        assert call(d.url, path, KEY)[0] == 200
        (inner,) = d.instance_urls["both"]
        for token in (None, KEY):  # the user's key opens the front, not the instances
            assert call(inner, path, token)[0] == 401
        assert call(inner, path, d.instance_key)[0] == 200
        assert call(inner, "/health", None, data=None)[0] == 200
    for p in d.processes if d.children else []:
        argv = Path(f"/proc/{p.pid}/cmdline").read_text()
        assert KEY not in argv and (d.secret is None or d.secret not in argv)


def test_the_bench_client_sends_the_key(deployment):
    d = deployment
    if "both" not in d.instance_urls:
        pytest.skip("the render tier generates nothing to measure")
    w = preset("long-prompt", 0, scale=0.002, rate=50.0, num_prompts=3, output_scale=0.01)
    good = measure(Endpoint(d.url, "tiny", api_key=KEY, ignore_eos=True), w)
    assert all(r.error is None for r in good.records)
    bad = measure(Endpoint(d.url, "tiny", api_key="nope", ignore_eos=True), w)
    assert [r.error for r in bad.records] == ["invalid or missing API key"] * 3


def test_what_aiohttp_itself_refuses_is_an_openai_error_too(deployment):
    d = deployment
    for path, data, code in (("/v1/nothing-here", BODY, 404), ("/nothing", None, 404),
                             ("/v1/models", BODY, 405)):
        status, body = call(d.url, path, KEY, data=data)
        err = json.loads(body)["error"]
        assert status == code == err["code"] and err["type"] == "invalid_request_error", body
        assert path in err["message"]
