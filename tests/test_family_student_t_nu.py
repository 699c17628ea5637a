"""Student-t rows with a sampled ν (and σ): three predictors, μ, s = log σ + log ν / 2 and
κ = log ν (``pymc_subsample/bounds/student_t.py``, ``student_t_nu_suprema``).

Checked: every partial of order 2 and 3 against 30-digit numerical derivatives of the
log-density on random boxes, the bounds (Corollary 2's and the shared-scale one) on 10⁴ random
pairs in the ball against remainders from ``scipy.stats.t`` (independent of the package), the
posterior of ``b``, ``σ`` and ``ν`` against NUTS, a fixed σ beside a sampled ν, and the refusal
of a ν whose log is not affine.
"""

from __future__ import annotations

import math

import arviz as az
import mpmath
import numpy as np
import pymc as pm
import pytest
from scipy import stats
from scipy.special import digamma, polygamma

import pymc_subsample as pms
from pymc_subsample.bounds import (
    SharedScaleBound,
    SharedScaleRows,
    combine_multi_partials,
    shared_scale_rows,
    student_t_nu_suprema,
)
from pymc_subsample.errors import SubsamplingModelError
from tests.family_checks import PAIR_ROWS, build, check_posterior, worst_on_random_boxes
from tests.pairs import assert_stored_constants, worst_bound_ratio
from tests.posterior import assert_matches


def _row_mp(y):
    """The row in its predictors μ, s = log(σ√ν) and κ = log ν."""
    def f(mu, s, kappa):
        nu, sigma = mpmath.exp(kappa), mpmath.exp(s - kappa / 2)
        return (mpmath.loggamma((nu + 1) / 2) - mpmath.loggamma(nu / 2)
                - mpmath.log(mpmath.pi * nu * sigma**2) / 2
                - (nu + 1) / 2 * mpmath.log1p((y - mu) ** 2 / (nu * sigma**2)))
    return f


@pytest.mark.parametrize("order", [1, 2])
def test_suprema_bound_the_partials_on_random_boxes(order):
    def draw_case(rng):
        y = float(rng.standard_t(3.0) * 2.0)
        hat = (rng.normal(0.0, 1.0), rng.normal(0.0, 0.7), rng.normal(1.3, 0.8))
        widths = rng.exponential(0.3, size=3)
        radius = float(rng.uniform(0.5, 3.0))
        # a point of the box p̂_j ± r s_j
        point = tuple(h + radius * w * rng.uniform(-1.0, 1.0)
                      for h, w in zip(hat, widths, strict=True))
        sup = student_t_nu_suprema(order, *(np.array([v]) for v in (*widths, y, *hat)), radius)
        return y, point, sup

    # the suprema are not far above what the derivatives reach
    assert worst_on_random_boxes(_row_mp, draw_case, 60, order) > 0.3


def _derivatives(y, mu, s, kappa):
    """Gradient and Hessian (upper triangle) of the row in (μ, s, κ), written out."""
    nu, e = math.exp(kappa), np.exp(-s)
    t = (y - mu) * e
    psi, w, g = np.log1p(t**2), t**2 / (1 + t**2), t / (1 + t**2)
    d1 = 0.5 * (digamma((nu + 1) / 2) - digamma(nu / 2))
    d2 = 0.25 * (polygamma(1, (nu + 1) / 2) - polygamma(1, nu / 2))
    grad = ((nu + 1) * e * g, -1 + (nu + 1) * w, nu * d1 - nu / 2 * psi)
    hess = (-(nu + 1) * e**2 * (1 - t**2) / (1 + t**2) ** 2,
            -(nu + 1) * e * 2 * t / (1 + t**2) ** 2, nu * e * g,
            -2 * (nu + 1) * w * (1 - w), nu * w, nu * d1 + nu**2 * d2 - nu / 2 * psi)
    return grad, hess


def _logpdf(y, mu, s, kappa):
    return stats.t.logpdf(y, np.exp(kappa), loc=mu, scale=np.exp(s - kappa / 2))


