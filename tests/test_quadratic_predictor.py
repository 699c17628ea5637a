"""Rows whose predictor is quadratic in the parameters: a product of two
(``pymc_subsample/bounds/quadratic.py``, ``glm._predictor_derivatives``).

Checked: the curvature the GLM layer reads; the data pass's gradient and Hessian sums against
the generic autodiff ones; the step's control-variate remainders against the Taylor expansion
in θ written here in NumPy; the constants against the formula and the bound on 10⁴ random pairs
in the ball (logistic, and the Poisson log link whose bounds hold on a region only); the
posterior against NUTS (slow); a product of three refused.
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
import pytest
from scipy.special import expit

import pymc_subsample as pms
from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.model.control_variates import loglik_sums
from pymc_subsample.model.glm import detect_glm_terms
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.model.passes import QUADRATIC_MAX_DIM, GLMPass
from pymc_subsample.model.predictors import PredictorTerm
from tests.family_checks import build, check_posterior
from tests.pairs import assert_stored_constants, worst_bound_ratio

N_ROWS = 3000


def _data(seed: int = 3):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(N_ROWS), rng.normal(size=(N_ROWS, 3))])
    return X, np.array([0.2, 0.7, -0.5, 0.3])


def _model(X, y, family: str) -> pm.Model:
    """``η = X b + b_1 b_2 x_1 x_2``: logistic or Poisson with the log link."""
    with pm.Model() as model:
        Xd = pm.Data("X", X)
        b = pm.Normal("b", 0.0, 5.0, shape=X.shape[1])
        eta = Xd @ b + b[1] * b[2] * Xd[:, 1] * Xd[:, 2]
        if family == "logistic":
            pm.Bernoulli("y", logit_p=eta, observed=y)
        else:
            pm.Poisson("y", mu=pm.math.exp(eta), observed=y)
    return model


def _eta(X, theta):
    """``η`` per row (columns: points ``theta`` of shape (pairs, d))."""
    theta = np.atleast_2d(theta)
    return X @ theta.T + (X[:, 1] * X[:, 2])[:, None] * (theta[:, 1] * theta[:, 2])[None, :]


def _row_terms(family: str, eta, y):
    """``f``, ``f'``, ``f''``, ``sup|f''|``, ``sup|f'''|`` on ``η ± w`` are written per test."""
    y = y[:, None] if np.ndim(eta) == 2 else y
    if family == "logistic":
        return (y * eta - np.logaddexp(0.0, eta), y - expit(eta),
                -expit(eta) * expit(-eta))
    return y * eta - np.exp(eta), y - np.exp(eta), -np.exp(eta)


@pytest.fixture(scope="module", params=["logistic", "poisson_log"])
def case(request):
    family = request.param
    X, beta = _data()
    rng = np.random.default_rng(4)
    eta = _eta(X, beta)[:, 0]
    y = (rng.random(N_ROWS) < expit(eta)).astype(float) if family == "logistic" else (
        rng.poisson(np.exp(eta)).astype(float))
    model = _model(X, y, family)
    with model:
        step = pms.MHSS(cv_order=2)
    return family, X, y, model, step


def test_the_curvature_is_read():
    X, beta = _data()
    lik = SubsampledLikelihood(_model(X, np.zeros(N_ROWS), "logistic"))
    (term,) = detect_glm_terms(lik)
    assert term.curvature is not None
    curvature = term.curvature.eval({lik.theta: np.ones(4), lik.idx: np.arange(5)})
    expected = np.zeros((5, 4, 4))
    expected[:, 1, 2] = expected[:, 2, 1] = X[:5, 1] * X[:5, 2]
    np.testing.assert_allclose(curvature, expected, atol=1e-14)


def test_pass_sums_are_the_generic_ones(case):
    family, X, y, model, step = case
    lik = step.likelihood
    theta = step.theta_hat + 0.01 * np.random.default_rng(5).normal(size=lik.dim)
    result = GLMPass(lik).full(theta)
    _, grad, hess = loglik_sums(lik, theta)
    np.testing.assert_allclose(result.grad, grad, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(result.hess, hess, rtol=1e-8, atol=1e-8)


def _frame_pieces(X, y, step, family):
    """Whitened ``s_i``, ``q_i`` and the rows' derivatives at θ̂, written out here."""
    frame = step.frame
    theta_hat, chol = frame.theta_hat, frame.chol_cov
    prod = X[:, 1] * X[:, 2]
    grad_eta = X.copy()
    grad_eta[:, 1] += theta_hat[2] * prod
    grad_eta[:, 2] += theta_hat[1] * prod
    s = np.linalg.norm(grad_eta @ chol, axis=1)
    sd = np.linalg.norm(chol, axis=1)  # ‖Lᵀe_j‖
    q = 2.0 * np.abs(prod) * sd[1] * sd[2]
    eta_hat = _eta(X, theta_hat)[:, 0]
    _, f1, f2 = _row_terms(family, eta_hat, y)
    return theta_hat, chol, prod, grad_eta, s, q, eta_hat, f1, f2


