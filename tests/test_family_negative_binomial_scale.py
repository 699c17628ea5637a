"""Negative binomial rows with a sampled dispersion: two predictors, ``t = η − log α`` and
``λ = log α`` (``pymc_subsample/bounds/negative_binomial.py``).

Checked: each bound ``S_{a,b}`` on the mixed partials against 30-digit numerical derivatives at
random points of random boxes, the bound on 10⁴ random pairs in the ball against remainders
from ``scipy.stats.nbinom`` (independent of the package), and the posterior of ``b`` and ``α``
against NUTS.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy import stats
from scipy.special import digamma, expit, polygamma

from pymc_subsample.bounds.negative_binomial import (
    negative_binomial_scale_row_constants,
    scale_suprema,
)
from tests.family_checks import (
    check_two_predictor_family,
    check_two_predictor_pairs,
    check_written_derivatives,
    two_predictors,
    worst_on_random_boxes,
)


def _row_mp(y):
    def f(t, lam):
        alpha = mpmath.exp(lam)
        return (mpmath.loggamma(y + alpha) - mpmath.loggamma(alpha) + y * t
                - (y + alpha) * mpmath.log1p(mpmath.exp(t)))
    return f


@pytest.mark.parametrize("order", [1, 2])
def test_suprema_bound_the_mixed_partials_on_random_boxes(order):
    def draw_case(rng):
        y = float(rng.poisson(rng.choice([0.5, 5.0, 40.0])))
        t_hi, lam_hi = rng.normal(0.0, 2.0), rng.normal(0.5, 1.5)
        point = (t_hi - rng.exponential(0.5), lam_hi - rng.exponential(0.5))
        return y, point, scale_suprema(order, np.array([y]), np.array([t_hi]),
                                       np.array([math.exp(lam_hi)]))

    # the suprema are not far above what the derivatives reach
    assert worst_on_random_boxes(_row_mp, draw_case, 60, order) > 0.5


def _check_bound_on_random_pairs(X, y, step, order):
    rows = two_predictors(X, step, last_in_first=-1.0)  # θ = (b, log α): t = Xb − log α, log α
    t_hat, l_hat = rows.first_hat, rows.second_hat

    def f(t, lam):
        return stats.nbinom.logpmf(y[:, None], np.exp(lam), expit(-t))  # p = α/(α+μ) = σ(−t)

    # gradient and Hessian at (t̂, λ̂), written out and checked by finite differences
    alpha = math.exp(l_hat)
    s = expit(t_hat)
    sp = np.logaddexp(0.0, t_hat)
    g_t = (y - (y + alpha) * s)[:, None]
    g_l = (alpha * (digamma(y + alpha) - digamma(alpha)) - alpha * sp)[:, None]
    h_tt = (-(y + alpha) * s * (1 - s))[:, None]
    h_tl = (-alpha * s)[:, None]
    h_ll = g_l + (alpha**2 * (polygamma(1, y + alpha) - polygamma(1, alpha)))[:, None]
    check_written_derivatives(f, rows, (g_t, g_l), h_ll)
    consts = negative_binomial_scale_row_constants(order, rows.s_first, rows.s_second, y, t_hat,
                                                   np.full(len(y), l_hat), step.region_radius,
                                                   rows.cos)
    check_two_predictor_pairs(step, rows, f, (g_t, g_l), (h_tt, h_tl, h_ll), consts, order)


@pytest.mark.slow
def test_mhss_on_negative_binomial_rows_with_a_sampled_dispersion():
    """One build, then the bound on 10⁴ pairs per order and the posterior against NUTS."""
    # the crude bounds in the dispersion's direction read tens of rows at this N
    check_two_predictor_family("negative_binomial_scale", _check_bound_on_random_pairs,
                               others=("alpha",), max_rows=None)
