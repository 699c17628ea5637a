"""Student-t rows with fixed ν and a sampled σ: two predictors, μ and λ = log σ
(``pymc_subsample/bounds/student_t.py``, ``student_t_scale_row_constants``).

Checked: every mixed partial of order 2 and 3 against 30-digit numerical derivatives of the
log-density (the scaling ``(ν + 1) ν^{−a/2} e^{−aλ} P_{a,b}(q)`` and the suprema of ``P``), the
bound on 10⁴ random pairs in the ball against remainders from ``scipy.stats.t`` (independent of
the package), and the posterior of ``b`` and ``σ`` against NUTS.
"""

from __future__ import annotations

import json
import math

import mpmath
import numpy as np
import pymc as pm
import pytest
from scipy import stats

import pymc_subsample as pms
from pymc_subsample.bounds.student_t import SCALE_SUPREMA, student_t_scale_row_constants
from pymc_subsample.datasets import STUDENT_NU as NU
from pymc_subsample.errors import SubsamplingModelError
from tests.family_checks import DIM, N_ROWS, PAIR_ROWS, SEED, build
from tests.make_glm_references import reference_path
from tests.pairs import worst_bound_ratio
from tests.posterior import SAMPLE, assert_matches


def _row_mp(y):
    def f(mu, lam):
        return (-(NU + 1) / 2 * mpmath.log(1 + (y - mu) ** 2 * mpmath.exp(-2 * lam) / NU) - lam)
    return f


@pytest.mark.parametrize("a, b", sorted(SCALE_SUPREMA))
def test_mixed_partials_scale_and_their_suprema(a, b):
    """∂^a_μ ∂^b_λ f = (ν+1) ν^{−a/2} e^{−aλ} P(q), q = (y − μ)e^{−λ}/√ν, with sup |P| as given."""
    worst = 0.0
    with mpmath.workdps(30):
        for lam in (-0.7, 0.4):
            f = _row_mp(0.0)
            for q in np.concatenate([np.linspace(-3.0, 3.0, 601), np.linspace(-20.0, 20.0, 41)]):
                mu = -q * math.sqrt(NU) * math.exp(lam)  # y = 0
                d = float(mpmath.diff(f, (mpmath.mpf(mu), mpmath.mpf(lam)), (a, b)))
                p = d / ((NU + 1) * NU ** (-a / 2) * math.exp(-a * lam))
                worst = max(worst, abs(p))
    assert worst <= SCALE_SUPREMA[(a, b)] * (1 + 1e-9)
    assert worst >= 0.999 * SCALE_SUPREMA[(a, b)]


def test_sampled_nu_beside_a_sampled_sigma_is_refused():
    X = np.random.default_rng(0).normal(size=(50, 2))
    with pm.Model():
        b = pm.Normal("b", 0, 1, shape=2)
        pm.StudentT("obs", nu=pm.Gamma("nu", 2, 0.1), mu=pm.Data("X", X) @ b,
                    sigma=pm.HalfNormal("s"), observed=np.zeros(50))
        with pytest.raises(SubsamplingModelError,
                           match="'obs'.*sigma and its nu are both sampled.*UserBound"):
            pms.MHSS()


