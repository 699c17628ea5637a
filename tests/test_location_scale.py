"""MHSS for a Normal likelihood with a sampled σ: two predictors (μ_i and log σ), region bounds.

``bounds.normal_scale_row_constants`` bounds the control-variate error of rows
``f(μ, λ) = −½(y − μ)² e^{−2λ} − λ`` on the ball ``‖φ‖ ≤ r``, with ``M`` without Lemma 1's angle
factors. Checked: the bound on 10⁴ random pairs in the ball against remainders computed here
from the Normal formulas (independent of the package), and the posterior of ``b`` and ``σ``
against NUTS (``tests/make_glm_references.py``). One test builds the step once and makes every
check, so that a parallel run compiles it on one worker only. For every two-predictor family,
the data pass and control variates in the predictors
(``location_scale_pass.LocationScalePass``) are checked against the generic autodiff in θ.
"""

from __future__ import annotations

import numpy as np
import pytest

from pymc_subsample.bounds import normal_scale_row_constants
from pymc_subsample.datasets import glm_data, glm_model
from pymc_subsample.model.control_variates import TaylorControlVariate
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.model.location_scale import detect_location_scale_terms
from pymc_subsample.model.passes import GenericPass, LocationScalePass
from tests.family_checks import (
    check_two_predictor_family,
    check_two_predictor_pairs,
    two_predictors,
)


def _check_bound_on_random_pairs(X, y, step, order):
    """10⁴ pairs (φ, φ') in the ball, half of them close pairs: |ξ_i| ≤ c_i M on 2000 random
    rows."""
    rows = two_predictors(X, step)  # θ = (b, log σ)
    mu_hat, ls_hat = rows.first_hat, rows.second_hat

    def f(mu, ls):
        return -0.5 * (y[:, None] - mu) ** 2 * np.exp(-2.0 * ls) - ls

    e = np.exp(-2.0 * ls_hat)
    res = (y - mu_hat)[:, None]
    consts = normal_scale_row_constants(order, rows.s_first, rows.s_second, np.abs(y - mu_hat),
                                        np.full(len(y), ls_hat), step.region_radius, rows.cos)
    check_two_predictor_pairs(step, rows, f, (res * e, res**2 * e - 1.0),
                              (-e, -2.0 * res * e, -2.0 * res**2 * e), consts, order)


@pytest.mark.slow
def test_normal_with_sampled_sigma():
    step = check_two_predictor_family("gaussian_scale", _check_bound_on_random_pairs,
                                      others=("sigma",))
    assert step.setup_profile["full_data_passes"] >= 2  # the reference fit + the constants


@pytest.mark.parametrize(
    "data_family",
    ["gaussian_scale", "student_t_scale", "negative_binomial_scale", "gamma_log_scale"],
)
def test_two_predictor_pass_and_control_variates_equal_the_generic_autodiff(data_family):
    """LocationScalePass's sums (BLAS products of per-row derivatives in the two predictors)
    and its control variates' remainders (Taylor terms in the predictors) equal the generic
    autodiff of the model's own likelihood in θ, at random points and pairs."""
    X, y = glm_data(3000, 3, data_family, seed=4)
    lik = SubsampledLikelihood(glm_model(X, y, data_family), None)
    terms = detect_location_scale_terms(lik)
    # the generic Hessian by differences of the autodiff gradient: far cheaper to compile
    ours, generic = LocationScalePass(lik, terms), GenericPass(lik, exact_hessian=False)
    rng = np.random.default_rng(1)
    theta_hat = 0.2 * rng.normal(size=lik.dim)
    for theta in (theta_hat, 0.3 * rng.normal(size=lik.dim)):
        a, b = ours.full(theta), generic.full(theta)
        assert a.loglik == pytest.approx(b.loglik, rel=1e-9)
        np.testing.assert_allclose(a.grad, b.grad, rtol=1e-8, atol=1e-8 * np.abs(b.grad).max())
        np.testing.assert_allclose(a.hess, b.hess, rtol=1e-5, atol=1e-6 * np.abs(b.hess).max())
    # order 2 (its remainder holds the order-1 terms and the Hessian's)
    sums = (b.loglik, b.grad, b.hess)
    rows = np.arange(0, 3000, 7, dtype=np.int64)
    cv_ours = TaylorControlVariate(lik, theta_hat, 2, sums=sums, glm_terms=terms)
    cv_generic = TaylorControlVariate(lik, theta_hat, 2, sums=sums)
    for _ in range(5):
        theta = theta_hat + 0.05 * rng.normal(size=lik.dim)
        theta_new = theta + 0.05 * rng.normal(size=lik.dim)
        xi, xi_generic = (cv.remainder(theta, theta_new, rows) for cv in (cv_ours, cv_generic))
        np.testing.assert_allclose(xi, xi_generic, rtol=1e-6,
                                   atol=1e-9 * (1.0 + np.abs(xi_generic).max()))
