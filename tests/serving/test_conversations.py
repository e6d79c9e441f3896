"""Multi-turn conversations: each sticks to one replica (its prefix cache serves the next
turn), the engines count prompt tokens computed against reused, and every multi-turn run
reports its statistics turn by turn."""

import json
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.processes.launch import Topology, launch

pytestmark = pytest.mark.integration


def _post(url: str, body: dict, conversation: str | None) -> dict:
    headers = {"Content-Type": "application/json"}
    if conversation:
        headers["X-Conversation-Id"] = conversation
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), headers)
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def _counters(instance: str) -> dict[str, float]:
    with urllib.request.urlopen(instance + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name.startswith(("engine:prefill_tokens", "vllm:prompt_tokens"))
            and s.name.endswith("_total")}


def _turns(url: str, conversation: str | None, turns: int = 4) -> list[dict]:
    prompt, out = list(range(5, 45)), []
    for _ in range(turns):
        r = _post(url, {"model": "tiny", "prompt": prompt, "max_tokens": 4, "temperature": 0},
                  conversation)
        out.append(r)
        prompt = prompt + r["choices"][0]["token_ids"] + list(range(50, 70))  # reply + new text
    return out


@pytest.fixture(scope="module")
def deployment():
    with launch(Topology(mode="collocated", replicas=2, model="tiny", dtype="float32")) as d:
        yield d


def _counted(d, run) -> list[dict[str, float]]:
    """Each replica's counters grown while `run()` ran (the deployment is shared)."""
    before = [_counters(u) for u in d.instance_urls["both"]]
    run()
    after = [_counters(u) for u in d.instance_urls["both"]]
    return [{k: a[k] - b.get(k, 0.0) for k in a} for a, b in zip(after, before)]


def test_a_conversation_sticks_to_one_replica_whose_prefix_cache_serves_it(deployment):
    replies = []
    per = _counted(deployment, lambda: replies.extend(_turns(deployment.url, "conv-a")))
    used = [c for c in per if c["vllm:prompt_tokens_total"] > 0]
    assert len(used) == 1  # every turn on one replica
    c = used[0]
    assert c["vllm:prompt_tokens_total"] == sum(r["usage"]["prompt_tokens"] for r in replies)
    reused = sum(r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in replies)
    assert reused > 0 and c["engine:prefill_tokens_reused_total"] == reused
    assert c["engine:prefill_tokens_computed_total"] + reused == c["vllm:prompt_tokens_total"]


def test_without_a_conversation_id_requests_still_go_round_robin(deployment):
    per = _counted(deployment, lambda: _turns(deployment.url, None, turns=2))
    assert all(c["vllm:prompt_tokens_total"] > 0 for c in per)
