"""The planner's precisions: weights in fp8, bf16 or int4 and the KV cache in fp8 or bf16
change what is read each step, what fits, what P/D moves, and FP8 computes on FP8 tensor
cores where the GPU has them (and is refused where it has none)."""

import json
from dataclasses import replace

import pytest

from advisor.plan import candidates, hardware
from advisor.plan.candidates import Candidate, kv_tokens
from advisor.plan.options import PlanOptions
from advisor.plan.plan import _setup, label
from advisor.plan.steptime import RooflineStep, Step, prefill_step
from advisor.probe.links import LINKS
from advisor.probe.shapes import shape_of
from advisor.rundata.slo import DEFAULT_SLO
from tests.cli import advisor, advisor_here

pytestmark = pytest.mark.unit


def test_fp8_kv_halves_the_bytes_per_token_and_the_transfer():
    shape, g = shape_of("llama-3.1-8b"), hardware.gpu("h100-sxm")
    assert shape.kv_bytes_per_token("fp8") * 2 == shape.kv_bytes_per_token("bfloat16")
    c = Candidate("disagg-1p1d", "disagg", 1, prefill=1, decode=1)
    link = LINKS["rdma-100g"]
    bf16 = candidates.system(c, shape, g, link)
    fp8 = candidates.system(c, shape, g, link, kv_dtype="fp8")
    assert fp8.kv_bytes(8192) * 2 == bf16.kv_bytes(8192)
    assert link.seconds(fp8.kv_bytes(8192)) < link.seconds(bf16.kv_bytes(8192))
    # the same memory holds twice the tokens
    assert kv_tokens(shape, g, 1, "bfloat16", "fp8") == pytest.approx(
        2 * kv_tokens(shape, g, 1, "bfloat16"), abs=1)


def test_fp8_weights_read_half_the_bytes_and_compute_at_fp8_peak():
    shape, g = shape_of("llama-3.1-8b"), hardware.gpu("h100-sxm")
    bf16, fp8 = RooflineStep(shape, g), RooflineStep(shape, g, dtype="fp8")
    decode = Step(decodes=1, pairs=1000, kv_read_tokens=1000)  # memory bound: the weights
    ratio = (fp8.ms(decode) - 1.5) / (bf16.ms(decode) - 1.5)  # less the fixed overhead
    assert 0.5 < ratio < 0.6
    chunk = prefill_step(8192)  # compute bound: the GEMMs at FP8's peak, attention in bf16
    assert fp8.ms(chunk) < 0.75 * bf16.ms(chunk)
    int4 = RooflineStep(shape, g, dtype="int4")
    assert int4.ms(decode) < fp8.ms(decode) and int4.ms(chunk) == pytest.approx(bf16.ms(chunk))
    assert "fp8 peak" in fp8.source


def test_the_weights_precision_comes_from_the_models_config(tmp_path):
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 1024,
           "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
           "intermediate_size": 2048, "vocab_size": 32000,
           "max_position_embeddings": 8192, "quantization_config": {"quant_method": "fp8"}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert shape_of(str(tmp_path)).weights == "fp8"
    s = _setup(PlanOptions(model=str(tmp_path), gpu="h100-sxm"))
    assert (s.weights, s.kv) == ("fp8", "bfloat16")
    assert "weights fp8, KV cache bf16" in label(s)
    s = _setup(PlanOptions(model=str(tmp_path), gpu="h100-sxm", weights="bf16",
                           kv_dtype="fp8"))
    assert (s.weights, s.kv) == ("bfloat16", "fp8")


def test_fp8_on_a_gpu_without_fp8_tensor_cores_is_refused_naming_it(tmp_path):
    p = advisor("plan", "--gpu", "a100-80gb", "--weights", "fp8", "--out", tmp_path)
    assert p.returncode == 2 and "the a100-80gb has no FP8 tensor cores" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not list(tmp_path.iterdir())
    p = advisor_here("plan", "--weights", "fp4", "--out", tmp_path)
    assert p.returncode == 2 and "--weights must be one of fp8, bf16, int4" in p.stderr
    p = advisor_here("plan", "--kv-dtype", "int4", "--out", tmp_path)
    assert p.returncode == 2 and "--kv-dtype must be one of fp8, bf16" in p.stderr


