"""Negative binomial rows with the log link and a fixed dispersion
(``pymc_subsample/bounds/negative_binomial.py``).

Derivatives written out here and checked against finite differences of ``scipy.stats.nbinom``;
constants against 30-digit numerical derivatives; the MHSS bound on 10⁴ random pairs and the
posterior against NUTS (``tests/family_checks.py``).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pymc as pm
import pytest
from scipy import stats

from pymc_subsample.bounds import derivative_bound, glm_loglik
from pymc_subsample.datasets import NB_ALPHA as ALPHA
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.model.location_scale import detect_location_scale_terms
from tests.family_checks import (
    build,
    check_pairs,
    check_posterior,
    check_reference_derivatives,
    sup_on_grid,
)


def f(eta, y):
    mu = np.exp(eta)
    return stats.nbinom.logpmf(y, ALPHA, ALPHA / (ALPHA + mu))


def f1(eta, y):
    mu = np.exp(eta)
    return y - (y + ALPHA) * mu / (ALPHA + mu)


def f2(eta, y):
    mu = np.exp(eta)
    return -(y + ALPHA) * ALPHA * mu / (ALPHA + mu) ** 2


def test_loglik_and_reference_derivatives():
    rng = np.random.default_rng(1)
    eta, y = rng.normal(0.0, 3.0, 500), rng.poisson(4.0, 500).astype(float)
    np.testing.assert_allclose(glm_loglik("negative_binomial_log", eta, y, params=(ALPHA,)),
                               f(eta, y), rtol=1e-10)
    check_reference_derivatives(f, f1, f2, eta, y)


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("y", [0.0, 1.0, 12.0])
def test_constants_bound_and_nearly_attain_the_derivatives(order, y):
    def row(eta):
        return y * eta - (y + ALPHA) * mpmath.log(ALPHA + mpmath.exp(eta))

    sup = sup_on_grid(row, order, np.linspace(-6.0, 8.0, 701))
    bound = derivative_bound("negative_binomial_log", np.array([y]), order, params=(ALPHA,))[0]
    assert sup <= bound <= sup * (1 + 1e-3)


def test_a_sampled_dispersion_is_read_as_a_second_predictor():
    """A sampled α is the two-predictor family (tests/test_family_negative_binomial_scale.py)."""
    X, y = np.random.default_rng(0).normal(size=(50, 2)), np.arange(50) % 4
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        pm.NegativeBinomial("counts", mu=pm.math.exp(pm.Data("X", X) @ b),
                            alpha=pm.Exponential("alpha", 1.0), observed=y)
    (term,) = detect_location_scale_terms(SubsampledLikelihood(model))
    assert term.family.name == "negative_binomial_scale"


def test_mhss_on_negative_binomial_rows():
    X, y, model, step = build("negative_binomial")
    assert not math.isfinite(step.region_radius)  # global constants
    for order in (1, 2):
        check_pairs(X, y, step, "negative_binomial_log", order, (ALPHA,), f, f1, f2)
    check_posterior(model, step, "negative_binomial")
