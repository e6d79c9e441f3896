"""Arrival processes and length distributions against their definitions."""

import math

import numpy as np
import pytest
from scipy import stats

from workloads.arrivals import Arrivals
from workloads.lengths import LengthDist

N = 5000


def test_poisson_gaps_are_exponential_with_mean_one_over_rate():
    gaps = Arrivals("poisson", 4.0).gaps(N, np.random.default_rng(1))
    assert stats.kstest(gaps, "expon", args=(0, 1 / 4.0)).pvalue > 0.01
    assert stats.kstest(gaps, "expon", args=(0, 1 / 5.0)).pvalue < 0.01  # the test can tell


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_gaps_follow_vllms_burstiness(burstiness):
    rate = 2.0
    gaps = Arrivals("gamma", rate, burstiness).gaps(N, np.random.default_rng(2))
    # vLLM: shape = burstiness, scale = 1 / (rate * burstiness), so the mean gap stays 1/rate
    assert stats.kstest(gaps, "gamma", args=(burstiness, 0, 1 / (rate * burstiness))).pvalue > 0.01
    assert abs(gaps.mean() - 1 / rate) < 0.1 / rate


def test_onoff_keeps_the_mean_rate_and_is_silent_when_off():
    a = Arrivals("onoff", 10.0, on_s=2.0, off_s=3.0)
    t = a.times(N, np.random.default_rng(3))
    assert abs(N / t[-1] - 10.0) < 1.0
    phase = np.mod(t, 5.0)
    assert (phase <= 2.0 + 1e-9).all()


def test_constant_and_infinite_rates():
    assert np.allclose(Arrivals("constant", 5.0).times(4, np.random.default_rng(0)),
                       [0, 0.2, 0.4, 0.6])
    assert not Arrivals("poisson", math.inf).times(10, np.random.default_rng(0)).any()


@pytest.mark.parametrize("bad", [Arrivals("poisson", 0), Arrivals("poisson", -1.0),
                                 Arrivals("gamma", 1.0, burstiness=0), Arrivals("weibull")])
def test_bad_arrivals_are_rejected(bad):
    with pytest.raises(ValueError):
        bad.validate()


def test_uniform_lengths_follow_the_range_ratio():
    x = LengthDist("uniform", 1000, range_ratio=0.2).sample(N, np.random.default_rng(4))
    assert x.min() >= 800 and x.max() <= 1200 and abs(x.mean() - 1000) < 10
    assert stats.kstest(x, "uniform", args=(800, 401)).pvalue > 0.001


def test_lognormal_lengths_have_the_asked_mean_and_are_clipped():
    x = LengthDist("lognormal", 500, sigma=0.5, high=1500).sample(N, np.random.default_rng(5))
    assert abs(x.mean() - 500) < 25 and x.max() <= 1500 and x.min() >= 1


def test_empirical_lengths_come_from_the_values_and_scaling_keeps_the_shape():
    d = LengthDist("empirical", values=(10, 20, 30))
    assert set(d.sample(300, np.random.default_rng(6))) == {10, 20, 30}
    assert d.scaled(0.5).values == (5, 10, 15)
    assert LengthDist("fixed", 8192).scaled(0.05).mean == 410
