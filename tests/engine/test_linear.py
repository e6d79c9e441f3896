"""The packed small-batch linear computes what F.linear does, and only where it can."""

import pytest
import torch
import torch.nn.functional as F

from engine.core.config import PRESETS
from engine.model import linear as packed_linear
from engine.model.causal_lm import MLP
from engine.model.linear import SMALL_BATCH, Linear, pack, rows_for

needs_gate = pytest.mark.skipif(
    not packed_linear.can_gate(torch.zeros(2, 2, dtype=torch.bfloat16)),
    reason="oneDNN's bf16 epilogues are not in this build")


def _tiny_mlp() -> MLP:
    """`tiny`'s MLP in bfloat16 (weights unpacked: call pack_weights)."""
    return MLP(PRESETS["tiny"]).to(torch.bfloat16)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("rows", [1, 7, 24, SMALL_BATCH, SMALL_BATCH + 1])
def test_packed_linear_matches_f_linear(dtype, tol, rows):
    torch.manual_seed(rows)
    layer = Linear(96, 80, bias=True).to(dtype)
    x = torch.randn(rows, 96, dtype=dtype)
    want = F.linear(x, layer.weight, layer.bias).float()
    layer.pack_weights()
    if packed_linear.can_pack(layer.weight):
        assert layer.packed is not None
    got = layer(x).float()
    assert got.shape == (rows, 80)
    assert torch.allclose(got, want, atol=tol, rtol=tol)


def test_large_batches_and_unpackable_weights_use_f_linear(monkeypatch):
    layer = Linear(16, 8, bias=False)
    layer.pack_weights()
    half = Linear(16, 8, bias=False).to(torch.bfloat16)
    half.pack_weights()
    calls = []
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise",
                        lambda *a: calls.append(a[0].shape[0]) or a[0].new_zeros(a[0].shape[0], 8),
                        raising=False)
    layer(torch.randn(SMALL_BATCH + 1, 16))
    layer(torch.randn(packed_linear.GEMV_ROWS, 16))  # a float32 vector: torch's GEMV
    assert layer(torch.randn(3, 16)).shape == (3, 8)
    assert calls == ([4] if layer.packed is not None else [])  # 3 rows run padded to 4
    half(torch.randn(1, 16, dtype=torch.bfloat16))  # one bfloat16 row: torch's mv
    half(torch.randn(2, 16, dtype=torch.bfloat16))  # bfloat16 packs from 2 rows
    assert calls[1:] == ([2] if half.packed is not None else [])
    assert pack(torch.zeros(4, 4, dtype=torch.float16)) is None
    assert pack(torch.zeros(4, 4, device="meta")) is None


def test_packed_rows_come_in_a_few_sizes_and_padding_leaves_the_real_rows_alone():
    sizes = {rows_for(n) for n in range(1, SMALL_BATCH + 1)}
    assert sizes == {1, 2, 4, 8, *range(16, SMALL_BATCH + 1, 16)}
    assert all(rows_for(n) >= n for n in range(1, SMALL_BATCH + 1))
    # where oneDNN's 17-32-row kernel is the slow one, those batches run at 48 rows
    assert {rows_for(n, skip_32=True) for n in range(17, 49)} == {48}
    assert all(rows_for(n, skip_32=True) == rows_for(n) for n in (*range(1, 17), 49, 100))
    torch.manual_seed(0)
    layer = Linear(64, 32, bias=False)
    layer.pack_weights()
    x = torch.randn(40, 64)
    assert torch.equal(layer(x[:37]), layer(x[:37]))  # one shape per size: deterministic
    assert torch.allclose(layer(x[:37]), F.linear(x[:37], layer.weight), atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packing_builds_the_kernel_of_every_row_count_a_batch_will_run_at(monkeypatch, dtype):
    seen = []
    real = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise",
                        lambda *a: seen.append(a[0].shape[0]) or real(*a), raising=False)
    layer = Linear(16, 8, bias=True).to(dtype)
    layer.pack_weights()
    if layer.packed is None:
        pytest.skip("no packed kernel in this torch build")
    built, seen[:] = set(seen), []
    for n in range(1, SMALL_BATCH + 1):
        layer(torch.randn(n, 16, dtype=dtype))
    assert set(seen) <= built and len(built) <= 12  # nothing new is built inside a step