def test_the_pareto_frontier_and_the_choice():
    from advisor.plan.pareto import points, reason
    from advisor.rundata.stats import Latency, RunStats

    def stats(tpot_ms, tokens_s, goodput):
        return RunStats(10, 0, 1.0, output_throughput=tokens_s, request_goodput=goodput,
                        latency={"tpot": Latency(tpot_ms, tpot_ms, 0.0)})

    got = points([("a", 1.0, stats(10, 400, 4), 2, True),   # 100/user, 200/GPU
                  ("a", 2.0, stats(20, 800, 2), 2, False),  # 50/user, 400/GPU, misses
                  ("b", 1.0, stats(25, 300, 3), 2, True),   # beaten by a@1 on both
                  ("b", 2.0, stats(12.5, 600, 5), 2, True),  # 80/user, 300/GPU: on it
                  ("c", 1.0, stats(0, 0, 0), 2, False)])    # completed nothing: left out
    assert [(p.placement, p.rate_rps, p.frontier) for p in got] == [
        ("a", 1.0, True), ("a", 2.0, True), ("b", 1.0, False), ("b", 2.0, True)]
    assert [p.placement + str(p.rate_rps) for p in got if p.chosen] == ["b2.0"]  # 2.5/GPU
    assert "b at 2 req/s has the most goodput per GPU (2.5 req/s" in reason(got)


def test_an_moe_step_reads_the_experts_its_tokens_touch():
    """Against its dense twin of the same total size: far fewer bytes at batch 1, the same
    once a batch touches every expert; its compute is always its active parameters'."""
    from dataclasses import replace

    moe = shape_of("qwen3-235b-a22b")
    assert (moe.experts, moe.experts_per_token) == (128, 8)
    assert 230e9 < moe.params < 240e9 and 20e9 < moe.active_params < 24e9  # its model card
    dense = replace(moe, experts=0, experts_per_token=0, expert_params=0.0)
    assert moe.weight_bytes_read(1) < 0.2 * dense.weight_bytes_read(1)
    reads = [moe.weight_bytes_read(t) for t in (1, 8, 64, 512)]
    assert reads == sorted(reads)  # more tokens, more experts touched
    assert moe.weight_bytes_read(4096) == pytest.approx(dense.weight_bytes_read(4096),
                                                        rel=1e-6)
    g = hardware.gpu("mi300x")
    one = Step(decodes=1, pairs=1000, kv_read_tokens=1000)
    assert RooflineStep(moe, g, 8, dtype="fp8").ms(one) < \
        0.3 * RooflineStep(dense, g, 8, dtype="fp8").ms(one)


def test_a_moe_config_json_is_read_as_one(tmp_path):
    cfg = {"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048,
           "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
           "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
           "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936,
           "max_position_embeddings": 40960}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    shape = shape_of(str(tmp_path))  # Qwen3-30B-A3B's shapes
    assert shape.experts == 128 and 28e9 < shape.params < 32e9 and 2.5e9 < shape.active_params < 4e9


