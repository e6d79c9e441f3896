"""Real vLLM started as `advisor deploy` prints it (the sweep's scripts), checked against the
bundled engine on the same weights, and our P/D proxy against vLLM's own toy proxy in front
of the same instances: the same greedy tokens, and one NIXL transfer per request. With
bidirectional transfer (NixlConnector's bidirectional_kv_xfer, advisor proxy
--bidirectional), a later turn's prefiller pulls the earlier turn's KV, its reply included,
back from the decoder instead of computing it, read from vLLM's own counters."""

import json
import random
import subprocess
import urllib.request
from pathlib import Path

import pytest

from advisor.measure.prom import scrape_text
from advisor.measure.ready import wait_ready
from advisor.sweep.deployments import started, stop_group
from advisor.sweep.on_vllm import placements
from advisor.sweep.topologies import parse_topologies
from engine import SamplingParams
from engine.processes.children import free_port
from tests.engine.helpers import make_llm
from tests.vllm.conftest import MODEL

pytestmark = pytest.mark.slow
TOY_PROXY = Path(__file__).parents[3] / "shared" / "thirdparty" / "vllm" / "toy_proxy_server.py"
MAX_TOKENS = 16
REPLY = 320  # tokens: far over vLLM's recompute threshold (64), so they are pulled back


def prompts(n=3, seed=0):
    rng = random.Random(seed)
    return [[rng.randrange(3, 512) for _ in range(rng.randint(20, 300))] for _ in range(n)]


def reference(token_prompts):
    """The bundled engine's greedy tokens on the same weights (the mini preset, seed 0)."""
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
    return [o.token_ids for o in make_llm(model=MODEL).generate(token_prompts, params)]


def complete(url, prompt):
    body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": MAX_TOKENS,
                       "temperature": 0, "ignore_eos": True, "return_token_ids": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())["choices"][0]["token_ids"]


def transfers(metrics_url):
    for line in scrape_text([metrics_url]).splitlines():
        if line.startswith("vllm:nixl_xfer_time_seconds_count"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_collocated_script_is_the_bundled_engines_output(vllm_settings, tmp_path):
    [p] = placements(parse_topologies("collocated:1"), vllm_settings)
    ps = prompts(seed=2)
    with started(p, tmp_path, MODEL, None, 300):
        assert [complete(p.url, q) for q in ps] == reference(ps)


@pytest.fixture(scope="module")
def pd(vllm_settings, tmp_path_factory):
    """A 1P1D pair over NIXL with bidirectional transfer on, behind advisor proxy
    --bidirectional, as the sweep starts disagg-bidi:1p1d: one start-up (~50 s) for every
    test here; a request with no conversation id takes the plain P/D path. Stopped with the
    module, before the next starts vLLM again (instances that stay up slow the next ones'
    start-up on 2 cores several times over)."""
    [p] = placements(parse_topologies("disagg-bidi:1p1d"), vllm_settings)
    with started(p, tmp_path_factory.mktemp("logs"), MODEL, None, 300):
        yield p


def test_pd_through_advisor_proxy_is_the_bundled_engines_output(pd):
    ps = prompts()
    before = transfers(pd.metrics[1])
    assert [complete(pd.url, p) for p in ps] == reference(ps)
    assert transfers(pd.metrics[1]) - before == len(ps)  # the decoder pulled each prompt's KV


def test_vllms_toy_proxy_gives_the_same_tokens_as_ours(pd, vllm_settings):
    ps = prompts(seed=1)
    ours = [complete(pd.url, p) for p in ps]
    port = free_port()
    hosts_ports = []
    for flag, url in (("prefiller", pd.instances[0]), ("decoder", pd.instances[1])):
        hosts_ports += [f"--{flag}-hosts", "127.0.0.1", f"--{flag}-ports", url.rsplit(":", 1)[1]]
    toy = subprocess.Popen([vllm_settings.install.python, str(TOY_PROXY), "--port", str(port),
                            *hosts_ports], start_new_session=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, None, timeout_s=120, alive=lambda: None if toy.poll() is None
                   else f"toy proxy exited {toy.returncode}")
        before = transfers(pd.metrics[1])
        assert [complete(url, p) for p in ps] == ours
        assert transfers(pd.metrics[1]) - before == len(ps)
    finally:
        stop_group(toy, grace_s=5)


def turn(url, prompt, max_tokens, cid):
    body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True, "return_token_ids": True,
                       "conversation_id": cid}).encode()
    req = urllib.request.Request(url + "/v1/completions", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())["choices"][0]["token_ids"]


def computed(metrics_url) -> float:
    """Prompt tokens the instance computed itself, all requests so far."""
    for line in scrape_text([metrics_url]).splitlines():
        if line.startswith("vllm:request_prefill_kv_computed_tokens_sum"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no vllm:request_prefill_kv_computed_tokens in " + metrics_url)


def test_a_later_turn_pulls_the_reply_back_instead_of_computing_it(pd):
    assert "bidirectional_kv_xfer" in pd.cmd and "--bidirectional" in pd.cmd
    rng = random.Random(5)
    first = [rng.randrange(3, 512) for _ in range(200)]
    new = [rng.randrange(3, 512) for _ in range(24)]
    reply = turn(pd.url, first, REPLY, "conv-1")
    second = first + reply + new
    before = computed(pd.metrics[0])
    out = turn(pd.url, second, 16, "conv-1")
    on_prefiller = computed(pd.metrics[0]) - before
    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    assert out == make_llm(model=MODEL).generate([second], params)[0].token_ids
    assert on_prefiller < REPLY / 2, f"the prefiller computed {on_prefiller} of the turn's tokens"
