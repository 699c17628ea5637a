"""Shared data generators and model factories for the tests."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pymc as pm
import pytest

logging.getLogger("pymc").setLevel(logging.ERROR)
warnings.filterwarnings("ignore", message=".*BLAS.*")


def glm_data(n: int, d: int, family: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Covariates with an intercept column and responses from a GLM (Prado et al., Sec. 5.1)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[:, 0] = 1.0
    beta = rng.normal(size=d) / np.sqrt(d)
    eta = X @ beta
    if family == "logistic":
        y = rng.binomial(1, 1.0 / (1.0 + np.exp(-eta)))
    elif family == "probit":
        from scipy.special import ndtr

        y = rng.binomial(1, ndtr(eta))
    elif family == "poisson":
        y = rng.poisson(np.logaddexp(0.0, eta))
    elif family == "gaussian":
        y = eta + rng.normal(size=n)
    else:
        raise ValueError(family)
    return X, y


def glm_model(X: np.ndarray, y: np.ndarray, family: str, prior_sd: float = 10.0) -> pm.Model:
    """The PyMC model a user would write for each supported family."""
    with pm.Model() as model:
        Xd = pm.Data("X", X)
        b = pm.Normal("b", 0.0, prior_sd, shape=X.shape[1])
        eta = Xd @ b
        if family == "logistic":
            pm.Bernoulli("y", logit_p=eta, observed=y)
        elif family == "probit":
            pm.Bernoulli("y", p=pm.math.invprobit(eta), observed=y)
        elif family == "poisson":
            pm.Poisson("y", mu=pm.math.log1pexp(eta), observed=y)
        elif family == "gaussian":
            pm.Normal("y", mu=eta, sigma=1.0, observed=y)
    return model


@pytest.fixture(scope="session")
def logistic_small():
    X, y = glm_data(2000, 3, "logistic", seed=1)
    return X, y, glm_model(X, y, "logistic")
