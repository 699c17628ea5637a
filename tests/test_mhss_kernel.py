"""The MHSS acceptance kernel with stubbed remainders: no model, no PyMC."""

from __future__ import annotations

import numpy as np
import pytest

from pymc_subsample.kernels.indexing import WeightedIndexSampler
from pymc_subsample.kernels.mhss import ScalarRates, mhss_accept, poisson_thinning_log_ratio


def test_thinning_keeps_with_probability_phi_over_cm():
    rng = np.random.default_rng(0)
    n = 200_000
    xi = np.full(n, 0.3)
    c = np.ones(n)
    _, kept, clipped = poisson_thinning_log_ratio(xi, c, 1.0, rng)
    # φ = cM − max(ξ, 0) = 0.7
    assert abs(kept / n - 0.7) < 4 * np.sqrt(0.7 * 0.3 / n)
    assert clipped == 0


def test_thinning_log_ratio_of_a_kept_draw():
    rng = np.random.default_rng(1)
    # ξ < 0: φ = cM = 2, φ' = cM − |ξ| = 1.5, always kept; ratio 0.75 per draw
    log_ratio, kept, _ = poisson_thinning_log_ratio(np.array([-0.5, -0.5]), np.ones(2), 2.0, rng)
    assert kept == 2
    assert log_ratio == pytest.approx(2 * np.log(0.75))


def test_bound_violations_are_counted_and_rounding_is_not():
    rng = np.random.default_rng(2)
    _, _, clipped = poisson_thinning_log_ratio(np.array([1.5, -0.2]), np.ones(2), 1.0, rng)
    assert clipped == 1
    _, _, clipped = poisson_thinning_log_ratio(np.array([1.0 + 1e-13]), np.ones(1), 1.0, rng)
    assert clipped == 0


def _acceptance_probability(xi, c, bound, n_rep, seed, log_alpha1=0.0, delayed=True):
    sampler = WeightedIndexSampler(c)
    rng_i, rng_a = np.random.default_rng([seed, 1]), np.random.default_rng([seed, 2])
    acc = 0
    for _ in range(n_rep):
        info = mhss_accept(
            log_alpha1, ScalarRates(bound, sampler),
            remainder=lambda idx: xi[idx],
            n_rows=c.size,
            full_remainder_sum=lambda: float(xi.sum()),
            rng_index=rng_i,
            rng_accept=rng_a,
            delayed=delayed,
        )
        acc += info.accepted
    return acc / n_rep


@pytest.mark.parametrize("seed", [0, 1])
def test_stage_two_satisfies_detailed_balance(seed):
    """a(θ,θ') / a(θ',θ) = exp(Σ ξ_i): swapping the points flips the sign of every ξ_i."""
    rng = np.random.default_rng(seed)
    n = 50
    c = rng.uniform(0.5, 1.5, size=n)
    bound = 0.02
    xi = c * bound * rng.uniform(-1, 1, size=n)  # within the bound
    n_rep = 60_000
    a_fwd = _acceptance_probability(xi, c, bound, n_rep, seed)
    a_rev = _acceptance_probability(-xi, c, bound, n_rep, seed + 10)
    se = np.sqrt(a_fwd * (1 - a_fwd) / n_rep + a_rev * (1 - a_rev) / n_rep)
    # compare a_fwd with exp(Σξ)·a_rev on the probability scale
    assert abs(a_fwd - np.exp(xi.sum()) * a_rev) < 4.5 * se * (1 + np.exp(xi.sum()))


def test_one_decision_satisfies_detailed_balance():
    """``delayed=False``: one decision on ``log α1 + log α2``; swapping the points flips
    ``log α1`` and every ``ξ_i``, and ``a(θ,θ') / a(θ',θ) = e^{log α1 + Σξ_i}``. With
    ``log α1 = −Σξ_i`` (the proposal follows ``π``) it accepts more often than two stages."""
    rng = np.random.default_rng(3)
    n = 50
    c = rng.uniform(0.5, 1.5, size=n)
    bound = 0.02
    xi = c * bound * rng.uniform(-0.2, 1.0, size=n)
    la1, n_rep = -0.8 * float(xi.sum()), 20_000
    a_fwd = _acceptance_probability(xi, c, bound, n_rep, 3, la1, delayed=False)
    a_rev = _acceptance_probability(-xi, c, bound, n_rep, 13, -la1, delayed=False)
    ratio = np.exp(la1 + xi.sum())
    se = np.sqrt(a_fwd * (1 - a_fwd) / n_rep + a_rev * (1 - a_rev) / n_rep)
    assert abs(a_fwd - ratio * a_rev) < 4.5 * se * (1 + ratio)
    two = _acceptance_probability(xi, c, bound, n_rep, 23, la1)
    assert a_fwd > two + 4.5 * np.sqrt(2 * 0.25 / n_rep)


def test_stage_one_rejection_touches_no_data():
    touched = []
    info = mhss_accept(
        -np.inf, ScalarRates(1.0, WeightedIndexSampler(np.ones(10))),
        remainder=lambda idx: touched.append(idx) or np.zeros(idx.size),
        n_rows=10,
        full_remainder_sum=lambda: 0.0,
        rng_index=np.random.default_rng(0),
        rng_accept=np.random.default_rng(1),
    )
    assert not info.accepted and not info.accept_stage1 and info.n_data == 0 and not touched


def test_full_data_fallback_when_expected_rows_reach_n():
    calls = []
    info = mhss_accept(
        0.0, ScalarRates(100.0, WeightedIndexSampler(np.ones(10))),
        remainder=lambda idx: pytest.fail("must not subsample"),
        n_rows=10,
        full_remainder_sum=lambda: calls.append(1) or 5.0,
        rng_index=np.random.default_rng(0),
        rng_accept=np.random.default_rng(1),
    )
    assert info.full_data_fallback and info.n_data == 10 and info.accepted and calls == [1]