def test_sliding_window_layers_cache_a_window_not_every_token(tmp_path):
    # gpt-oss-120b's config.json: half its 36 layers attend over 128 tokens, its experts MXFP4
    cfg = {"architectures": ["GptOssForCausalLM"], "hidden_size": 2880,
           "num_hidden_layers": 36, "num_attention_heads": 64, "num_key_value_heads": 8,
           "head_dim": 64, "intermediate_size": 2880, "num_local_experts": 128,
           "num_experts_per_tok": 4, "vocab_size": 201088, "sliding_window": 128,
           "max_position_embeddings": 131072,
           "layer_types": ["sliding_attention", "full_attention"] * 18,
           "quantization_config": {"quant_method": "mxfp4"}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    shape = shape_of(str(tmp_path))
    assert replace(shape, name="gpt-oss-120b") == shape_of("gpt-oss-120b")  # its preset
    per_token = 18 * 2 * 8 * 64 * 2  # the full-attention layers' K and V, bf16
    window = 18 * 128 * 2 * 8 * 64 * 2  # the sliding layers': 128 tokens each, whatever the prompt
    assert shape.kv_bytes_per_token("bfloat16") == per_token
    assert shape.kv_bytes(10_000, "bfloat16") == 10_000 * per_token + window
    assert shape.weights == "int4" and shape.experts == 128
    assert 110e9 < shape.params < 120e9  # its card: ~117B


def test_a_two_node_pd_moves_its_kv_over_the_inter_node_link(tmp_path):
    two = _setup(PlanOptions(model="llama-3.1-8b", gpu="h100-sxm", gpus=8, nodes=2,
                             inter_node="rdma-100g"))
    assert all(c.gpus == 16 and max(c.tp, c.dtp) <= 8 for c in two.candidates)
    split = next(c for c in two.candidates if c.name == "disagg-8p8d")  # P on one, D on other
    assert candidates.crossing(split, 8) == 1.0 and two.link_for(split)[0].name == "rdma-100g"
    inside = next(c for c in two.candidates if c.name == "disagg-4p12d")
    assert 0 < candidates.crossing(inside, 8) < 1  # some pairs on one node, some across
    mixed = next(c for c in two.candidates if c.name == "disagg-1p6d-tp4-2")
    assert candidates.crossing(mixed, 8) == pytest.approx(4 / 6)  # D on GPUs 4 and 6 stay
    assert "KV crossing nodes over rdma-100g" in label(two)
    assert two.link_for(two.candidates[0])[0].name == "nvlink"  # collocated: within a node
    p = advisor_here("plan", "--nodes", "2", "--inter-node", "pigeon", "--out", tmp_path)
    assert p.returncode == 2 and "--inter-node 'pigeon'" in p.stderr


def test_many_placements_are_screened_and_the_best_of_each_kind_kept(monkeypatch):
    from advisor.plan import screen
    from workloads.presets import preset_spec

    shape, g = shape_of("llama-3.1-8b"), hardware.gpu("h100-sxm")
    found = candidates.candidates(shape, g, 8)  # 25 placements

    def system_of(c):
        return candidates.system(c, shape, g, LINKS["nvlink"])

    monkeypatch.setattr(screen, "SCREEN_REQUESTS", 60)
    seen: list[str] = []
    kept, per_gpu = screen.finalists(found, system_of, preset_spec("short-chat"), [8.0, 32.0],
                                     DEFAULT_SLO, 0.9, 0, seen.append)
    assert set(per_gpu) == {c.name for c in found} and seen
    assert [c.kind for c in kept].count("collocated") == screen.FINALISTS
    assert [c.kind for c in kept].count("disagg") == screen.FINALISTS
    for kind in ("collocated", "disagg"):  # none left out beat one kept
        low = min(per_gpu[c.name] for c in kept if c.kind == kind)
        assert all(per_gpu[c.name] <= low for c in found if c.kind == kind and c not in kept)
    few = found[:screen.SCREEN_ABOVE]
    assert screen.finalists(few, system_of, None, [], DEFAULT_SLO, 0.9, 0, seen.append) == (few, {})


@pytest.mark.parametrize("knee,found", [(7, 7.0), (0, None), (10, 10.0), (1, 1.0)])
def test_screening_bisects_the_rates_for_the_highest_that_meets(knee, found):
    from advisor.plan.screen import highest

    tried: list[float] = []

    def meets(rate):
        tried.append(rate)
        return rate <= knee

    assert highest([float(r) for r in range(1, 11)], meets) == found
    assert len(tried) <= 4 and len(set(tried)) == len(tried)  # log2(11) tries, none twice


def test_tp_with_ep_all_reduces_as_a_dense_model_and_dp_attention_pays_an_all_to_all():
    from dataclasses import replace

    moe, g = shape_of("qwen3-235b-a22b"), hardware.gpu("mi300x")
    dense_shape = replace(moe, experts=0, experts_per_token=0, expert_params=0.0)
    fabric = hardware.tp_fabric(g, 8)

    def exchanged(shape, layout, step):
        with_fabric = RooflineStep(shape, g, 8, fabric, "fp8", layout=layout)
        return with_fabric.ms(step) - RooflineStep(shape, g, 8, None, "fp8",
                                                  layout=layout).ms(step)

    one, many = prefill_step(16), prefill_step(8192)
    # TP + EP at DP 1: two all-reduces a layer, byte for byte a dense model's
    assert exchanged(moe, "tp", many) == pytest.approx(exchanged(dense_shape, "tp", many))
    hop = 94 * 2 * fabric.latency_ms  # a latency per exchange, two a layer
    ring = hop + 94 * 2 * (8192 * 4096 * 2 * 2 * 7 / 8) / (fabric.gbps * 1e9) * 1000
    assert exchanged(moe, "tp", many) == pytest.approx(ring, rel=0.01)
    # DP attention + EP: dispatch and combine, each token's activations to k = 8 experts'
    # ranks, an eighth of them each
    a2a = hop + 94 * 2 * (8192 * 8 * 4096 * 2 * 7 / 8 / 8) / (fabric.gbps * 1e9) * 1000
    assert exchanged(moe, "dp", many) == pytest.approx(a2a, rel=0.01)
    assert exchanged(moe, "dp", many) > exchanged(moe, "dp", one) > 0
    # a TP group of 8 MI300X exchanges over 7 links of 64 GB/s; of 4, over 3
    assert fabric.gbps == pytest.approx(0.8 * 7 * 64)
    assert hardware.tp_fabric(g, 4).gbps == pytest.approx(0.8 * 3 * 64)
    assert hardware.tp_fabric(hardware.gpu("h200"), 4).name == "nvlink"
