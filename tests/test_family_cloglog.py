"""Bernoulli rows with the complementary log-log link (``pymc_subsample/bounds/bernoulli.py``).

``y = 1`` rows have bounded derivatives (constants 0.4126 and 0.4261, checked here against
30-digit numerical derivatives); ``y = 0`` rows are ``f = −e^η``, unbounded, so the family's
constants hold on a region: checked on random η-intervals, then the MHSS bound on 10⁴ random
pairs in the region and the posterior against NUTS (``tests/family_checks.py``).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from scipy import stats

from pymc_subsample.bounds import family, glm_loglik
from pymc_subsample.model.glm import detect_glm_terms
from pymc_subsample.model.likelihood import SubsampledLikelihood
from tests.family_checks import (
    build,
    check_pairs,
    check_posterior,
    check_reference_derivatives,
    check_sup_on_intervals,
    sup_on_grid,
)


def f(eta, y):
    u = np.exp(eta)
    return np.where(y == 1.0, np.log(-np.expm1(-u)), -u)


def f1(eta, y):
    u = np.exp(eta)
    return np.where(y == 1.0, u / np.expm1(u), -u)


def f2(eta, y):
    u = np.exp(eta)
    return np.where(y == 1.0, u * (np.expm1(u) - u * np.exp(u)) / np.expm1(u) ** 2, -u)


def _row(y):
    if y == 1.0:
        return lambda e: mpmath.log(1 - mpmath.exp(-mpmath.exp(e)))
    return lambda e: -mpmath.exp(e)


def test_loglik_and_reference_derivatives():
    rng = np.random.default_rng(1)
    eta, y = rng.normal(0.0, 2.0, 500), rng.integers(0, 2, 500).astype(float)
    np.testing.assert_allclose(glm_loglik("bernoulli_cloglog", eta, y), f(eta, y), rtol=1e-10)
    # scipy's log(1 − p) is -inf once p rounds to 1: compared where η is moderate
    mid = np.abs(eta) < 2.5
    np.testing.assert_allclose(f(eta[mid], y[mid]),
                               stats.bernoulli.logpmf(y[mid], -np.expm1(-np.exp(eta[mid]))),
                               rtol=1e-9)
    check_reference_derivatives(f, f1, f2, eta, y)


@pytest.mark.parametrize("order", [1, 2])
def test_y_one_constants_bound_and_nearly_attain_the_derivatives(order):
    sup = sup_on_grid(_row(1.0), order, np.linspace(-3.0, 3.0, 601))
    bound = family("bernoulli_cloglog").derivative_sup(order, np.array([1.0]))[0]
    assert sup <= bound <= sup * (1 + 1e-3)


@pytest.mark.parametrize("order", [1, 2])
def test_sup_on_an_interval_bounds_the_derivative_inside_it(order):
    check_sup_on_intervals("bernoulli_cloglog", _row, lambda rng: rng.integers(0, 2), order)
    assert math.isinf(family("bernoulli_cloglog").derivative_sup(order, np.array([0.0]))[0])


@pytest.mark.parametrize("write", ["1 - exp(-exp(eta))", "-expm1(-exp(eta))"])
def test_the_ways_of_writing_the_link_are_read(write):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        u = pm.math.exp(pm.Data("X", X) @ b)
        p = 1.0 - pm.math.exp(-u) if write.startswith("1") else -pt.expm1(-u)
        pm.Bernoulli("y", p=p, observed=rng.integers(0, 2, 40))
    (term,) = detect_glm_terms(SubsampledLikelihood(model))
    assert term.family.name == "bernoulli_cloglog"


def test_mhss_on_cloglog_rows():
    X, y, model, step = build("cloglog")
    assert math.isfinite(step.region_radius)
    for order in (1, 2):
        check_pairs(X, y, step, "bernoulli_cloglog", order, (), f, f1, f2)
    check_posterior(model, step, "cloglog")


def test_rows_far_in_the_tails_are_finite_in_either_form():
    """PyMC's own ``log1p(−p)`` of ``p = 1 − exp(−e^η)`` is -inf beyond η ≈ 3.6; the likelihood
    layer's row terms (which every step reads) are ``−e^η`` there, as for ``−expm1(−e^η)``."""
    eta = np.array([5.0, 5.0, -40.0, 0.3])
    y = np.array([0, 1, 0, 1])
    for write in ("1 - exp(-exp(eta))", "-expm1(-exp(eta))"):
        with pm.Model() as model:
            b = pm.Normal("b", 0, 1)
            u = pm.math.exp(b * pm.Data("X", eta))
            p = 1.0 - pm.math.exp(-u) if write.startswith("1") else -pt.expm1(-u)
            pm.Bernoulli("y", p=p, observed=y)
        lik = SubsampledLikelihood(model)
        terms = lik.compile([lik.theta, lik.idx], lik.terms)(np.array([1.0]), np.arange(4))
        np.testing.assert_allclose(terms, f(eta, y), rtol=1e-12, atol=1e-60)
