"""Automatic GLM bound detection, and the bound checked on the compiled remainders."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import log_ndtr
from scipy.stats import norm

from pymc_subsample.bounds import derivative_bound, remainder_scale
from pymc_subsample.datasets import glm_data, glm_model
from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.model.control_variates import TaylorControlVariate
from pymc_subsample.model.glm import detect_glm_terms
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.model.passes import GLMPass, glm_bound_constants
from tests.pairs import assert_stored_constants

FAMILY_OF = {
    "logistic": "bernoulli_logit",
    "probit": "bernoulli_probit",
    "poisson": "poisson_softplus",
    "gaussian": "normal_identity",
}


@pytest.mark.parametrize("family", list(FAMILY_OF))
@pytest.mark.parametrize("order", [1, 2])
def test_row_constants_match_formula(family, order):
    X, y = glm_data(400, 3, family, seed=11)
    lik = SubsampledLikelihood(glm_model(X, y, family))
    (term,) = detect_glm_terms(lik)
    assert term.family.name == FAMILY_OF[family]
    consts = glm_bound_constants(lik, np.zeros(3), order)
    expected = derivative_bound(FAMILY_OF[family], y.astype(float), order, sigma=1.0) * (
        np.linalg.norm(X, axis=1) ** (order + 1)
    )
    # PyMC's invprobit divides by a float32 sqrt(2): its predictor is X·b·(1 + 3e-8)
    assert_stored_constants(consts, expected, rtol=1e-7)


def test_intercept_variable_and_temperature_enter_the_constants():
    X, y = glm_data(300, 3, "logistic", seed=4)
    with pm.Model() as model:
        Xd = pm.Data("X", X[:, 1:])
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 5, shape=2)
        pm.Bernoulli("y", logit_p=a + Xd @ b, observed=y)
    lik = SubsampledLikelihood(model, temperature=4.0)
    consts = glm_bound_constants(lik, np.zeros(3), 1)
    # x_i = (1, X_i): the intercept's coordinate is part of the row's covariate vector
    assert_stored_constants(consts, 0.25 * np.sum(X**2, axis=1) / 4.0, rtol=1e-9)


def test_per_row_known_sigma_normal():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 2))
    sd = rng.uniform(0.5, 2.0, size=200)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=2)
        pm.Normal("y", mu=pm.Data("X", X) @ b, sigma=sd, observed=rng.normal(size=200))
    lik = SubsampledLikelihood(model)
    consts = glm_bound_constants(lik, np.zeros(2), 1)
    assert_stored_constants(consts, np.sum(X**2, axis=1) / sd**2, rtol=1e-9)
    assert np.all(glm_bound_constants(lik, np.zeros(2), 2) == 0.0)


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda Xd, b, y: pm.StudentT("y", nu=pm.Gamma("nu", 2, 0.1), mu=Xd @ b, sigma=1,
                                      observed=y), "nu depends on the sampled parameters"),
        (lambda Xd, b, y: pm.Weibull("y", alpha=2.0, beta=pm.math.exp(Xd @ b),
                                     observed=np.abs(y) + 0.1), "Weibull"),
        (lambda Xd, b, y: pm.Poisson("y", mu=pm.math.sqr(Xd @ b), observed=np.abs(y).round()),
         "not softplus.*or exp"),
        (lambda Xd, b, y: pm.Bernoulli("y", logit_p=(Xd @ b) ** 3, observed=(y > 0)),
         "not affine"),
        (lambda Xd, b, y: pm.Normal("y", mu=Xd @ b, sigma=pm.HalfNormal("s"), observed=y),
         "sigma is a sampled parameter"),
    ],
)
def test_unsupported_likelihoods_are_named(build, match):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 2))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        build(pm.Data("X", X), b, rng.normal(size=100))
    lik = SubsampledLikelihood(model)
    with pytest.raises(SubsamplingModelError, match=match) as info:
        glm_bound_constants(lik, np.zeros(2), 2)
    assert "'y'" in str(info.value) and "UserBound" in str(info.value)


# ---------------------------------------------------------------- the bound of docs/methods/mhss.md
_GUARD = {}


def _guard_setup(family: str, order: int):
    key = (family, order)
    if key not in _GUARD:
        X, y = glm_data(300, 4, family, seed=21)
        lik = SubsampledLikelihood(glm_model(X, y, family))
        theta_hat = np.array([0.2, -0.1, 0.3, 0.05])
        cv = TaylorControlVariate(lik, theta_hat, order)
        _GUARD[key] = (cv, glm_bound_constants(lik, theta_hat, order), theta_hat)
    return _GUARD[key]


vectors = st.lists(st.floats(-1, 1), min_size=4, max_size=4).map(np.array)


@pytest.mark.parametrize("family", list(FAMILY_OF))
@pytest.mark.parametrize("order", [1, 2])
@settings(max_examples=40, deadline=None, derandomize=True)
@given(u=vectors, v=vectors, scale=st.sampled_from([1e-3, 0.05, 0.5, 3.0]))
def test_compiled_remainders_obey_the_bound(family, order, u, v, scale):
    """|ξ_i| ≤ c_i·M on every row, with ξ from the model graph (not from formulas)."""
    cv, consts, theta_hat = _guard_setup(family, order)
    theta, theta_new = theta_hat + scale * u, theta_hat + scale * v
    xi = cv.remainder(theta, theta_new, np.arange(consts.size, dtype=np.int64))
    bound = consts * remainder_scale(theta, theta_new, theta_hat, order)
    # finite for every family: probit's row terms are log Φ(±η), not PyMC's cancelling form
    assert np.all(np.isfinite(xi))
    assert np.all(np.abs(xi) <= bound * (1 + 1e-7) + 1e-10)


def test_probit_tails_are_exact_up_to_40():
    """|η| up to 40 on the wrong side of y (log Φ down to -804): the data pass's sums, the
    control variates' remainders and the likelihood's row terms use log Φ(±η), where PyMC's
    own log(1 − Φ(η)) is -inf beyond 8.3."""
    eta = np.linspace(-40.0, 40.0, 161)
    y = (eta < 0).astype(np.int64)  # every row on its unlikely side
    with pm.Model() as model:
        b = pm.Normal("b", 0, 10)
        pm.Bernoulli("y", p=pm.math.invprobit(b * pm.Data("x", eta)), observed=y)
    lik = SubsampledLikelihood(model)
    glm_pass = GLMPass(lik)
    sign = 2.0 * y - 1.0
    # PyMC's invprobit divides by a float32 √2: its predictor is x·b·√2/fl32(√2)
    x = eta * np.sqrt(2.0) / np.float64(np.float32(np.sqrt(2.0)))
    for theta in (1.0, 0.5):
        res = glm_pass.full(np.array([theta]))
        expected = log_ndtr(sign * theta * x)
        np.testing.assert_allclose(res.loglik, expected.sum(), rtol=1e-9)
        # f' = ±φ(η)/Φ(±η): the inverse Mills ratio, about |η| far in the tail
        mills = sign * np.exp(norm.logpdf(theta * x) - expected)
        np.testing.assert_allclose(res.grad, [(mills * x).sum()], rtol=1e-9)
    cv = TaylorControlVariate(lik, np.array([0.5]), 2, sums=(0.0, np.zeros(1), np.zeros((1, 1))),
                              glm_terms=glm_pass.terms)
    idx = np.arange(eta.size, dtype=np.int64)
    xi = cv.remainder(np.array([1.0]), np.array([0.9]), idx)
    assert np.all(np.isfinite(xi))
    # the likelihood's own row terms too (what steps without control variates read)
    diff = lik.loglik_diff(np.array([1.0]), np.array([0.9]), idx)
    expected = log_ndtr(sign * 0.9 * x) - log_ndtr(sign * x)
    np.testing.assert_allclose(diff, expected, rtol=1e-7, atol=1e-9)
