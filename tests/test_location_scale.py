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
                                        np.full(len(y), ls_hat), step.region_radius)
    check_two_predictor_pairs(step, rows, f, (res * e, res**2 * e - 1.0),
                              (-e, -2.0 * res * e, -2.0 * res**2 * e), consts, order)


@pytest.mark.slow
def test_normal_with_sampled_sigma():
    step = check_two_predictor_family("gaussian_scale", _check_bound_on_random_pairs,
                                      others=("sigma",))
    assert step.setup_profile["full_data_passes"] >= 2  # the reference fit + the constants
