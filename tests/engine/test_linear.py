"""The packed small-batch linear computes what F.linear does, and only where it can."""

import pytest
import torch
import torch.nn.functional as F

from engine.model import linear as packed_linear
from engine.model.linear import SMALL_BATCH, Linear, pack


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("rows", [1, 7, SMALL_BATCH, SMALL_BATCH + 1])
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
    calls = []
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise",
                        lambda *a: calls.append(a[0].shape[0]) or F.linear(a[0], layer.weight),
                        raising=False)
    layer(torch.randn(SMALL_BATCH + 1, 16))
    assert layer(torch.randn(3, 16)).shape == (3, 8)
    assert calls == ([4] if layer.packed is not None else [])  # 3 rows run padded to 4
    assert pack(torch.zeros(4, 4, dtype=torch.float16)) is None
    assert pack(torch.zeros(4, 4, device="meta")) is None


def test_packed_rows_come_in_a_few_sizes_and_padding_leaves_the_real_rows_alone():
    from engine.model.linear import rows_for
    sizes = {rows_for(n) for n in range(1, SMALL_BATCH + 1)}
    assert sizes == {1, 2, 4, 8, *range(16, SMALL_BATCH + 1, 16)}
    assert all(rows_for(n) >= n for n in range(1, SMALL_BATCH + 1))
    torch.manual_seed(0)
    layer = Linear(64, 32, bias=False)
    layer.pack_weights()
    x = torch.randn(40, 64)
    assert torch.equal(layer(x[:37]), layer(x[:37]))  # one shape per size: deterministic
    assert torch.allclose(layer(x[:37]), F.linear(x[:37], layer.weight), atol=1e-5)
