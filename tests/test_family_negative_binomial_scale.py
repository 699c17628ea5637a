"""Negative binomial rows with a sampled dispersion: two predictors, ``t = η − log α`` and
``λ = log α`` (``pymc_subsample/bounds/negative_binomial.py``).

Checked: each bound ``S_{a,b}`` on the mixed partials against 30-digit numerical derivatives at
random points of random boxes, the bound on 10⁴ random pairs in the ball against remainders
from ``scipy.stats.nbinom`` (independent of the package), and the posterior of ``b`` and ``α``
against NUTS.
"""

from __future__ import annotations

import json
import math

import mpmath
import numpy as np
import pymc as pm
import pytest
from scipy import stats
from scipy.special import digamma, expit, polygamma

from pymc_subsample.bounds.negative_binomial import (
    negative_binomial_scale_row_constants,
    scale_suprema,
)
from tests.family_checks import DIM, N_ROWS, PAIR_ROWS, SEED, build
from tests.make_glm_references import reference_path
from tests.pairs import worst_bound_ratio
from tests.posterior import SAMPLE, assert_matches


def _row_mp(y):
    def f(t, lam):
        alpha = mpmath.exp(lam)
        return (mpmath.loggamma(y + alpha) - mpmath.loggamma(alpha) + y * t
                - (y + alpha) * mpmath.log1p(mpmath.exp(t)))
    return f


@pytest.mark.parametrize("order", [1, 2])
def test_suprema_bound_the_mixed_partials_on_random_boxes(order):
    rng = np.random.default_rng(order)
    worst = 0.0
    with mpmath.workdps(30):
        for _ in range(60):
            y = float(rng.poisson(rng.choice([0.5, 5.0, 40.0])))
            t_hi, lam_hi = rng.normal(0.0, 2.0), rng.normal(0.5, 1.5)
            t, lam = t_hi - rng.exponential(0.5), lam_hi - rng.exponential(0.5)
            sup = scale_suprema(order, np.array([y]), np.array([t_hi]),
                                np.array([math.exp(lam_hi)]))
            for (a, b), bound in sup.items():
                d = abs(float(mpmath.diff(_row_mp(y), (mpmath.mpf(t), mpmath.mpf(lam)), (a, b))))
                assert d <= bound[0] * (1 + 1e-9) + 1e-12, (a, b, y, t, lam)
                worst = max(worst, d / bound[0] if bound[0] > 0 else 0.0)
    assert worst > 0.5  # the suprema are not far above what the derivatives reach


def _check_bound_on_random_pairs(X, y, step, order):
    X, y = X[PAIR_ROWS], y[PAIR_ROWS].astype(float)
    frame, r, dim = step.frame, step.region_radius, step.likelihood.dim
    # θ = (b, log α): t = Xb − log α, λ = log α
    a_t = np.hstack([X, -np.ones((len(y), 1))])
    a_l = np.zeros(dim)
    a_l[-1] = 1.0
    xt_t, xt_l = frame.whiten_rows(a_t), frame.whiten_rows(a_l[None, :])[0]
    t_hat, l_hat = a_t @ frame.theta_hat, frame.theta_hat[-1]

    def f(t, lam):
        alpha = np.exp(lam)
        return stats.nbinom.logpmf(y[:, None], alpha, expit(-t))  # p = α/(α + μ) = σ(−t)

    alpha = math.exp(l_hat)
    s = expit(t_hat)
    sp = np.logaddexp(0.0, t_hat)
    g_t = (y - (y + alpha) * s)[:, None]
    g_l = (alpha * (digamma(y + alpha) - digamma(alpha)) - alpha * sp)[:, None]
    h_tt = (-(y + alpha) * s * (1 - s))[:, None]
    h_tl = (-alpha * s)[:, None]
    h_ll = g_l + (alpha**2 * (polygamma(1, y + alpha) - polygamma(1, alpha)))[:, None]
    eps = 1e-5
    for g, (dt, dl) in ((g_t, (eps, 0.0)), (g_l, (0.0, eps))):
        fd = (f(t_hat[:, None] + dt, l_hat + dl) - f(t_hat[:, None] - dt, l_hat - dl)) / (2 * eps)
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6)
    fd = (f(t_hat[:, None], l_hat + eps) - 2 * f(t_hat[:, None], l_hat)
          + f(t_hat[:, None], l_hat - eps)) / eps**2
    np.testing.assert_allclose(h_ll, fd, rtol=1e-3, atol=1e-3)
    consts = negative_binomial_scale_row_constants(
        order, np.linalg.norm(xt_t, axis=1), np.full(len(y), np.linalg.norm(xt_l)), y, t_hat,
        np.full(len(y), l_hat), r)
    if order == 2:  # the step's own constants are the formula's
        np.testing.assert_allclose(step.row_constants[PAIR_ROWS], consts, rtol=1e-8)

    def quad(du, dl):
        return h_tt * du**2 + 2.0 * h_tl * du * dl + h_ll * dl**2

    def remainders(phi, phi_new):
        u, u_new = xt_t @ phi.T, xt_t @ phi_new.T
        v, v_new = phi @ xt_l, phi_new @ xt_l
        exact = f(t_hat[:, None] + u_new, l_hat + v_new) - f(t_hat[:, None] + u, l_hat + v)
        taylor = g_t * (u_new - u) + g_l * (v_new - v)
        if order == 2:
            taylor = taylor + 0.5 * (quad(u_new, v_new) - quad(u, v))
        return exact - taylor, exact

    worst = worst_bound_ratio(remainders, consts, dim, r, order, sharp=False, seed=2)
    assert worst <= 1.0, f"bound violated: max |ξ|/(c M) = {worst}"
    assert worst > 1e-3  # the pairs reach where the bound matters


@pytest.mark.slow
def test_mhss_on_negative_binomial_rows_with_a_sampled_dispersion():
    """One build, then the bound on 10⁴ pairs per order and the posterior against NUTS."""
    X, y, model, step = build("negative_binomial_scale")
    assert not step.sharp_angles and math.isfinite(step.region_radius)
    for order in (1, 2):
        _check_bound_on_random_pairs(X, y, step, order)
    ref = np.load(reference_path("negative_binomial_scale", N_ROWS, DIM), allow_pickle=False)
    settings = json.loads(str(ref["settings"]))
    assert (settings["rows"], settings["dim"], settings["data_seed"]) == (N_ROWS, DIM, SEED)
    with model:
        idata = pm.sample(3000, tune=1000, chains=2, step=step, random_seed=13, **SAMPLE)
    assert_matches(idata, ref["mean"], ref["sd"], ref["mcse"])
    assert_matches(idata, ref["alpha_mean"], ref["alpha_sd"], ref["alpha_mcse"], var="alpha")
    stats_ = idata.sample_stats
    assert int(stats_["clipped"].sum()) == 0
    assert float(stats_["full_data_fallback"].mean()) < 1e-3
