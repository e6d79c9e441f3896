"""The sampler's greedy pick against torch's own first-maximum reduction."""

import pytest
import torch

from engine.model.sampler import first_argmax


@pytest.mark.parametrize("rows, vocab", [(1, 512), (8, 16384), (32, 16384), (3, 151936),
                                         (40, 16384 + 77)])
def test_first_argmax_matches_max_indices(rows, vocab):
    gen = torch.Generator().manual_seed(rows * vocab)
    x = torch.randn(rows, vocab, generator=gen)
    assert torch.equal(first_argmax(x), x.max(dim=-1).indices)
    xb = x.bfloat16()  # ties are common after rounding
    assert torch.equal(first_argmax(xb), xb.max(dim=-1).indices)


def test_first_argmax_ties_nan_and_tail():
    x = torch.zeros(16, 16384 + 77)
    x[0, 5000] = x[0, 9000] = 1.0  # a tie across blocks: the first one
    x[1, 300] = x[1, 301] = 1.0  # a tie inside a block
    x[2, -1] = 3.0  # the maximum in the partial last block
    x[3, 7], x[3, 20] = float("nan"), 5.0  # a NaN counts as the maximum, as in torch.max
    x[4] = -1.0  # an all-equal row: index 0
    got = first_argmax(x)
    assert torch.equal(got, x.max(dim=-1).indices)
    assert got[:5].tolist() == [5000, 300, 16384 + 76, 7, 0]