def _constants(family, order, s, q, f1, eta_hat, radius):
    w = radius * s + 0.5 * radius**2 * q
    s_bar = s + radius * q
    if family == "logistic":
        l1, l2 = 0.25, math.sqrt(3.0) / 18.0
    else:
        l1 = l2 = np.exp(eta_hat + w)
    if order == 1:
        return l1 * s_bar**2 + (np.abs(f1) + l1 * w) * q
    return l2 * s_bar**3 + 3.0 * l1 * q * s_bar


def test_remainders_and_the_bound_on_random_pairs(case):
    family, X, y, model, step = case
    assert not step.sharp_angles and math.isfinite(step.region_radius)
    theta_hat, chol, prod, grad_eta, s, q, eta_hat, f1, f2 = _frame_pieces(X, y, step, family)
    radius, dim = step.region_radius, step.likelihood.dim
    assert_stored_constants(step.row_constants, _constants(family, 2, s, q, f1, eta_hat, radius),
                            rtol=1e-7)
    f1c, f2c = f1[:, None], f2[:, None]

    def taylor_remainders(order):
        def remainders(phi, phi_new):
            theta, theta_new = theta_hat + phi @ chol.T, theta_hat + phi_new @ chol.T
            eta, eta_new = _eta(X, theta), _eta(X, theta_new)
            lin, lin_new = grad_eta @ (theta - theta_hat).T, grad_eta @ (theta_new - theta_hat).T
            exact = _row_terms(family, eta_new, y)[0] - _row_terms(family, eta, y)[0]
            taylor = f1c * (lin_new - lin)
            if order == 2:
                taylor = f1c * (eta_new - eta) + 0.5 * f2c * (lin_new**2 - lin**2)
            return exact - taylor, exact
        return remainders

    # the step's compiled remainders (order 2) are the Taylor expansion in θ written here
    rng = np.random.default_rng(6)
    for _ in range(5):
        phi, phi_new = 0.5 * rng.normal(size=(2, dim))
        theta, theta_new = theta_hat + chol @ phi, theta_hat + chol @ phi_new
        xi = step.control_variate.remainder(theta, theta_new, np.arange(N_ROWS))
        mine = taylor_remainders(2)(phi[None, :], phi_new[None, :])[0][:, 0]
        np.testing.assert_allclose(xi, mine, rtol=1e-6, atol=1e-12)
    for order in (1, 2):
        consts = _constants(family, order, s, q, f1, eta_hat, radius)
        ratio = worst_bound_ratio(taylor_remainders(order), consts, dim, radius, order,
                                  sharp=False, seed=order)
        assert 1e-3 < ratio <= 1.0, f"max |ξ|/bound = {ratio}"


def test_a_product_of_three_is_read_by_the_automatic_bound():
    """Neither affine nor quadratic: no hand-derived family reads it, the automatic bound does,
    with the row predictor X @ b and the three scalars as predictors."""
    X, _ = _data()
    with pm.Model():
        b = pm.Normal("b", 0.0, 5.0, shape=4)
        pm.Bernoulli("y", logit_p=pm.Data("X", X) @ b + b[1] * b[2] * b[3] * X[:, 1],
                     observed=(X[:, 1] > 0).astype(int))
        step = pms.MHSS(cv_order=1)  # order 1: fewer derivative graphs in 4 predictors
    (term,) = step._reference_pass.terms
    assert isinstance(term, PredictorTerm) and term.family.n_predictors == 4
    assert np.all(np.isfinite(step.row_constants))


def test_a_product_among_too_many_parameters_is_refused_before_the_fit():
    """``a * c[g]`` with more groups than ``QUADRATIC_MAX_DIM``: refused, naming the variable,
    before any pass over the data."""
    groups = QUADRATIC_MAX_DIM
    rng = np.random.default_rng(7)
    g = rng.integers(0, groups, size=2 * groups)
    with pm.Model():
        a = pm.Normal("a", 0.0, 1.0)
        c = pm.Normal("c", 0.0, 1.0, shape=groups)
        pm.Bernoulli("y", logit_p=a * c[pm.Data("g", g)], observed=rng.integers(0, 2, g.size))
        with pytest.raises(SubsamplingModelError,
                           match=rf"'y'.*product of two parameters among d = {groups + 1}.*"
                                 r"UserBound"):
            pms.MHSS()


@pytest.mark.slow
def test_mhss_on_a_product_of_two_coefficients_matches_nuts():
    """``logistic_product`` at N = 2·10⁴: |z| < 4.5, sd within 10 %, fewer than 10 rows."""
    _, _, model, step = build("logistic_product")
    check_posterior(model, step, "logistic_product")
