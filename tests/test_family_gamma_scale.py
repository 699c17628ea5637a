"""Gamma rows with the log link and a sampled shape: two predictors, ``η`` and ``λ = log α``
(``pymc_subsample/bounds/gamma.py``, ``gamma_scale_row_constants``).

Checked: the shape of ``g_2`` and ``g_3`` the suprema rely on (``g_2`` decreasing, ``g_3`` with
one turn), each bound ``S_{a,b}`` against 30-digit numerical derivatives at random points of
random boxes, the bound on 10⁴ random pairs in the ball against remainders from
``scipy.stats.gamma`` (independent of the package), and the posterior of ``b`` and ``α``
against NUTS.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy import stats
from scipy.special import digamma, polygamma

from pymc_subsample.bounds.gamma import (
    G3_CRITICAL,
    _g2,
    _g3,
    gamma_scale_row_constants,
    gamma_scale_suprema,
)
from tests.family_checks import (
    check_two_predictor_family,
    check_two_predictor_pairs,
    check_written_derivatives,
    two_predictors,
    worst_on_random_boxes,
)


def test_g2_decreases_and_g3_turns_once():
    alpha = np.logspace(-3, 4, 70001)
    assert np.all(np.diff(_g2(alpha)) < 0)
    d3 = np.diff(_g3(alpha))
    assert np.all(d3[alpha[1:] < G3_CRITICAL * 0.999] < 0)
    assert np.all(d3[alpha[:-1] > G3_CRITICAL * 1.001] > 0)


def _row_mp(y):
    def f(eta, lam):
        alpha = mpmath.exp(lam)
        return (alpha * lam - alpha * eta + (alpha - 1) * mpmath.log(y)
                - alpha * y * mpmath.exp(-eta) - mpmath.loggamma(alpha))
    return f


@pytest.mark.parametrize("order", [1, 2])
def test_suprema_bound_the_mixed_partials_on_random_boxes(order):
    def draw_case(rng):
        y = float(rng.gamma(2.0, 1.0))
        eta_lo, lam_lo = rng.normal(0.0, 1.0), rng.normal(0.5, 2.0)
        eta_hi, lam_hi = eta_lo + rng.exponential(0.5), lam_lo + rng.exponential(0.5)
        point = (rng.uniform(eta_lo, eta_hi), rng.uniform(lam_lo, lam_hi))
        return y, point, gamma_scale_suprema(order, np.array([y]), (eta_lo, eta_hi),
                                             (lam_lo, lam_hi))

    # the suprema are not far above what the derivatives reach
    assert worst_on_random_boxes(_row_mp, draw_case, 80, order) > 0.3


def _check_bound_on_random_pairs(X, y, step, order):
    rows = two_predictors(X, step)  # θ = (b, log α)
    eta_hat, lam_hat = rows.first_hat, rows.second_hat

    def f(eta, lam):
        alpha = np.exp(lam)
        return stats.gamma.logpdf(y[:, None], alpha, scale=np.exp(eta) / alpha)

    # gradient and Hessian at (η̂, λ̂), written out and checked by finite differences
    alpha = math.exp(lam_hat)
    w = y * np.exp(-eta_hat)
    g_eta = (alpha * (w - 1.0))[:, None]
    g_lam = (alpha * (np.log(w) + lam_hat + 1.0 - w - digamma(alpha)))[:, None]
    h_ee = (-alpha * w)[:, None]
    h_el = g_eta
    h_ll = (alpha * (np.log(w) + lam_hat + 2.0 - w - digamma(alpha)
                     - alpha * polygamma(1, alpha)))[:, None]
    check_written_derivatives(f, rows, (g_eta, g_lam), h_ll)
    consts = gamma_scale_row_constants(order, rows.s_first, rows.s_second, y, eta_hat,
                                       np.full(len(y), lam_hat), step.region_radius,
                                       rows.cos)
    check_two_predictor_pairs(step, rows, f, (g_eta, g_lam), (h_ee, h_el, h_ll), consts, order)


@pytest.mark.slow
def test_mhss_on_gamma_rows_with_a_sampled_shape():
    """One build, then the bound on 10⁴ pairs per order and the posterior against NUTS."""
    check_two_predictor_family("gamma_log_scale", _check_bound_on_random_pairs,
                               others=("alpha",), max_rows=None)
