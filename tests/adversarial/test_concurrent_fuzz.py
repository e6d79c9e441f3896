"""Hostile and random bodies at every HTTP surface while legitimate traffic runs on it: no
5xx, the legitimate streams end normally with all their tokens, and every KV pool is back
to full afterwards. Surfaces: an engine instance, the P/D proxy, the round-robin front,
the render server; the generate paths include /inference/v1/generate."""

import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.fronts.render_server import RenderServer
from engine.processes.launch import Topology, launch
from engine.render.frontend import FrontendConfig
from tests.serving.helpers import blocks_in_use, post_stream, running_app

pytestmark = pytest.mark.integration  # starts servers

GENERATE = ("/v1/completions", "/v1/chat/completions", "/inference/v1/generate")
RENDER = ("/v1/chat/completions/render", "/v1/chat/completions/derender")
STREAM_TOKENS = 60

scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=30))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=16)
FIELDS = ["prompt", "messages", "max_tokens", "temperature", "top_p", "top_k", "seed", "stream",
          "stream_options", "ignore_eos", "n", "stop", "logit_bias", "tools", "tool_choice",
          "token_ids", "sampling_params", "kv_transfer_params", "stream_state", "model"]
# what earlier versions fell over on, by name (issue: hardening)
HOSTILE = [b"[" * 100_000, b"{" * 5_000, b'{"prompt": "' + b"a" * 200_000 + b'"',
           json.dumps({"prompt": [5, 6], "max_tokens": 2, "seed": 2**64}).encode(),
           json.dumps({"prompt": [5, 6], "max_tokens": 2, "temperature": 1e-40}).encode(),
           json.dumps({"prompt": [5, 6], "max_tokens": 2, "kv_transfer_params":
                       {"do_remote_decode": True}}).encode(),
           json.dumps({"prompt": [5, 6], "max_tokens": 2, "kv_transfer_params":
                       {"do_remote_prefill": True, "remote_host": "127.0.0.1",
                        "remote_port": 70000, "remote_request_id": "x"}}).encode(),
           json.dumps({"messages": [{"role": "assistant", "content": "x"}],
                       "stream_state": {"pending_ids": [-1, 10**12]}}).encode(),
           b"\xff\xfe\x00", b""]
bodies = (st.sampled_from(HOSTILE)
          | st.dictionaries(st.sampled_from(FIELDS), values, max_size=6).map(
              lambda d: json.dumps(_short(d)).encode())
          | values.map(lambda v: json.dumps(v).encode())
          | st.binary(max_size=64))


def _short(body: dict) -> dict:
    if isinstance(body.get("max_tokens"), int):  # keep accidental valid requests short
        body["max_tokens"] = max(-5, min(body["max_tokens"], 4))
    return body


def _status(url: str, data: bytes) -> int:
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        e.read()
        return e.code


class Traffic:
    """Legitimate requests back to back on a thread until stopped; keeps what went wrong."""

    def __init__(self, one):
        self.one, self.done, self.errors = one, 0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.one()
                self.done += 1
            except Exception as e:
                self.errors.append(repr(e))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(60)


def _fuzz(base: str, paths: tuple[str, ...], examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(body=bodies, path=st.sampled_from(paths))
    def one(body, path):
        assert _status(base + path, body) < 500, (path, body[:200])

    one()


def _stream_once(base: str):
    def one():
        body = {"prompt": list(range(5, 40)), "max_tokens": STREAM_TOKENS, "ignore_eos": True,
                "stream": True, "temperature": 0}
        events = post_stream(base, body, "/v1/completions")
        tokens = [t for e in events for c in e["choices"] for t in c.get("token_ids") or []]
        assert len(tokens) == STREAM_TOKENS, len(tokens)
    return one


def _pool_is_full(instance: str, within_s: float = 15) -> None:
    deadline = time.monotonic() + within_s
    while used := blocks_in_use(instance):
        assert time.monotonic() < deadline, f"{instance}: {used:g} blocks still in use"
        time.sleep(0.5)


@pytest.fixture(scope="module", params=["disagg", "collocated"])
def deployment(request):
    topo = Topology(mode=request.param, replicas=1, dtype="float32", kv_lease_duration=3.0)
    with launch(topo) as d:
        yield d


def test_fuzzing_the_front_and_an_instance_never_disturbs_a_running_stream(deployment):
    d = deployment
    instances = [u for us in d.instance_urls.values() for u in us]
    with Traffic(_stream_once(d.url)) as traffic:
        for base in (d.url, *instances):
            _fuzz(base, GENERATE, examples=60)
    assert traffic.errors == [] and traffic.done >= 2
    for inst in instances:
        _pool_is_full(inst)


def test_fuzzing_the_render_server_never_disturbs_a_running_render():
    server = RenderServer(FrontendConfig(None, None, "qwen3", "hermes"), "tiny")
    body = {"messages": [{"role": "user", "content": "Hello there"}]}

    with running_app(server.app) as base:
        def one():
            assert _status(base + RENDER[0], json.dumps(body).encode()) == 200

        with Traffic(one) as traffic:
            _fuzz(base, RENDER, examples=150)
    assert traffic.errors == [] and traffic.done >= 2


@pytest.mark.slow
def test_fuzzing_the_render_front_never_disturbs_a_running_chat_stream():
    """render-split: hostile bodies at the render front (chat through the render tier,
    completions and tokens straight to the engines) while a chat stream runs through it."""
    def one():
        body = {"messages": [{"role": "user", "content": "tell me"}], "max_tokens": STREAM_TOKENS,
                "ignore_eos": True, "stream": True, "temperature": 0}
        events = post_stream(d.url, body, "/v1/chat/completions")
        tokens = [t for e in events for c in e["choices"] for t in c.get("token_ids") or []]
        assert len(tokens) == STREAM_TOKENS, len(tokens)

    with launch(Topology(mode="render-split", replicas=1, dtype="float32")) as d:
        with Traffic(one) as traffic:
            _fuzz(d.url, GENERATE, examples=80)
        assert traffic.errors == [] and traffic.done >= 2
        for inst in d.instance_urls["both"]:
            _pool_is_full(inst)
