"""MHSS targets the true posterior: analytic (conjugate Gaussian) and NUTS references."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.datasets import glm_data, glm_model
from tests.posterior import SAMPLE, assert_matches, summary

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("order", [1, 2])
def test_gaussian_regression_matches_analytic_posterior(order):
    X, y = glm_data(3000, 3, "gaussian", seed=8)
    precision = X.T @ X + np.eye(3) / 10.0**2  # σ = 1, prior sd 10
    cov = np.linalg.inv(precision)
    mean = cov @ X.T @ y
    with glm_model(X, y, "gaussian"):
        step = pms.MHSS(cv_order=order)
        idata = pm.sample(4000, tune=500, chains=2, step=step, random_seed=11, **SAMPLE)
    assert_matches(idata, mean, np.sqrt(np.diag(cov)))
    assert int(idata.sample_stats["clipped"].sum()) == 0
    if order == 1:
        # order 1 really subsamples here: the test exercises Poisson thinning
        assert float(idata.sample_stats["n_data"].mean()) > 0.05


@pytest.fixture(scope="module")
def nuts_reference():
    cache = {}

    def get(family, d):
        if (family, d) not in cache:
            X, y = glm_data(2000, d, family, seed=9)
            with glm_model(X, y, family):
                ref = pm.sample(1500, tune=1000, chains=2, random_seed=12, **SAMPLE)
            cache[family, d] = (X, y, summary(ref))
        return cache[family, d]

    return get


@pytest.mark.parametrize(
    "family, d, proposal, order, draws",
    [
        ("logistic", 4, "pcn", 2, 3000),
        ("logistic", 4, "independence", 2, 3000),
        ("logistic", 4, "random_walk", 1, 6000),
        ("logistic", 10, "pcn", 2, 3000),
        ("logistic", 10, "independence", 2, 3000),
        ("poisson", 4, "pcn", 2, 3000),
        ("probit", 3, "pcn", 2, 3000),
    ],
)
def test_glm_matches_nuts(nuts_reference, family, d, proposal, order, draws):
    X, y, (ref_mean, ref_sd, ref_mcse) = nuts_reference(family, d)
    with glm_model(X, y, family):
        step = pms.MHSS(cv_order=order, proposal=proposal)
        idata = pm.sample(draws, tune=1000, chains=2, step=step, random_seed=13, **SAMPLE)
    assert_matches(idata, ref_mean, ref_sd, ref_mcse)
    stats = idata.sample_stats
    assert int(stats["clipped"].sum()) == 0
    assert float(stats["n_data"].mean()) > 0  # the correction stage really read rows
