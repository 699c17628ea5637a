"""MHSS with automatic bounds (no hand-derived family) against NumPyro NUTS on the same model.

Binomial with per-row trials and Exponential with a log scale (one predictor), LogNormal with
a sampled σ and Weibull with a sampled shape, plain and right-censored (two predictors each),
zero-inflated Poisson with a sampled ψ (a predictor per row and one for all rows), ordinal
logit with sampled cutpoints (η and one predictor per cutpoint coordinate), as plain
PyMC models with ``pms.MHSS()`` and no arguments, at N = 3,000: every coordinate's
mean within 4.5 combined MCSEs, sd within 10 %, no full-data fallback beyond 0.1 %. NUTS runs
in the test (``pm.sample(nuts_sampler="numpyro")``, 2 chains × 2,000 draws), so nothing is
stored.
"""

from __future__ import annotations

import arviz as az
import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.model.predictors import PredictorTerm
from tests.posterior import SAMPLE, assert_matches

N, SEED = 3000, 11


def _data():
    rng = np.random.default_rng(SEED)
    X = np.column_stack([np.ones(N), rng.normal(size=(N, 2))])
    return rng, X, X @ np.array([0.4, -0.6, 0.5])


def binomial():
    rng, X, eta = _data()
    trials = rng.integers(1, 15, N)
    y = rng.binomial(trials, 1.0 / (1.0 + np.exp(-eta)))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        pm.Binomial("y", n=trials, logit_p=pm.Data("X", X) @ b, observed=y)
    return model, ("b",)


def lognormal():
    rng, X, eta = _data()
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        s = pm.HalfNormal("s", 2.0)
        pm.LogNormal("y", mu=pm.Data("X", X) @ b, sigma=s,
                     observed=np.exp(eta + 0.8 * rng.normal(size=N)))
    return model, ("b", "s")


def weibull():
    rng, X, eta = _data()
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        k = pm.Gamma("k", 2.0, 1.0)
        pm.Weibull("y", alpha=k, beta=pm.math.exp(pm.Data("X", X) @ b),
                   observed=np.exp(eta) * rng.weibull(1.7, N))
    return model, ("b", "k")


def exponential():
    rng, X, eta = _data()
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        pm.Exponential("y", lam=pm.math.exp(-(pm.Data("X", X) @ b)),
                       observed=rng.exponential(np.exp(eta)))
    return model, ("b",)


def censored_weibull():
    """Right-censored at the 70% quantile (``pm.Censored``, ``upper=c``): the censored rows'
    term is ``log S``, read as ``−(y/λ)^k`` (``log1mexp(log1mexp(·))`` folded)."""
    rng, X, eta = _data()
    t = np.exp(eta) * rng.weibull(1.7, N)
    c = float(np.quantile(t, 0.7))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        k = pm.Gamma("k", 2.0, 1.0)
        pm.Censored("y", pm.Weibull.dist(alpha=k, beta=pm.math.exp(pm.Data("X", X) @ b)),
                    lower=None, upper=c, observed=np.minimum(t, c))
    return model, ("b", "k")


def _counts():
    rng, X, eta = _data()
    y = rng.poisson(np.exp(0.5 * eta))
    return rng, X, y


def zero_inflated_poisson():
    """Counts with 30 % structural zeros: the row term goes through a class axis (the
    weights ``[1 − ψ, ψ]`` a ``MakeVector`` of one ψ), read as two columns."""
    rng, X, y = _counts()
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        psi = pm.Beta("psi", 2.0, 2.0)
        pm.ZeroInflatedPoisson("y", psi=psi, mu=pm.math.exp(pm.Data("X", X) @ b),
                               observed=np.where(rng.random(N) < 0.3, 0, y))
    return model, ("b", "psi")


def ordered_logistic():
    """Four ordered classes, three cutpoints sampled through PyMC's ordered transform: the
    row picks its class by y (a switch over the class columns), each class's
    ``log(σ(c_k − η) − σ(c_{k−1} − η))`` read in η and the cutpoints' coordinates."""
    rng, X, _ = _data()
    eta = X[:, 1:] @ np.array([1.0, -0.5]) + rng.logistic(size=N)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=2)
        c = pm.Normal("c", np.linspace(-1, 1, 3), 3.0,
                      transform=pm.distributions.transforms.ordered)
        pm.OrderedLogistic("y", eta=pm.Data("X", X[:, 1:]) @ b, cutpoints=c, compute_p=False,
                           observed=np.searchsorted(np.array([-1.0, 0.0, 1.2]), eta))
    return model, ("b", "c")


@pytest.mark.slow
@pytest.mark.parametrize("build", [binomial, lognormal, exponential, weibull,
                                   censored_weibull, zero_inflated_poisson, ordered_logistic])
def test_automatic_bound_posterior_matches_nuts(build):
    model, names = build()
    with model:
        step = pms.MHSS()
        assert all(isinstance(t, PredictorTerm) for t in step._reference_pass.terms)
        idata = pm.sample(3000, tune=1000, chains=2, step=step, random_seed=5, **SAMPLE)
        nuts = pm.sample(2000, tune=1000, chains=2, nuts_sampler="numpyro", random_seed=5,
                         progressbar=False)
    for name in names:
        post = nuts.posterior[name]
        mcse = az.mcse(nuts, var_names=[name])[name].values
        assert_matches(idata, post.mean(("chain", "draw")).values,
                       post.std(("chain", "draw")).values, mcse, var=name)
    assert float(idata.sample_stats["full_data_fallback"].mean()) < 1e-3