def test_prefill_sized_rows_come_in_at_most_eight_sizes_per_octave():
    for lo in (256, 512, 1024):
        sizes = {rows_for(n) for n in range(lo + 1, 2 * lo + 1)}
        assert len(sizes) == 8 and max(sizes) == 2 * lo
    assert all(n <= rows_for(n) <= n * 1.125 + 16 for n in range(SMALL_BATCH + 1, 4097))


@needs_gate
@pytest.mark.parametrize("rows", [SMALL_BATCH + 1, 300])
def test_the_mlp_gates_prefill_rows_in_the_epilogues_as_the_plain_math_does(rows):
    torch.manual_seed(rows)
    mlp = _tiny_mlp()
    torch.nn.init.normal_(mlp.gate_up_proj.weight, std=0.2)
    x = torch.randn(rows, mlp.gate_up_proj.in_features, dtype=torch.bfloat16)
    gate, up = F.linear(x.float(), mlp.gate_up_proj.weight.float()).split(mlp.inter, dim=-1)
    want = F.silu(gate) * up  # float32 of the same weights: [rows, inter]
    mlp.pack_weights()
    assert mlp.halves is not None
    got = packed_linear.gated(x, *mlp.halves).float()
    assert got.shape == want.shape
    # bfloat16's rounding (8 bits of mantissa) of each product, no more
    assert torch.allclose(got, want, atol=0.05, rtol=0.02)
    # and the MLP goes that way above SMALL_BATCH rows
    assert torch.equal(mlp(x), mlp.down_proj(got.to(torch.bfloat16)))


@needs_gate
def test_gated_rows_do_not_depend_on_what_pads_them():
    torch.manual_seed(0)
    mlp = _tiny_mlp()
    mlp.pack_weights()
    x = torch.randn(300, mlp.gate_up_proj.in_features, dtype=torch.bfloat16)
    # 290 and 300 rows both run as 320: padded with zeros, or with the next ten rows
    assert torch.equal(packed_linear.gated(x, *mlp.halves)[:290],
                       packed_linear.gated(x[:290], *mlp.halves))


def test_float32_weights_are_laid_out_for_vectors_with_their_values_unchanged():
    torch.manual_seed(0)
    layer = Linear(96, 80, bias=False)
    before = layer.weight.detach().clone()
    layer.pack_weights()
    w = layer.weight
    # the same [out, in] values, stored column-major: w^T is the contiguous one
    assert w.shape == (80, 96) and torch.equal(w, before)
    assert not w.is_contiguous() and w.t().is_contiguous()
    layer.pack_weights()  # again (after a change, say): still laid out so, still equal
    assert w.t().is_contiguous() and torch.equal(layer.weight, before)
    for rows in (1, 2):
        x = torch.randn(rows, 96)
        assert torch.allclose(layer(x), F.linear(x, before), atol=1e-5)
    half = Linear(96, 80, bias=False).to(torch.bfloat16)
    half.pack_weights()
    assert half.weight.is_contiguous()  # bfloat16's one-row kernel runs on the plain layout


def test_a_tied_head_multiplies_by_a_vector_laid_copy_and_the_embedding_keeps_its_rows():
    from engine.llm import LLM

    llm = LLM(model="tiny", dtype="float32", enable_prefix_caching=False)
    model = llm.engine.runner.model
    emb = model.embed_tokens.weight
    assert emb.is_contiguous() and model._head.t().is_contiguous()
    assert torch.equal(model._head, emb)
    h = torch.randn(1, emb.shape[1])
    assert torch.allclose(model.compute_logits(h), F.linear(h, emb), atol=1e-5)
