"""Real vLLM started as `advisor deploy` prints it (the sweep's scripts), checked against the
bundled engine on the same weights, and our P/D proxy against vLLM's own toy proxy in front
of the same instances: the same greedy tokens, and one NIXL transfer per request. With
bidirectional transfer (NixlConnector's bidirectional_kv_xfer, advisor proxy
--bidirectional), a later turn's prefiller pulls the earlier turn's KV, its reply included,
back from the decoder instead of computing it, read from vLLM's own counters. `advisor bench
--save-result` and `vllm bench serve` against the same instance write the same keys and
agree on the medians."""

import random
import subprocess
import time
from pathlib import Path

import pytest

from advisor.engines.processes import started, stop_group
from advisor.engines.topologies import parse_topologies
from advisor.engines.vllm.placements import placements
from advisor.measure.prom import scrape_text
from advisor.measure.ready import wait_ready
from engine import SamplingParams
from engine.processes.children import free_port
from tests.engine.helpers import make_llm
from tests.vllm.client import MAX_TOKENS, MODEL, complete, prompts

pytestmark = pytest.mark.slow
TOY_PROXY = Path(__file__).parents[3] / "shared" / "thirdparty" / "vllm" / "toy_proxy_server.py"
REPLY = 320  # tokens: far over vLLM's recompute threshold (64), so they are pulled back
MEDIANS = ("median_ttft_ms", "median_tpot_ms", "median_itl_ms")
# NOTE: a known bias, not noise: on a Zen 4 host (gaps of ~3 ms) advisor bench's median ITL
# and TPOT read 0.5-0.9 ms above vllm bench serve's, in every run of this tier there, before
# the 2026-12-07 changes as after (docs/measurements.md); the client's event timing is
# issue 66's to fix, and until then a gap's median may differ by this much
GAP_BIAS_MS = 1.0


def reference(token_prompts):
    """The bundled engine's greedy tokens on the same weights (the mini preset, seed 0)."""
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
    return [o.token_ids for o in make_llm(model=MODEL).generate(token_prompts, params)]


def transfers(metrics_url):
    for line in scrape_text([metrics_url]).splitlines():
        if line.startswith("vllm:nixl_xfer_time_seconds_count"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def transfers_since(metrics_url, before: float, want: int, within_s: float = 30.0) -> float:
    """The decoder's NIXL transfers since `before`, read until `want` of them show or
    `within_s` passes: vLLM counts them in its periodic stats, after the responses end."""
    deadline = time.monotonic() + within_s
    while True:
        got = transfers(metrics_url) - before
        if got >= want or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def test_collocated_script_is_the_bundled_engines_output(single):
    assert single.completions == reference(prompts(seed=2))


def test_advisor_bench_and_vllm_bench_serve_agree(single):
    """The same keys but those vLLM keeps and we do not (generated texts, and the detailed
    lists without --save-detailed, which vLLM writes anyway); each median within the band
    the two tools' repeats span."""
    ours, theirs = single.bench["advisor"], single.bench["vllm"]
    assert set(theirs[0]) - set(ours[0]) <= {"generated_texts", "input_lens", "output_lens",
                                             "ttfts", "itls", "start_times", "errors"}
    assert set(ours[0]) <= set(theirs[0])
    for run in ours + theirs:
        assert (run["completed"], run["failed"]) == (24, 0)
        assert run["total_output_tokens"] == 24 * 16
    for key in MEDIANS:
        a, v = [r[key] for r in ours], [r[key] for r in theirs]
        band = max(max(a) - min(a), max(v) - min(v), 0.1 * max(a + v),
                   GAP_BIAS_MS if key != "median_ttft_ms" else 0.0)
        assert abs(sum(a) / len(a) - sum(v) / len(v)) <= band, (key, a, v)


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
    # the decoder pulled each prompt's KV
    assert transfers_since(pd.metrics[1], before, len(ps)) == len(ps)


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
        assert transfers_since(pd.metrics[1], before, len(ps)) == len(ps)
    finally:
        stop_group(toy, grace_s=5)


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
    reply = complete(pd.url, first, REPLY, conversation_id="conv-1")
    second = first + reply + new
    before = computed(pd.metrics[0])
    out = complete(pd.url, second, 16, conversation_id="conv-1")
    on_prefiller = computed(pd.metrics[0]) - before
    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    assert out == make_llm(model=MODEL).generate([second], params)[0].token_ids
    assert on_prefiller < REPLY / 2, f"the prefiller computed {on_prefiller} of the turn's tokens"
