"""Gamma rows with the log link and a fixed shape (``pymc_subsample/bounds/gamma.py``).

``f'' = −α y e^{−η} = −f'''`` is unbounded, so the constants hold on a region of the Laplace
frame: checked here on random η-intervals against 30-digit numerical derivatives, then the MHSS
bound on 10⁴ random pairs in the region and the posterior against NUTS
(``tests/family_checks.py``), and the ways of writing the model that are read.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pymc as pm
import pytest
from scipy import stats

from pymc_subsample.bounds import FAMILIES, REGION_FAMILIES, family, glm_loglik
from pymc_subsample.datasets import GAMMA_SHAPE as ALPHA
from pymc_subsample.model.glm import detect_glm_terms
from pymc_subsample.model.likelihood import SubsampledLikelihood
from tests.family_checks import (
    build,
    check_pairs,
    check_posterior,
    check_reference_derivatives,
    check_sup_on_intervals,
)


def f(eta, y):
    return stats.gamma.logpdf(y, ALPHA, scale=np.exp(eta) / ALPHA)


def f1(eta, y):
    return ALPHA * (y * np.exp(-eta) - 1.0)


def f2(eta, y):
    return -ALPHA * y * np.exp(-eta)


def test_loglik_and_reference_derivatives():
    rng = np.random.default_rng(1)
    eta, y = rng.normal(0.0, 3.0, 500), rng.gamma(2.0, 1.0, 500)
    np.testing.assert_allclose(glm_loglik("gamma_log", eta, y, params=(ALPHA,)), f(eta, y),
                               rtol=1e-10)
    check_reference_derivatives(f, f1, f2, eta, y)


@pytest.mark.parametrize("order", [1, 2])
def test_sup_on_an_interval_bounds_the_derivative_inside_it(order):
    assert "gamma_log" in FAMILIES and "gamma_log" in REGION_FAMILIES
    check_sup_on_intervals(
        "gamma_log", lambda y: (lambda e: -ALPHA * e - ALPHA * y * mpmath.exp(-e)),
        lambda rng: rng.gamma(2.0, 2.0), order, (ALPHA,))
    fam = family("gamma_log")
    # at the interval's lower end the supremum is attained
    assert fam.derivative_sup(order, np.array([2.0]), ALPHA, lower=0.0, upper=1.0)[0] == 4.0
    assert math.isinf(fam.derivative_sup(order, np.array([2.0]), ALPHA)[0])


@pytest.mark.parametrize("write", ["alpha / exp", "alpha * exp(-eta)", "offset"])
def test_the_ways_of_writing_the_mean_are_read(write):
    rng = np.random.default_rng(0)
    X, t = rng.normal(size=(40, 2)), rng.uniform(1.0, 3.0, 40)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        eta = pm.Data("X", X) @ b
        beta = {"alpha / exp": ALPHA / pm.math.exp(eta),
                "alpha * exp(-eta)": ALPHA * pm.math.exp(-eta),
                "offset": ALPHA / (t * pm.math.exp(eta))}[write]
        pm.Gamma("y", alpha=ALPHA, beta=beta, observed=rng.gamma(2.0, 1.0, 40))
    lik = SubsampledLikelihood(model)
    (term,) = detect_glm_terms(lik)
    assert term.family.name == "gamma_log"
    theta = np.array([0.3, -0.2])
    eta_value = lik.compile([lik.theta, lik.idx], term.eta)(theta, np.arange(40))
    expected = X @ theta + (np.log(t) if write == "offset" else 0.0)
    np.testing.assert_allclose(eta_value, expected, rtol=1e-12, atol=1e-12)


def test_mhss_on_gamma_rows():
    X, y, model, step = build("gamma_log")
    assert math.isfinite(step.region_radius)
    for order in (1, 2):
        check_pairs(X, y, step, "gamma_log", order, (ALPHA,), f, f1, f2)
    check_posterior(model, step, "gamma_log")
