"""MHSS for a Normal likelihood with a sampled σ: two predictors (μ_i and log σ), region bounds.

``bounds.normal_scale_row_constants`` bounds the control-variate error of rows
``f(μ, λ) = −½(y − μ)² e^{−2λ} − λ`` on the ball ``‖φ‖ ≤ r``, with ``M`` without Lemma 1's angle
factors. Checked: the bound on 10⁴ random pairs in the ball against remainders computed here
from the Normal formulas (independent of the package), and the posterior of ``b`` and ``σ``
against NUTS (``tests/make_glm_references.py``). One test builds the step once and makes every
check, so that a parallel run compiles it on one worker only.
"""

from __future__ import annotations

import numpy as np
import pytest

from pymc_subsample.bounds import normal_scale_row_constants
from tests.family_checks import PAIR_ROWS, build, check_posterior, check_two_predictor_pairs


def _check_reads_two_predictors(step):
    assert not step.sharp_angles and np.isfinite(step.region_radius)
    assert step.setup_profile["full_data_passes"] >= 2  # the reference fit + the constants


def _check_bound_on_random_pairs(X, y, step, order):
    """10⁴ pairs (φ, φ') in the ball, half of them close pairs: |ξ_i| ≤ c_i M on 2000 random
    rows."""
    X, y = X[PAIR_ROWS], y[PAIR_ROWS]
    frame, dim = step.frame, step.likelihood.dim
    # θ = (b, log σ): the two predictors' rows
    a_mu = np.hstack([X, np.zeros((len(y), 1))])
    a_ls = np.zeros(dim)
    a_ls[-1] = 1.0
    mu_hat, ls_hat = a_mu @ frame.theta_hat, frame.theta_hat[-1]

    def f(mu, ls):
        return -0.5 * (y[:, None] - mu) ** 2 * np.exp(-2.0 * ls) - ls

    e = np.exp(-2.0 * ls_hat)
    res = (y - mu_hat)[:, None]
    consts = normal_scale_row_constants(
        order, np.linalg.norm(frame.whiten_rows(a_mu), axis=1),
        np.full(len(y), np.linalg.norm(frame.whiten_rows(a_ls[None, :])[0])),
        np.abs(y - mu_hat), np.full(len(y), ls_hat), step.region_radius)
    check_two_predictor_pairs(step, a_mu, a_ls, f, (res * e, res**2 * e - 1.0),
                              (-e, -2.0 * res * e, -2.0 * res**2 * e), consts, order)


@pytest.mark.slow
def test_normal_with_sampled_sigma():
    """One build (compiling it is most of the time), then every check on the same step."""
    X, y, model, step = build("gaussian_scale")
    _check_reads_two_predictors(step)
    for order in (1, 2):
        _check_bound_on_random_pairs(X, y, step, order)
    check_posterior(model, step, "gaussian_scale", others=("sigma",))
