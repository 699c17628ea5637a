"""MHSS for a Normal likelihood with a sampled σ: two predictors (μ_i and log σ), region bounds.

``bounds.normal_scale_row_constants`` bounds the control-variate error of rows
``f(μ, λ) = −½(y − μ)² e^{−2λ} − λ`` on the ball ``‖φ‖ ≤ r``, with ``M`` without Lemma 1's angle
factors. Checked: the bound on 10⁴ random pairs in the ball against remainders computed here
from the Normal formulas (independent of the package), and the posterior of ``b`` and ``σ``
against NUTS (``tests/make_glm_references.py``). One test builds the step once and makes every
check, so that a parallel run compiles it on one worker only.
"""

from __future__ import annotations

import json

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.bounds import normal_scale_row_constants
from pymc_subsample.datasets import glm_data, glm_model
from tests.make_glm_references import reference_path
from tests.pairs import worst_bound_ratio
from tests.posterior import SAMPLE, assert_matches

N_ROWS, DIM, SEED = 20_000, 4, 9
#: The rows the pair test evaluates (a random tenth: the bound holds row by row).
PAIR_ROWS = np.sort(np.random.default_rng(0).choice(N_ROWS, size=2000, replace=False))


def _build():
    X, y = glm_data(N_ROWS, DIM, "gaussian_scale", seed=SEED)
    model = glm_model(X, y, "gaussian_scale")
    with model:
        step = pms.MHSS(cv_order=2)
    return X, y, model, step


def _check_reads_two_predictors(step):
    assert not step.sharp_angles and np.isfinite(step.region_radius)
    assert step.setup_profile["full_data_passes"] >= 2  # the reference fit + the constants


def _check_bound_on_random_pairs(X, y, step, order):
    """10⁴ pairs (φ, φ') in the ball, half of them close pairs: |ξ_i| ≤ c_i M on 2000 random
    rows."""
    X, y = X[PAIR_ROWS], y[PAIR_ROWS]
    frame, r, dim = step.frame, step.region_radius, step.likelihood.dim
    # θ = (b, log σ): the two predictors' rows, whitened
    a_mu = np.hstack([X, np.zeros((len(y), 1))])
    a_ls = np.zeros(dim)
    a_ls[-1] = 1.0
    xt_mu, xt_ls = frame.whiten_rows(a_mu), frame.whiten_rows(a_ls[None, :])[0]
    mu_hat, ls_hat = a_mu @ frame.theta_hat, frame.theta_hat[-1]

    def f(mu, ls):
        return -0.5 * (y[:, None] - mu) ** 2 * np.exp(-2.0 * ls) - ls

    e = np.exp(-2.0 * ls_hat)
    res = (y - mu_hat)[:, None]
    g_mu, g_ls = res * e, res**2 * e - 1.0
    h_mm, h_ml, h_ll = -e, -2.0 * res * e, -2.0 * res**2 * e
    consts = normal_scale_row_constants(
        order, np.linalg.norm(xt_mu, axis=1), np.full(len(y), np.linalg.norm(xt_ls)),
        np.abs(y - mu_hat), np.full(len(y), ls_hat), r)
    if order == 2:  # the step's own constants are the formula's
        np.testing.assert_allclose(step.row_constants[PAIR_ROWS], consts, rtol=1e-8)

    def quad(du, dl):
        return h_mm * du**2 + 2.0 * h_ml * du * dl + h_ll * dl**2

    def remainders(phi, phi_new):
        u, u_new = xt_mu @ phi.T, xt_mu @ phi_new.T  # μ − μ̂, (n, pairs)
        v, v_new = phi @ xt_ls, phi_new @ xt_ls  # λ − λ̂, (pairs,)
        exact = f(mu_hat[:, None] + u_new, ls_hat + v_new) - f(mu_hat[:, None] + u, ls_hat + v)
        taylor = g_mu * (u_new - u) + g_ls * (v_new - v)
        if order == 2:
            taylor = taylor + 0.5 * (quad(u_new, v_new) - quad(u, v))
        return exact - taylor, exact

    worst = worst_bound_ratio(remainders, consts, dim, r, order, sharp=False, seed=2)
    assert worst <= 1.0, f"bound violated: max |ξ|/(c M) = {worst}"
    assert worst > 1e-3  # the pairs reach where the bound matters


def _check_matches_nuts(model, step):
    ref = np.load(reference_path("gaussian_scale", N_ROWS, DIM), allow_pickle=False)
    settings = json.loads(str(ref["settings"]))
    assert (settings["rows"], settings["dim"], settings["data_seed"]) == (N_ROWS, DIM, SEED)
    with model:
        idata = pm.sample(3000, tune=1000, chains=2, step=step, random_seed=13, **SAMPLE)
    assert_matches(idata, ref["mean"], ref["sd"], ref["mcse"])
    assert_matches(idata, ref["sigma_mean"], ref["sigma_sd"], ref["sigma_mcse"], var="sigma")
    stats = idata.sample_stats
    assert int(stats["clipped"].sum()) == 0
    assert float(stats["full_data_fallback"].mean()) < 1e-3
    assert float(stats["n_data"].mean()) < 10


@pytest.mark.slow
def test_normal_with_sampled_sigma():
    """One build (compiling it is most of the time), then every check on the same step."""
    X, y, model, step = _build()
    _check_reads_two_predictors(step)
    for order in (1, 2):
        _check_bound_on_random_pairs(X, y, step, order)
    _check_matches_nuts(model, step)
