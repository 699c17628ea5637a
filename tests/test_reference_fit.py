"""The reference fit where the full-data Hessian is not negative definite at a point near the
mode (docs/methods/reference.md, step 5): damped Newton on all rows, in counted passes, not
PyMC's ``find_MAP``, and the point it returns is a mode."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from pymc_subsample.model.prior_hessian import prior_terms
from pymc_subsample.model.reference import (
    COSTLY_CONSTANTS_DISTANCE,
    MODE_TOLERANCE,
    _difference_objective,
    fit_reference,
)
from pymc_subsample.model.setup import (
    SubsampledLikelihood,
    default_data_pass,
    glm_data_pass,
)
from tests import row_models


@pytest.fixture(scope="module")
def zinb():
    """A zero-inflated negative binomial on 2,000 rows, its data pass and its mode."""
    lik = SubsampledLikelihood(row_models.zero_inflated_negative_binomial(2_000, seed=0))
    data_pass = default_data_pass(lik, None)  # differences of the gradient: cheap to compile
    return lik, data_pass, fit_reference(lik, data_pass)


def _negative_hessian(lik, data_pass, theta):
    res = data_pass.full(theta)
    value, grad, hess = prior_terms(lik, theta, data_pass.levels)
    return grad + res.grad, -(hess + res.hess)


def test_an_indefinite_hessian_near_the_mode_takes_damped_newton_not_find_map(
        zinb, monkeypatch, caplog):
    lik, data_pass, fit = zinb
    # 3.5 posterior sds up in the mixing weight ψ (log-odds, the last but one coordinate):
    # the data's Hessian there has a positive eigenvalue (ψ and the dispersion α)
    start = fit.theta_hat.copy()
    start[-2] += 0.5
    _, prec = _negative_hessian(lik, data_pass, start)
    assert np.linalg.eigvalsh(prec)[0] < 0.0  # the case under test is reached

    def no_find_map(*args, **kwargs):
        raise AssertionError("pm.find_MAP was called")

    monkeypatch.setattr(pm, "find_MAP", no_find_map)
    passes = data_pass.n_passes
    with caplog.at_level("WARNING", logger="pymc_subsample"):
        refit = fit_reference(lik, data_pass, map_point=lik.unravel(start))
    assert "map_point was not a posterior mode (the log posterior's Hessian there is not " \
        "negative definite)" in caplog.text
    assert refit.full_data_passes == data_pass.n_passes - passes <= 10
    # a mode: the Newton distance from a fresh pass, and the same mode as from the start
    grad, prec = _negative_hessian(lik, data_pass, refit.theta_hat)
    chol = np.linalg.cholesky(np.linalg.inv(prec))
    assert np.linalg.norm(chol.T @ grad) <= 0.25
    assert refit.newton_distance <= 0.25
    sd = np.sqrt(np.diag(fit.frame.cov))
    assert np.max(np.abs(refit.theta_hat - fit.theta_hat) / sd) < 0.1


def test_an_automatic_bounds_constants_follow_a_newton_step_from_within_one_sd():
    """The row constants of an automatic bound cost more than a pass: made on the pass one
    Newton step from within ``COSTLY_CONSTANTS_DISTANCE`` of the mode, not on a pass after
    the one that found the mode (which took a pass more, at the same point)."""
    lik = SubsampledLikelihood(row_models.beta(4_000, seed=0))
    data_pass = glm_data_pass(lik, 2)
    assert not data_pass.speculative_constants  # an automatic bound's pass
    fit = fit_reference(lik, data_pass, order=2)
    sd = np.sqrt(np.diag(fit.frame.cov))
    start = fit.theta_hat.copy()
    start[0] += 0.6 * sd[0]  # within 1 sd of the mode, beyond MODE_TOLERANCE
    passes, asked = data_pass.n_passes, []
    full = data_pass.full

    def recorded(theta, **kwargs):
        asked.append(kwargs.get("order") is not None)
        return full(theta, **kwargs)

    data_pass.full = recorded
    refit = fit_reference(lik, data_pass, map_point=lik.unravel(start), order=2)
    distance = refit.newton_distance
    offset = np.linalg.norm((start - fit.theta_hat) / sd)
    assert MODE_TOLERANCE < offset <= COSTLY_CONSTANTS_DISTANCE
    assert asked == [False, True] and data_pass.n_passes - passes == 2
    assert distance <= MODE_TOLERANCE and refit.row_constants is not None
    assert np.max(np.abs(refit.theta_hat - fit.theta_hat) / sd) < 0.1


def test_an_automatic_bounds_constants_come_with_the_second_pass_from_a_subsample_start():
    """From the subsample's mode (several posterior sds off on all rows) the first pass is
    far from the mode; Newton on the subsample's difference estimate around that pass
    (:func:`_difference_objective`) finds the mode without another pass, so an automatic
    bound's constants come with the second pass, as a hand-derived bound's do."""
    lik = SubsampledLikelihood(row_models.beta(40_000, seed=1))
    data_pass = glm_data_pass(lik, 2)
    assert not data_pass.speculative_constants  # an automatic bound's pass
    asked, points = [], []
    full = data_pass.full

    def recorded(theta, **kwargs):
        if kwargs.get("idx_chunks") is None:  # a full pass, not the subsample's
            asked.append(kwargs.get("order") is not None)
            points.append(theta)
        return full(theta, **kwargs)

    data_pass.full = recorded
    fit = fit_reference(lik, data_pass, order=2)
    assert asked == [False, True] and fit.full_data_passes == 2
    assert fit.row_constants is not None
    # the first pass was beyond one Newton step's reach of the constants (the case under
    # test), the second is the mode
    sd = np.sqrt(np.diag(fit.frame.cov))
    assert np.linalg.norm((points[0] - fit.theta_hat) / sd) > COSTLY_CONSTANTS_DISTANCE
    assert fit.newton_distance <= 0.05


def test_the_difference_estimate_is_exact_at_its_pass_and_closer_than_the_subsample():
    lik = SubsampledLikelihood(row_models.beta(20_000, seed=2))
    data_pass = glm_data_pass(lik, 2)
    fit = fit_reference(lik, data_pass)

    def log_post(theta, res):
        v, g, h = prior_terms(lik, theta, data_pass.levels)
        return v + res.loglik, g + res.grad, -(h + res.hess)

    sd = np.sqrt(np.diag(fit.frame.cov))
    theta0 = fit.theta_hat + 3.0 * sd * np.array([1.0, -1.0, 1.0, 1.0])  # a far pass
    chunks = [np.arange(0, 20_000, 8)]  # 2,500 rows
    objective = _difference_objective(data_pass, log_post, chunks, 8.0, theta0,
                                      data_pass.full(theta0))
    exact = log_post(theta0, data_pass.full(theta0))
    for got, want in zip(objective(theta0), exact, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-8)
    # at the mode the estimate's gradient is near zero, the subsample's alone is not
    near = objective(fit.theta_hat)[1] * sd
    sub = log_post(fit.theta_hat, data_pass.full(fit.theta_hat, idx_chunks=chunks,
                                                 weight=8.0))[1] * sd
    assert np.linalg.norm(near) < 0.2 * np.linalg.norm(sub)
