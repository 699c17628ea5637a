"""The Laplace frame and the MHSS bounds in whitened coordinates (docs/methods/mhss.md).

The bound ``|ξ_i(θ, θ')| ≤ L_k(y_i)‖Lᵀx_i‖^{k+1} M(φ, φ')`` is checked on ill-conditioned data
(covariate scales 1e-2..1e2, rare binary columns, correlated columns) against an analytic
remainder computed here from the logistic formulas, on 10⁴ random pairs, and against the
model's own compiled remainders on the steps' real constants.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from scipy.special import expit

import pymc_subsample as pms
from pymc_subsample.bounds import LevelBound, derivative_bound, remainder_scale
from pymc_subsample.bounds.levels import LEVEL_WEIGHT
from pymc_subsample.datasets import glm_model, ill_conditioned_data
from pymc_subsample.model.frame import LaplaceFrame, NotPositiveDefiniteError
from pymc_subsample.model.reference import MODE_TOLERANCE
from tests.pairs import assert_stored_constants
from tests.steps.conftest import SAMPLE

N_ROWS = 10_000


def test_frame_maps_are_inverse_and_whiten_the_laplace_covariance():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(5, 5))
    precision = a @ a.T + 5 * np.eye(5)
    theta_hat = rng.normal(size=5)
    frame = LaplaceFrame(theta_hat, precision)
    theta = rng.normal(size=5)
    np.testing.assert_allclose(frame.unwhiten(frame.whiten(theta)), theta, rtol=1e-12)
    np.testing.assert_allclose(frame.cov, np.linalg.inv(precision), rtol=1e-10)
    # φ ~ N(0, I) when θ ~ N(θ̂, V): the covariance of whitened draws is the identity
    draws = theta_hat + rng.multivariate_normal(np.zeros(5), frame.cov, size=4000)
    phis = np.array([frame.whiten(t) for t in draws])
    np.testing.assert_allclose(np.cov(phis.T), np.eye(5), atol=0.08)
    # x̃ᵀφ = xᵀ(θ − θ̂): the predictor is the same function in both coordinates
    x = rng.normal(size=(7, 5))
    np.testing.assert_allclose(frame.whiten_rows(x) @ frame.whiten(theta), x @ (theta - theta_hat))
    g = rng.normal(size=5)
    np.testing.assert_allclose(frame.newton_step(g), np.linalg.solve(precision, g))
    np.testing.assert_allclose(frame.newton_distance(g) ** 2, g @ np.linalg.solve(precision, g))


def test_frame_refuses_a_precision_that_is_not_positive_definite():
    with pytest.raises(NotPositiveDefiniteError, match="smallest eigenvalue"):
        LaplaceFrame(np.zeros(2), np.diag([1.0, -1.0]))


@pytest.fixture(scope="module")
def ill_conditioned_step():
    X, y = ill_conditioned_data(N_ROWS, 12, seed=3)
    with glm_model(X, y, "logistic") as model:
        step = pms.MHSS(cv_order=2)
    return X, y, model, step


def _logistic_remainders(X, y, theta_hat, frame, phi, phi_new, order):
    """ξ_i for every row and pair, from the logistic formulas (independent of the package)."""
    xt = frame.whiten_rows(X)
    eta_hat = X @ theta_hat
    u, u_new = xt @ phi.T, xt @ phi_new.T  # (n, pairs)

    def f(eta):
        return y[:, None] * eta - np.logaddexp(0.0, eta)

    p = expit(eta_hat)[:, None]
    f1, f2 = y[:, None] - p, -p * (1 - p)
    exact = f(eta_hat[:, None] + u_new) - f(eta_hat[:, None] + u)
    taylor = f1 * (u_new - u)
    if order == 2:
        taylor = taylor + 0.5 * f2 * (u_new**2 - u**2)
    return exact - taylor, xt


@pytest.mark.parametrize("order", [1, 2])
def test_whitened_bound_holds_on_ill_conditioned_data(ill_conditioned_step, order):
    """10⁴ random pairs (φ, φ') at scales from 1e-3 to 8 posterior sds: no violation."""
    X, y, _, step = ill_conditioned_step
    frame = step.frame
    rng = np.random.default_rng(order)
    worst = 0.0
    for scale in (1e-3, 0.1, 1.0, 3.0, 8.0):
        for _ in range(4):
            phi = scale * rng.normal(size=(500, 12))
            phi_new = phi + scale * rng.normal(size=(500, 12)) * rng.uniform(0, 2, size=(500, 1))
            xi, xt = _logistic_remainders(X, y.astype(float), frame.theta_hat, frame, phi,
                                          phi_new, order)
            m = np.array([remainder_scale(a, b, np.zeros(12), order)
                          for a, b in zip(phi, phi_new, strict=True)])
            c = derivative_bound("bernoulli_logit", y, order) * np.linalg.norm(xt, axis=1) ** (
                order + 1
            )
            ratio = np.abs(xi) / (c[:, None] * m[None, :] + 1e-300)
            # rounding: ξ is a difference of O(|f|) numbers
            allowed = 1.0 + 1e-9 + 1e-12 * (1 + np.abs(X @ frame.theta_hat))[:, None] / (
                c[:, None] * m[None, :] + 1e-300
            )
            assert np.all(ratio <= allowed), (scale, ratio.max())
            worst = max(worst, float(np.max(ratio[np.isfinite(ratio)])))
    assert worst > 0.05  # the check is not vacuous: some pairs come close to the bound


def _whitened_constants(X, y, frame):
    """Corollary 2's whitened ``c_i = L_2‖Lᵀx_i‖³`` of the logistic rows."""
    return derivative_bound("bernoulli_logit", y, 2) * np.linalg.norm(frame.whiten_rows(X),
                                                                      axis=1) ** 3


def test_step_constants_are_the_whitened_norms(ill_conditioned_step):
    """Two rare binary columns never share a row: the frame puts them first as levels, and the
    step keeps the level bound, whose weights are ``L_2 (s_i √|D| + t_i w_K)³ / 6``
    (``bounds.levels``, ``w_K`` = ``LEVEL_WEIGHT``), over Corollary 2's, which it expects to
    read more rows."""
    X, y, _, step = ill_conditioned_step
    g = step.frame.n_levels
    assert g == 2 and isinstance(step.rate_bound, LevelBound)
    assert step.setup_profile["rate_bound_rows"] < step.setup_profile["corollary2_rows"]
    xt = step.frame.whiten_rows(X)
    s, t = np.linalg.norm(xt[:, g:], axis=1), np.abs(xt[:, :g]).max(axis=1)
    assert np.all(np.count_nonzero(xt[:, :g], axis=1) <= 1)
    wide = s * np.sqrt(12 - g) + t * LEVEL_WEIGHT
    assert_stored_constants(step.row_constants,
                            derivative_bound("bernoulli_logit", y, 2) * wide**3 / 6)


def test_compiled_remainders_obey_the_step_bound(ill_conditioned_step):
    """The model's own ξ (autodiff Taylor terms) against Corollary 2's whitened c_i·M and the
    step's level bound, 200 pairs."""
    X, y, _, step = ill_conditioned_step
    frame, cv = step.frame, step.control_variate
    consts = _whitened_constants(X, y, frame)
    rng = np.random.default_rng(5)
    idx = np.arange(N_ROWS, dtype=np.int64)
    for _ in range(200):
        scale = rng.choice([0.01, 0.5, 2.0, 5.0])
        phi, phi_new = scale * rng.normal(size=12), scale * rng.normal(size=12)
        xi = cv.remainder(frame.unwhiten(phi), frame.unwhiten(phi_new), idx)
        for bound in (consts * remainder_scale(phi, phi_new, np.zeros(12), 2),
                      step.rate_bound.rates(phi, phi_new).row_rates(idx)):
            assert np.all(np.abs(xi) <= bound * (1 + 1e-7) + 1e-9)


def test_whitening_makes_the_ill_conditioned_design_as_cheap_as_its_standardised_twin(
    ill_conditioned_step,
):
    """Σ c_i depends on the posterior's shape, not on the covariates' scales.

    Standardising the columns is an affine reparametrisation, which whitening undoes: the
    whitened constants agree (up to the prior, which is not invariant), while the Euclidean
    ones of the raw design are orders of magnitude larger.
    """
    X, y, _, step = ill_conditioned_step
    whitened = _whitened_constants(X, y, step.frame).sum()
    euclid = derivative_bound("bernoulli_logit", y, 2) * np.linalg.norm(X, axis=1) ** 3
    assert euclid.sum() > 1e4 * whitened
    Xs, ys = ill_conditioned_data(N_ROWS, 12, seed=3, standardised=True)
    np.testing.assert_array_equal(ys, y)
    with glm_model(Xs, ys, "logistic"):
        standard = pms.MHSS(cv_order=2)
    assert standard.frame.n_levels == 0  # standardised columns are never zero: no levels
    ratio = whitened / standard.row_constants.sum()
    assert 0.5 < ratio < 2.0, ratio


@pytest.mark.slow
def test_ill_conditioned_posterior_matches_the_laplace_scale(ill_conditioned_step):
    """Sampling works on the ill-conditioned model: no clipping, few rows, sane spread."""
    _, _, model, step = ill_conditioned_step
    with model:
        idata = pm.sample(1500, tune=300, chains=1, step=step, random_seed=1, **SAMPLE)
    stats = idata.sample_stats
    assert int(stats["clipped"].sum()) == 0
    assert float(stats["n_data"].mean()) < 0.03 * N_ROWS
    b = idata.posterior["b"].values[0]
    sd_ratio = b.std(axis=0) / np.sqrt(np.diag(step.frame.cov))
    assert np.all((sd_ratio > 0.8) & (sd_ratio < 1.25)), sd_ratio


# ---------------------------------------------------------------- the reference fit (MAP)
def _whitened_gradient(model, step, theta):
    """``‖Lᵀ∇log π(θ)‖`` from PyMC's own compiled dlogp (independent of the fit)."""
    dlogp = model.compile_dlogp()(step.likelihood.unravel(theta))
    return float(np.linalg.norm(step.frame.whiten_gradient(dlogp)))


def test_reference_is_a_mode_on_ill_conditioned_data(ill_conditioned_step):
    """Newton passes reach the mode: the whitened gradient at θ̂ is within tolerance, and the
    Laplace centre (one Newton step on) is a mode to within a hundredth of a posterior sd."""
    _, _, model, step = ill_conditioned_step
    assert step.reference.newton_distance <= MODE_TOLERANCE
    assert step.reference.full_data_passes <= 12  # N = 1e4: Newton on all rows
    assert _whitened_gradient(model, step, step.theta_hat) <= MODE_TOLERANCE
    assert _whitened_gradient(model, step, step.reference.mode) <= 0.01
    # the proposals and the chains' start centre on that mode
    np.testing.assert_allclose(step.frame.unwhiten(step.laplace_centre), step.reference.mode)


@pytest.mark.slow
def test_rare_columns_missed_by_the_subsample_start_still_reach_the_mode():
    """N = 2e5 with three rare binary columns (25–60 ones): the 1e4-row subsample start sees a
    handful of them and lands ~66 sd from the mode; damped Newton on all rows recovers."""
    X, y = ill_conditioned_data(200_000, 12, seed=0)
    model = glm_model(X, y, "logistic")
    with model:
        step = pms.MHSS()
    assert step.reference.newton_distance <= MODE_TOLERANCE
    assert _whitened_gradient(model, step, step.theta_hat) <= MODE_TOLERANCE
    assert _whitened_gradient(model, step, step.reference.mode) <= 0.01


def test_a_map_point_that_is_not_a_mode_is_refined_with_a_warning(ill_conditioned_step, caplog):
    X, y, model, step = ill_conditioned_step
    off = step.likelihood.unravel(step.theta_hat + 30 * np.sqrt(np.diag(step.frame.cov)))
    with model, caplog.at_level("WARNING", logger="pymc_subsample"):
        refined = pms.MHSS(map_point=off)
    assert "was not a posterior mode" in caplog.text
    # the two Laplace centres agree to a hundredth of a posterior sd
    gap = step.frame.whiten(refined.reference.mode) - step.frame.whiten(step.reference.mode)
    assert np.linalg.norm(gap) < 0.01


def test_a_model_without_a_mode_is_refused():
    """A flat direction (duplicated column, flat priors): no mode, a clear error."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=2000)
    y = rng.binomial(1, 0.5, size=2000)
    with pm.Model():
        b = pm.Flat("b", shape=2)
        pm.Bernoulli("y", logit_p=pm.Data("X", np.column_stack([x, x])) @ b, observed=y)
        with pytest.raises(pms.SubsamplingModelError, match="No posterior mode|not positive"):
            pms.MHSS()
