"""The reference point of a funnel: the hyperparameters at their Laplace-marginal mode.

A Normal–Normal hierarchy, ``ȳ_k ~ N(u_k, 1/n_k)``, ``u_k ~ N(0, e^{2τ})``, ``τ ~ N(0, 1)``, has
no joint mode (``u = 0``, ``τ → −∞``), and its Laplace marginal of ``τ`` is exact: the marginal
mode and curvature are those of ``Σ log N(ȳ_k; 0, e^{2τ} + 1/n_k) − τ²/2``.
"""

import numpy as np
import pytest
import scipy.optimize
from scipy import stats

import pymc_subsample as pms
from pymc_subsample.datasets import random_effects_data, random_effects_model
from pymc_subsample.model.data_pass import PassResult
from pymc_subsample.model.frame import laplace_frame
from pymc_subsample.model.levels import LevelHessian, LevelLayout
from pymc_subsample.model.marginal_mode import (
    HYPER_TOLERANCE,
    marginal_mode,
    surrogate_marginal_mode,
)
from tests.family_checks import check_posterior
from tests.make_glm_references import MANY_GROUPS

G = 80
RNG = np.random.default_rng(3)
N_ROWS = RNG.integers(1, 6, G).astype(float)
Y_BAR = RNG.normal(0.0, 0.3, G) + RNG.normal(size=G) / np.sqrt(N_ROWS)
HYPER = np.r_[np.zeros(G, dtype=bool), True]


def exact_marginal(tau: float) -> float:
    return float(np.sum(stats.norm.logpdf(Y_BAR, 0.0, np.sqrt(np.exp(2 * tau) + 1 / N_ROWS)))
                 - tau**2 / 2)


def conditional_mode(structured: bool):
    """``θ ↦ (log π(θ*), θ*, frame of P*)`` in closed form, ``P*`` dense or a
    :class:`LevelHessian`."""
    def solve(theta):
        tau = theta[-1]
        prior_precision = np.exp(-2 * tau)
        u = N_ROWS * Y_BAR / (N_ROWS + prior_precision)
        value = (-0.5 * np.sum(N_ROWS * (Y_BAR - u) ** 2) - G * tau
                 - 0.5 * prior_precision * np.sum(u**2) - tau**2 / 2)
        diag = N_ROWS + prior_precision
        if structured:
            prec = LevelHessian(diag, np.zeros((G, 1)), np.ones((1, 1)),
                                LevelLayout(0, G, G + 1))
        else:
            prec = np.diag(np.r_[diag, 1.0])
        return value, np.r_[u, tau], laplace_frame(np.r_[u, tau], prec)
    return solve


@pytest.mark.parametrize("structured", [False, True])
def test_marginal_mode_is_the_exact_marginal_mode(structured):
    """``ĥ`` within Nelder–Mead's tolerance of the exact marginal's maximum, the levels at
    their conditional mode there, and the frame's precision of ``τ`` the exact marginal's
    curvature (to the central differences' ``O(h²)``), uncoupled from the levels."""
    found = marginal_mode(conditional_mode(structured), HYPER, np.zeros(G + 1))
    best = scipy.optimize.minimize_scalar(lambda t: -exact_marginal(t), bounds=(-5, 2),
                                          method="bounded", options={"xatol": 1e-8}).x
    tau = found.theta[-1]
    assert abs(tau - best) < HYPER_TOLERANCE
    np.testing.assert_allclose(found.theta[:G], conditional_mode(False)(found.theta)[1][:G])
    h = 1e-3
    curvature = -(exact_marginal(tau + h) - 2 * exact_marginal(tau)
                  + exact_marginal(tau - h)) / h**2
    precision = found.frame.precision
    dense = precision.dense() if structured else precision
    np.testing.assert_allclose(dense[-1, -1], curvature, rtol=0.02)
    np.testing.assert_array_equal(dense[-1, :G], 0.0)
    assert found.evaluations < 60


def test_two_scales_are_found_together():
    """Two independent hierarchies, one scale each (Nelder–Mead): the marginal separates, so
    each ``τ̂`` is its own hierarchy's exact maximum."""
    half = G // 2
    hyper = np.r_[np.zeros(G, dtype=bool), True, True]

    def solve(theta):
        taus = theta[G:]
        prior_precision = np.exp(-2 * np.repeat(taus, half))
        u = N_ROWS * Y_BAR / (N_ROWS + prior_precision)
        value = (-0.5 * np.sum(N_ROWS * (Y_BAR - u) ** 2) - half * taus.sum()
                 - 0.5 * np.sum(prior_precision * u**2) - np.sum(taus**2) / 2)
        return value, np.r_[u, taus], laplace_frame(
            np.r_[u, taus], np.diag(np.r_[N_ROWS + prior_precision, 1.0, 1.0]))

    found = marginal_mode(solve, hyper, np.zeros(G + 2))
    for j, rows in enumerate((slice(0, half), slice(half, G))):
        def exact(t, rows=rows):
            return float(np.sum(stats.norm.logpdf(
                Y_BAR[rows], 0.0, np.sqrt(np.exp(2 * t) + 1 / N_ROWS[rows]))) - t**2 / 2)
        best = scipy.optimize.minimize_scalar(lambda t: -exact(t), bounds=(-5, 2),
                                              method="bounded", options={"xatol": 1e-8}).x
        assert abs(found.theta[G + j] - best) < 2 * HYPER_TOLERANCE