def test_written_derivatives_are_central_differences():
    rng = np.random.default_rng(3)
    y, mu = rng.standard_t(3.0, size=50) * 2, rng.normal(size=50)
    p, eps = (mu, 0.4, 1.2), 1e-5
    grad, hess = _derivatives(y, *p)
    pairs = [(j, k) for j in range(3) for k in range(j, 3)]
    for j in range(3):
        up, down = list(p), list(p)
        up[j], down[j] = p[j] + eps, p[j] - eps
        fd = (_logpdf(y, *up) - _logpdf(y, *down)) / (2 * eps)
        np.testing.assert_allclose(grad[j], fd, rtol=1e-6, atol=1e-7)
        fd_grad = (np.array(_derivatives(y, *up)[0]) - np.array(_derivatives(y, *down)[0])) / (
            2 * eps)
        for (a, b), h in zip(pairs, hess, strict=True):
            if a == j:
                np.testing.assert_allclose(h, fd_grad[b], rtol=1e-6, atol=1e-7)


def test_family_closed_forms_are_the_written_derivatives_and_autodiff():
    """The family's closed-form gradient and Hessian (what the pass and the control variates
    compile) against ``_derivatives`` above and against autodiff of its log-density, on rows
    from the centre to far tails (|t| up to 10⁶) and ν from 0.05 to 400."""
    import pytensor
    import pytensor.tensor as pt

    from pymc_subsample.bounds import autodiff_row_terms
    from pymc_subsample.bounds.student_t import StudentTNu

    fam = StudentTNu()
    rng = np.random.default_rng(11)
    n = 400
    y = rng.standard_t(2.0, size=n) * 10.0 ** rng.uniform(-1, 5, size=n)
    mu, s, kappa = rng.normal(size=n), rng.normal(0.0, 1.5, size=n), rng.uniform(-3, 6, size=n)
    ps = tuple(pt.vector(name, dtype="float64") for name in ("mu", "s", "kappa"))
    yv = pt.vector("y", dtype="float64")
    outputs = {}
    for name, (f, grad, hess) in (("closed", fam.row_terms(ps, yv, ())),
                                  ("autodiff", autodiff_row_terms(fam.row_logp, ps, yv, ()))):
        fn = pytensor.function([*ps, yv], [f, *grad, *hess], mode="FAST_COMPILE")
        outputs[name] = fn(mu, s, kappa, y)
    rows = [_derivatives(y[i], mu[i], s[i], kappa[i]) for i in range(n)]
    written = [np.array([r[0][j] for r in rows]) for j in range(3)] + [
        np.array([r[1][j] for r in rows]) for j in range(6)]
    for k, (ours, auto) in enumerate(zip(outputs["closed"], outputs["autodiff"], strict=True)):
        if k == 0:
            np.testing.assert_array_equal(ours, auto)  # f itself is the family's logp
            continue
        scale = 1.0 + np.abs(auto)
        assert np.max(np.abs(ours - auto) / scale) < 1e-9, k
        assert np.max(np.abs(ours - written[k - 1]) / scale) < 1e-9, k


