"""The sampler: its greedy pick against torch's own first-maximum reduction, and its draws
against the probabilities they come from."""

import pytest
import torch

from engine.model.sampler import draw, first_argmax


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


def test_draws_follow_the_probabilities_and_never_a_zero():
    # 8 tokens, two of them impossible (as after top-k / top-p), the rest 1:2:...:6
    probs = torch.tensor([0.0, 1, 2, 3, 0, 4, 5, 6]) / 21
    gen = torch.Generator().manual_seed(0)
    n = 21_000
    counts = torch.bincount(torch.tensor([draw(probs, gen) for _ in range(n)]), minlength=8)
    assert counts[0] == counts[4] == 0
    expected = probs * n
    keep = expected > 0
    chi2 = float((((counts - expected)[keep]) ** 2 / expected[keep]).sum())
    assert chi2 < 20.5  # the 99.9th percentile of chi-square with 5 degrees of freedom


def test_a_draw_never_runs_past_the_last_possible_token():
    probs = torch.zeros(152_064)
    probs[[0, 151_000]] = torch.tensor([1e-30, 1.0])  # all the mass at one late token
    gen = torch.Generator().manual_seed(1)
    assert {draw(probs, gen) for _ in range(200)} == {151_000}
    assert draw(torch.tensor([0.0, 0.0, 2.0, 0.0]), gen) == 2