def _check_bound_on_random_pairs(X, y, step, order):
    X, y = X[PAIR_ROWS], y[PAIR_ROWS]
    frame, r, dim = step.frame, step.region_radius, step.likelihood.dim
    a_mu = np.hstack([X, np.zeros((len(y), 1))])  # θ = (b, log σ)
    a_ls = np.zeros(dim)
    a_ls[-1] = 1.0
    xt_mu, xt_ls = frame.whiten_rows(a_mu), frame.whiten_rows(a_ls[None, :])[0]
    mu_hat, ls_hat = a_mu @ frame.theta_hat, frame.theta_hat[-1]

    def f(mu, ls):
        return stats.t.logpdf(y[:, None], NU, loc=mu, scale=np.exp(ls))

    # gradient and Hessian at (μ̂, λ̂), written out and checked by finite differences below
    q = (y - mu_hat) * math.exp(-ls_hat) / math.sqrt(NU)
    e = math.exp(-ls_hat) / math.sqrt(NU)
    g_mu = ((NU + 1) * q / (1 + q**2) * e)[:, None]
    g_ls = ((NU + 1) * q**2 / (1 + q**2) - 1)[:, None]
    h_mm = ((NU + 1) * e**2 * (q**2 - 1) / (1 + q**2) ** 2)[:, None]
    h_ml = ((NU + 1) * e * -2 * q / (1 + q**2) ** 2)[:, None]
    h_ll = ((NU + 1) * -2 * q**2 / (1 + q**2) ** 2)[:, None]
    eps = 1e-5
    fd = (f(mu_hat[:, None] + eps, ls_hat) - f(mu_hat[:, None] - eps, ls_hat)) / (2 * eps)
    np.testing.assert_allclose(g_mu, fd, rtol=1e-5, atol=1e-6)
    fd = (f(mu_hat[:, None], ls_hat + eps) - f(mu_hat[:, None], ls_hat - eps)) / (2 * eps)
    np.testing.assert_allclose(g_ls, fd, rtol=1e-5, atol=1e-6)
    consts = student_t_scale_row_constants(
        order, np.linalg.norm(xt_mu, axis=1), np.full(len(y), np.linalg.norm(xt_ls)),
        np.full(len(y), ls_hat), r, NU)
    if order == 2:  # the step's own constants are the formula's
        np.testing.assert_allclose(step.row_constants[PAIR_ROWS], consts, rtol=1e-8)

    def quad(du, dl):
        return h_mm * du**2 + 2.0 * h_ml * du * dl + h_ll * dl**2

    def remainders(phi, phi_new):
        u, u_new = xt_mu @ phi.T, xt_mu @ phi_new.T
        v, v_new = phi @ xt_ls, phi_new @ xt_ls
        exact = f(mu_hat[:, None] + u_new, ls_hat + v_new) - f(mu_hat[:, None] + u, ls_hat + v)
        taylor = g_mu * (u_new - u) + g_ls * (v_new - v)
        if order == 2:
            taylor = taylor + 0.5 * (quad(u_new, v_new) - quad(u, v))
        return exact - taylor, exact

    worst = worst_bound_ratio(remainders, consts, dim, r, order, sharp=False, seed=2)
    assert worst <= 1.0, f"bound violated: max |ξ|/(c M) = {worst}"
    assert worst > 1e-3  # the pairs reach where the bound matters


@pytest.mark.slow
def test_mhss_on_student_t_rows_with_a_sampled_sigma():
    """One build, then the bound on 10⁴ pairs per order and the posterior against NUTS."""
    X, y, model, step = build("student_t_scale")
    assert not step.sharp_angles and math.isfinite(step.region_radius)
    for order in (1, 2):
        _check_bound_on_random_pairs(X, y, step, order)
    ref = np.load(reference_path("student_t_scale", N_ROWS, DIM), allow_pickle=False)
    settings = json.loads(str(ref["settings"]))
    assert (settings["rows"], settings["dim"], settings["data_seed"]) == (N_ROWS, DIM, SEED)
    with model:
        idata = pm.sample(3000, tune=1000, chains=2, step=step, random_seed=13, **SAMPLE)
    assert_matches(idata, ref["mean"], ref["sd"], ref["mcse"])
    assert_matches(idata, ref["sigma_mean"], ref["sigma_sd"], ref["sigma_mcse"], var="sigma")
    stats_ = idata.sample_stats
    assert int(stats_["clipped"].sum()) == 0
    assert float(stats_["full_data_fallback"].mean()) < 1e-3
    # two predictors and no angle factors: more rows than a one-predictor family at this N
    assert float(stats_["n_data"].mean()) < 20