def _check_bound_on_random_pairs(X, y, step, order):
    """Corollary 2's bound and the shared-scale one on 10⁴ pairs in the ball; θ = (b, log σ,
    log ν), the predictors μ = Xb, s = log σ + log ν / 2 and κ = log ν."""
    frame, dim, d = step.frame, step.likelihood.dim, X.shape[1]
    first = np.hstack([X, np.zeros((len(X), 2))])
    xt1 = frame.whiten_rows(first)
    rows = np.zeros((2, dim))
    rows[0, d:], rows[1, d + 1] = (1.0, 0.5), 1.0
    shared = frame.whiten_rows(rows)
    s1 = np.linalg.norm(xt1, axis=1)
    s2, s3 = (np.full(len(y), v) for v in np.linalg.norm(shared, axis=1))
    mu_hat, (s_hat, nu_hat) = first @ frame.theta_hat, rows @ frame.theta_hat
    radius = step.region_radius
    sup = student_t_nu_suprema(order, s1, s2, s3, y, mu_hat, np.full(len(y), s_hat),
                               np.full(len(y), nu_hat), radius)
    consts = combine_multi_partials(order, sup, (s1, s2, s3))
    weights = shared_scale_rows(order, sup, s1)
    bound = SharedScaleBound(SharedScaleRows(weights, consts.astype(np.float32), order, shared),
                             dim)
    if order == 2:  # the step keeps the shared-scale bound, with these weights and rows
        assert isinstance(step.rate_bound, SharedScaleBound)
        assert_stored_constants(step.rate_bound.weights[PAIR_ROWS].ravel(), weights.ravel(),
                                rtol=1e-6)
        np.testing.assert_allclose(step.rate_bound.shared_row, shared, rtol=1e-12)
    grad, hess = (np.array(v)[:, :, None] for v in _derivatives(y, mu_hat, s_hat, nu_hat))
    pairs = [(j, k) for j in range(3) for k in range(j, 3)]

    def remainders(phi, phi_new):
        u = np.stack([xt1 @ phi.T, np.broadcast_to(phi @ shared[0], (len(y), len(phi))),
                      np.broadcast_to(phi @ shared[1], (len(y), len(phi)))])
        u_new = np.stack([xt1 @ phi_new.T,
                          np.broadcast_to(phi_new @ shared[0], (len(y), len(phi))),
                          np.broadcast_to(phi_new @ shared[1], (len(y), len(phi)))])
        hat = (mu_hat[:, None], s_hat, nu_hat)
        exact = (_logpdf(y[:, None], *(h + v for h, v in zip(hat, u_new, strict=True)))
                 - _logpdf(y[:, None], *(h + v for h, v in zip(hat, u, strict=True))))
        taylor = sum(g * (b - a) for g, a, b in zip(grad, u, u_new, strict=True))
        if order == 2:
            for (j, k), h in zip(pairs, hess, strict=True):
                taylor = taylor + (0.5 if j == k else 1.0) * h * (
                    u_new[j] * u_new[k] - u[j] * u[k])
        return exact - taylor, exact

    every_row = np.arange(len(y))
    for rates in (None, lambda a, b: bound.rates(a, b).row_rates(every_row)):
        ratio = worst_bound_ratio(remainders, consts, dim, radius, order, sharp=False, seed=2,
                                  rates=rates)
        assert 1e-3 < ratio <= 1.0, f"max |ξ|/bound = {ratio}"


@pytest.mark.slow
def test_mhss_on_student_t_rows_with_sampled_nu_and_sigma():
    """One build, then the bound on 10⁴ pairs per order and the posterior against NUTS."""
    X, y, model, step = build("student_t_nu")
    assert not step.sharp_angles and math.isfinite(step.region_radius)
    for order in (1, 2):
        _check_bound_on_random_pairs(X[PAIR_ROWS], y[PAIR_ROWS].astype(float), step, order)
    # three predictors: more rows than a two-predictor family at this N (10⁶ rows: the
    # benchmark)
    check_posterior(model, step, "student_t_nu", others=("sigma", "nu"), max_rows=40)


def test_fixed_sigma_beside_a_sampled_nu():
    """σ = 1 fixed: the second predictor ``s = log σ + κ/2`` moves with ``κ`` only, and the
    posterior of ν is NUTS's."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(3000, 2))
    y = X @ np.array([0.5, -1.0]) + rng.standard_t(4.0, size=3000)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=2)
        pm.StudentT("obs", nu=pm.Gamma("nu", 2, 0.1), mu=pm.Data("X", X) @ b, sigma=1,
                    observed=y)
        step = pms.MHSS()
    assert step._reference_pass.terms[0].family.name == "student_t_nu"
    assert isinstance(step.rate_bound, SharedScaleBound)
    s_row, kappa_row = step.rate_bound.shared_row  # s = log σ + κ/2 with log σ fixed
    np.testing.assert_allclose(s_row, 0.5 * kappa_row, rtol=1e-12)
    with model:
        idata = pm.sample(2000, tune=500, chains=2, step=step, random_seed=2,
                          progressbar=False, compute_convergence_checks=False)
        ref = pm.sample(1000, tune=1000, chains=2, random_seed=2, progressbar=False,
                        compute_convergence_checks=False)
    post = ref.posterior["nu"]
    assert_matches(idata, float(post.mean()), float(post.std()),
                   float(az.mcse(ref, var_names=["nu"])["nu"]), var="nu")


def test_log_nu_not_affine_is_refused():
    X = np.random.default_rng(0).normal(size=(50, 2))
    with pm.Model():
        b = pm.Normal("b", 0, 1, shape=2)
        pm.StudentT("obs", nu=1 + pm.Exponential("nu_minus_one", 0.1),
                    mu=pm.Data("X", X) @ b, sigma=pm.HalfNormal("s"), observed=np.zeros(50))
        with pytest.raises(SubsamplingModelError,
                           match=r"'obs'.*sampled nu.*log\(nu\) is not affine.*UserBound"):
            pms.MHSS()