def test_a_dense_funnel_gets_a_reference():
    """Fewer levels than split off (a dense pass): 40 levels of 5 rows, no joint mode; the
    reference is the scale's marginal mode, inside the scale's posterior."""
    with random_effects_model(*random_effects_data(200, 2, 40, seed=3), groups=40):
        step = pms.MHSS(progressbar=False)
    assert step.setup.reference_pass.levels is None
    assert step.setup.reference.newton_distance > 1.0  # not a joint mode: the scale's is not 0
    point = step.setup.likelihood.unravel(step.frame.theta_hat)
    assert 0.05 < np.exp(point["s_log__"]) < 1.5


@pytest.mark.slow
def test_a_funnel_model_matches_nuts():
    """50 rows a level over 64 levels: the centred joint posterior has no mode (Newton runs
    down the funnel; the step was refused until 2026-11-27). The reference is the scale's
    marginal mode, inside its posterior, and the chain matches NumPyro's NUTS on the model's
    non-centred twin in every coordinate (``b``, ``u``, ``s``)."""
    with random_effects_model(*random_effects_data(3200, 3, MANY_GROUPS, seed=5),
                              groups=MANY_GROUPS) as model:
        step = pms.MHSS()
    point = step.setup.likelihood.unravel(step.frame.theta_hat)
    assert 0.3 < np.exp(point["s_log__"]) < 0.8  # posterior 0.54 ± 0.07
    assert step.level_moves is not None
    check_posterior(model, step, "random_effects_funnel", others=("u", "s"), max_rows=40,
                    case=(3200, 3, 5))


class _NormalRows:
    """The Normal–Normal hierarchy's data as a pass: ``Σ_k −n_k(ȳ_k − u_k)²/2`` (exactly
    quadratic in ``u``, so its expansion at any point is itself), counting its passes."""

    levels = None

    def __init__(self) -> None:
        self.n_passes = 0

    def full(self, theta):
        self.n_passes += 1
        u = theta[:G]
        grad = np.r_[N_ROWS * (Y_BAR - u), 0.0]
        hess = LevelHessian(-N_ROWS, np.zeros((G, 1)), np.zeros((1, 1)), LevelLayout(0, G, G + 1))
        return PassResult(float(-0.5 * np.sum(N_ROWS * (Y_BAR - u) ** 2)), grad, hess, None)


def _log_post(theta, res):
    """Prior ``u_k ~ N(0, e^{2τ})`` (constants dropped), ``τ ~ N(0, 1)``, plus the pass."""
    u, tau = theta[:G], theta[G]
    w = np.exp(-2 * tau)
    value = -G * tau - 0.5 * w * np.sum(u**2) - tau**2 / 2
    grad = np.r_[-w * u, -G + w * np.sum(u**2) - tau]
    hess = LevelHessian(np.full(G, -w), (2 * w * u)[:, None],
                        np.array([[-2 * w * np.sum(u**2) - 1.0]]), LevelLayout(0, G, G + 1))
    return value + res.loglik, grad + res.grad, -(hess + res.hess)


def test_surrogate_marginal_mode_is_the_exact_marginal_mode_in_a_few_passes():
    """Data whose log-likelihood is quadratic: the expansion is exact, so the marginal mode
    found on it is the exact marginal's maximum, in two passes (the second confirms)."""
    rows = _NormalRows()
    start = np.zeros(G + 1)
    found = surrogate_marginal_mode(rows, _log_post, HYPER, start, start, rows.full(start),
                                     tolerance=0.25)
    best = scipy.optimize.minimize_scalar(lambda t: -exact_marginal(t), bounds=(-5, 2),
                                          method="bounded", options={"xatol": 1e-8}).x
    assert abs(found.theta[-1] - best) < HYPER_TOLERANCE
    np.testing.assert_allclose(found.theta[:G], conditional_mode(False)(found.theta)[1][:G],
                               atol=1e-6)
    assert rows.n_passes <= 3
