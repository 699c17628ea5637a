"""Synthetic generalised-linear-model data and the PyMC models a user would write for them.

The design follows Prado, Nemeth & Sherlock (2024), Sec. 5.1: an intercept column plus
``d − 1`` standard-normal covariates, and coefficients drawn from ``N(0, 1/d)`` so that the
linear predictor ``η = Xβ`` stays of order one whatever ``d``. Used by the demo, the examples
and the benchmarks, so that they all sample the same kind of posterior.

Examples
--------
.. code-block:: python

    import pymc as pm
    import pymc_subsample as pms
    from pymc_subsample.datasets import glm_data, glm_model

    X, y = glm_data(100_000, 10, "logistic", seed=1)
    with glm_model(X, y, "logistic"):
        idata = pm.sample(step=pms.MHSS(cv_order=2))
"""

from __future__ import annotations

import numpy as np
import pymc as pm
from scipy.special import ndtr

__all__ = ["FAMILIES", "GMM_SIGMA_X", "glm_data", "glm_model", "gmm_data", "gmm_model"]

#: Likelihood families understood by :func:`glm_data` and :func:`glm_model`.
FAMILIES = ("logistic", "probit", "poisson", "gaussian")


def _check_family(family: str) -> None:
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}; got {family!r}")


def glm_data(
    n: int, d: int, family: str = "logistic", seed: int | None = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Covariates with an intercept column and responses drawn from a GLM.

    Parameters
    ----------
    n : int
        Number of rows ``N``.
    d : int
        Number of coefficients, the intercept included.
    family : {"logistic", "probit", "poisson", "gaussian"}
        ``y ~ Bernoulli(logistic(η))``, ``Bernoulli(Φ(η))``, ``Poisson(softplus(η))`` (the
        Poisson form of Prado et al. 2024, Sec. 5.3) or ``N(η, 1)``.
    seed : int, optional
        Seed of the NumPy generator that draws ``X``, ``β`` and ``y``.

    Returns
    -------
    X : ndarray, shape (n, d)
        Column 0 is all ones; the others are i.i.d. ``N(0, 1)``.
    y : ndarray, shape (n,)
        Responses (integers for the discrete families).
    """
    _check_family(family)
    if n < 1 or d < 1:
        raise ValueError(f"n and d must be at least 1; got n={n}, d={d}")
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[:, 0] = 1.0
    beta = rng.normal(size=d) / np.sqrt(d)
    eta = X @ beta
    if family == "logistic":
        y = rng.binomial(1, 1.0 / (1.0 + np.exp(-eta)))
    elif family == "probit":
        y = rng.binomial(1, ndtr(eta))
    elif family == "poisson":
        y = rng.poisson(np.logaddexp(0.0, eta))
    else:
        y = eta + rng.normal(size=n)
    return X, y


def glm_model(
    X: np.ndarray, y: np.ndarray, family: str = "logistic", prior_sd: float = 10.0
) -> pm.Model:
    """The PyMC model for :func:`glm_data`: ``b ~ N(0, prior_sd²)`` and the family's likelihood.

    ``X`` is wrapped in ``pm.Data("X", X)`` and the coefficients are one vector ``b``; every
    family is in the form :class:`pymc_subsample.MHSS` bounds automatically.
    """
    _check_family(family)
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
        else:
            pm.Normal("y", mu=eta, sigma=1.0, observed=y)
    return model


#: Component standard deviation of Welling & Teh's mixture (σx² = 2).
GMM_SIGMA_X = float(np.sqrt(2.0))


def gmm_data(n_rows: int, seed: int | None = 0) -> np.ndarray:
    """Welling & Teh's (2011) mixture at ``θ = (0, 1)``: ``x ~ ½N(θ1, σx²) + ½N(θ1 + θ2, σx²)``.

    The experiment of Seita et al. (2017), Sec. 6.1, with ``σx² = 2``.
    """
    rng = np.random.default_rng(seed)
    first = rng.random(n_rows) < 0.5
    return np.where(
        first, rng.normal(0.0, GMM_SIGMA_X, n_rows), rng.normal(1.0, GMM_SIGMA_X, n_rows)
    )


def gmm_model(x: np.ndarray) -> pm.Model:
    """The mixture's model: ``θ1 ~ N(0, 10)``, ``θ2 ~ N(0, 1)`` and a per-row mixture density.

    The density is a ``pm.CustomDist`` log density (``logaddexp`` of the two components), the
    form the subsampled likelihood can index by row (``pm.NormalMixture`` cannot be split).
    """

    def logp(value, t1, t2):
        a = pm.logp(pm.Normal.dist(t1, GMM_SIGMA_X), value)
        b = pm.logp(pm.Normal.dist(t1 + t2, GMM_SIGMA_X), value)
        return pm.math.logaddexp(a, b) - np.log(2.0)

    with pm.Model() as model:
        t1 = pm.Normal("t1", 0.0, np.sqrt(10.0))
        t2 = pm.Normal("t2", 0.0, 1.0)
        pm.CustomDist("x", t1, t2, logp=logp, observed=x)
    return model
