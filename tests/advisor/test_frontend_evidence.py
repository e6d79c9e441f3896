"""Front-end CPU from the servers' counters into the sweep's evidence, and the chat workload
that exercises it (long chat prompts with tools, over the chat API)."""

import json
import statistics
import time

import pytest

from advisor.measure.client import text_of
from advisor.measure.prom import FrontendTotals, parse_frontend
from advisor.measure.records import CHAT, Endpoint
from advisor.measure.workload_run import measure
from advisor.sweep.options import SweepOptions
from engine.render.frontend import Frontend, FrontendConfig
from engine.render.protocol import parse_request
from tests.advisor.helpers import received, scripted
from tests.cli import advisor
from workloads.presets import AGENT_TOOLS, preset, seed_for

pytestmark = pytest.mark.integration  # starts servers or runs the CLI

ENGINE_TEXT = """# TYPE engine:frontend_cpu_seconds_total counter
engine:frontend_cpu_seconds_total{model_name="m",stage="render"} 1.5
engine:frontend_cpu_seconds_total{model_name="m",stage="derender"} 0.25
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 10.0
"""
VLLM_TEXT = "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3.0\n"


def test_front_end_counters_sum_over_instances_and_vllm_reports_none():
    assert parse_frontend(ENGINE_TEXT + ENGINE_TEXT) == FrontendTotals(3.0, 0.5, 20.0)
    assert parse_frontend(VLLM_TEXT) is None
    assert FrontendTotals(3.0, 0.5, 20.0).minus(FrontendTotals(1.0, 0.5, 5.0)) == \
        FrontendTotals(2.0, 0.0, 15.0)


def test_the_chat_agent_workload_sends_text_messages_with_its_tools():
    w = preset("chat-agent", 0, scale=0.01, rate=50.0, num_prompts=3)
    assert w.chat and w.tools == list(AGENT_TOOLS)
    with scripted(ttft_ms=5, itl_ms=1) as url:
        run = measure(Endpoint(url, "scripted", path=CHAT), w)
        bodies = [r["body"] for r in received(url)]
    assert all(r.ok for r in run.records) and len(bodies) == 3
    assert all(b["tools"] == list(AGENT_TOOLS) for b in bodies)
    assert sorted(b["messages"][0]["content"] for b in bodies) == \
        sorted(text_of(c.turns[0].new_tokens) for c in w.conversations)


@pytest.mark.slow  # a whole sweep
def test_a_sweep_records_the_front_ends_measured_cpu_in_its_evidence(tmp_path):
    p = advisor("sweep", "--model", "tiny", "--dtype", "float32", "--workload", "chat-agent",
                "--topologies", "collocated:1", "--rates", "2", "--num-prompts", "6",
                "--scale", "0.02", "--out", str(tmp_path), "--no-report")
    assert p.returncode == 0, p.stderr
    (run,) = [d for d in tmp_path.iterdir() if d.is_dir()]
    fe = json.loads((run / "evidence.json").read_text())["frontend"]
    assert fe["requests"] == 6 and fe["placement"] == "collocated-1"
    assert 0 < fe["cpu_share"] < 1
    assert fe["cpu_ms_per_request"] == pytest.approx(
        fe["render_ms_per_request"] + fe["derender_ms_per_request"]
    )
    rec = json.loads((run / "recommendation.json").read_text())
    (row,) = [r for r in rec["rows"] if r["id"] == "frontend_cpu_heavy"]
    assert row["evidence"]["frontend_cpu_share"] == fe["cpu_share"]
    # ground truth: the same requests rendered here, timed the same way: each once, as the
    # server does (rendering one prompt again and again would time a warm tokenizer cache),
    # after a warm-up render of other prompts, as the sweep's warm-up does
    opts = SweepOptions(workload="chat-agent", scale=0.02, model="tiny")

    def chat(conv, tools):
        body = {"messages": [{"role": "user", "content": text_of(conv.turns[0].new_tokens)}],
                "tools": tools}
        return parse_request(body, True, "tiny")

    front = Frontend(FrontendConfig())
    warm = opts.workload_at(1000.0, seed_for(0, 0.0) + 1, 2)
    for conv in warm.conversations:
        front.prompt_ids(chat(conv, warm.tools))
    w = opts.workload_at(2.0, seed_for(0, 2.0), 6)
    costs = []
    for conv in w.conversations:
        req = chat(conv, w.tools)
        start = time.thread_time()
        front.prompt_ids(req)
        costs.append((time.thread_time() - start) * 1000)
    # NOTE: in the server the render shares its core with the model's GEMMs (one core per
    # instance) and costs more CPU time than alone here: 2-6x with `tokenizers` encoding,
    # 5.5-13x since tiktoken cut the encode to ~0.2 ms here (the server's figure moved
    # less: 1.3-2.2 ms in this sweep, 0.23-0.46 ms for requests sent one at a time);
    # measured on a 2-core Xeon, the cause not profiled. The bound checks
    # the counter's plumbing (stage, units, per-request division), which a mistake would
    # move by 1000x or to 0
    ratio = fe["render_ms_per_request"] / statistics.mean(costs)
    assert 0.25 < ratio < 40, (fe["render_ms_per_request"], costs)
