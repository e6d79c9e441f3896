"""RMSNorm taken in pieces (long prompts) gives the bits it gives in one pass, and HF's
values."""

import pytest
import torch

from engine.model import causal_lm
from engine.model.causal_lm import RMSNorm


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("heads", [None, 4])  # hidden states [T, D]; q or k per head [T, H, D]
def test_pieces_give_the_one_pass_bits(monkeypatch, dtype, heads):
    torch.manual_seed(0)
    tokens, dim = 301, 32
    norm = RMSNorm(dim, 1e-6).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(dim) * 0.1 + 1)
    if heads is None:
        x = torch.randn(tokens, dim, dtype=dtype)
    else:  # a view into a fused q|k|v row, as the attention takes q and k
        x = torch.randn(tokens, 3 * heads * dim, dtype=dtype)[:, :heads * dim].view(
            tokens, heads, dim)
    with torch.no_grad():
        one_pass = norm(x)  # NORM_CHUNK is far above this size
        monkeypatch.setattr(causal_lm, "NORM_CHUNK", 7 * x[0].numel())  # 43 pieces
        pieces = norm(x)
        xf = x.float()
        hf = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(dtype) * norm.weight
    assert torch.equal(pieces, one_pass)
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(pieces, hf, rtol=tol, atol=tol)
