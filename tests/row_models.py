"""Row-wise models as a PyMC user writes them, one per construct the likelihood layer reads.

Each builder takes ``n`` (rows) and returns a model whose one observed variable is ``y``:
censored, truncated, hurdle, zero-inflated, per-row mixtures, ordinal, categorical with a
reference column, binomial with per-row trials, and the plain positive families. Used by
``tests/test_likelihood_constructs.py`` (exact terms, steps sampling, MHSS refusals).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pymc as pm
import pytensor.tensor as pt

D = 2  #: predictors besides the intercept column


def _design(n: int, seed: int) -> tuple[np.random.Generator, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng, np.column_stack([np.ones(n), rng.normal(size=(n, D))])


def _coef(name: str = "b", sd: float = 1.0, shape: int = D + 1):
    return pm.Normal(name, 0.0, sd, shape=shape)


def censored_weibull_right(n: int, seed: int = 0) -> pm.Model:
    """Survival: Weibull with a log-scale predictor, right-censored at per-row times."""
    rng, X = _design(n, seed)
    t = rng.weibull(1.5, size=n) * np.exp(X @ np.array([0.5, 0.3, -0.2]))
    c = rng.uniform(0.5, 3.0, size=n)
    with pm.Model() as model:
        b = _coef()
        k = pm.LogNormal("k", 0.0, 0.5)
        pm.Censored("y", pm.Weibull.dist(alpha=k, beta=pm.math.exp(X @ b)), lower=None,
                    upper=c, observed=np.minimum(t, c))
    return model


def censored_normal_left(n: int, seed: int = 0) -> pm.Model:
    """Tobit: a Normal censored below at 0."""
    rng, X = _design(n, seed)
    y = np.maximum(X @ np.array([0.2, 1.0, -0.5]) + rng.normal(size=n), 0.0)
    with pm.Model() as model:
        b = _coef()
        s = pm.HalfNormal("s", 1.0)
        pm.Censored("y", pm.Normal.dist(X @ b, s), lower=0.0, upper=None, observed=y)
    return model


def censored_normal_both(n: int, seed: int = 0) -> pm.Model:
    """A Normal censored on both sides, the upper bound per row."""
    rng, X = _design(n, seed)
    upper = rng.uniform(0.5, 2.0, size=n)
    y = np.clip(X @ np.array([0.2, 1.0, -0.5]) + rng.normal(size=n), -1.0, upper)
    with pm.Model() as model:
        b = _coef()
        s = pm.HalfNormal("s", 1.0)
        pm.Censored("y", pm.Normal.dist(X @ b, s), lower=-1.0, upper=upper, observed=y)
    return model


def censored_exponential_right(n: int, seed: int = 0) -> pm.Model:
    """Exponential survival, right-censored at a common time."""
    rng, X = _design(n, seed)
    t = rng.exponential(np.exp(X @ np.array([0.3, 0.4, -0.2])))
    with pm.Model() as model:
        b = _coef()
        pm.Censored("y", pm.Exponential.dist(lam=pm.math.exp(-(X @ b))), lower=None,
                    upper=2.0, observed=np.minimum(t, 2.0))
    return model


def truncated_normal(n: int, seed: int = 0) -> pm.Model:
    rng, X = _design(n, seed)
    y = np.abs(X @ np.array([0.5, 0.5, 0.0]) + rng.normal(size=n))
    with pm.Model() as model:
        b = _coef()
        s = pm.HalfNormal("s", 1.0)
        pm.Truncated("y", pm.Normal.dist(X @ b, s), lower=0.0, observed=y)
    return model


def truncated_normal_offset(n: int, seed: int = 0) -> pm.Model:
    """A Normal truncated below at a = −0.5, about half its means below a: its normaliser
    reads ``a − μ`` and its density ``y − μ``, one predictor ``μ`` (data drawn from the
    model, by rejection)."""
    rng, X = _design(n, seed)
    eta = X @ np.array([-0.5, 0.3, -0.2])
    y = eta + 0.8 * rng.normal(size=n)
    while np.any(bad := y < -0.5):
        y[bad] = eta[bad] + 0.8 * rng.normal(size=int(bad.sum()))
    with pm.Model() as model:
        b = _coef()
        s = pm.HalfNormal("s", 1.0)
        pm.Truncated("y", pm.Normal.dist(X @ b, s), lower=-0.5, observed=y)
    return model


def truncated_poisson(n: int, seed: int = 0) -> pm.Model:
    """A zero-truncated Poisson (a TruncatedRV with a discrete base)."""
    rng, X = _design(n, seed)
    y = rng.poisson(np.exp(X @ np.array([0.5, 0.3, -0.2]))) + 1
    with pm.Model() as model:
        b = _coef(sd=0.5)
        pm.Truncated("y", pm.Poisson.dist(pm.math.exp(X @ b)), lower=1, observed=y)
    return model


def _counts(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng, X = _design(n, seed)
    y = rng.poisson(np.exp(X @ np.array([0.5, 0.3, -0.2])))
    return X, np.where(rng.random(n) < 0.3, 0, y)


def hurdle_poisson(n: int, seed: int = 0) -> pm.Model:
    X, y = _counts(n, seed)
    with pm.Model() as model:
        b = _coef(sd=0.5)
        psi = pm.Beta("psi", 2.0, 2.0)
        pm.HurdlePoisson("y", psi=psi, mu=pm.math.exp(X @ b), observed=y)
    return model


def _overdispersed_counts(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Negative binomial counts (dispersion α = 2, a gamma–Poisson mixture) with 30 % extra
    zeros: data the negative binomial families are for. (On Poisson counts α's posterior
    runs off to large values, which the prior alone holds, and the automatic bound's boxes of
    log α are wide: tests/test_posterior_automatic.py.)"""
    rng, X = _design(n, seed)
    mu = np.exp(X @ np.array([0.5, 0.3, -0.2]))
    y = rng.poisson(rng.gamma(2.0, mu / 2.0))
    return X, np.where(rng.random(n) < 0.3, 0, y)


def hurdle_negative_binomial(n: int, seed: int = 0) -> pm.Model:
    X, y = _overdispersed_counts(n, seed)
    with pm.Model() as model:
        b = _coef(sd=0.5)
        psi = pm.Beta("psi", 2.0, 2.0)
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        pm.HurdleNegativeBinomial("y", psi=psi, mu=pm.math.exp(X @ b), alpha=alpha, observed=y)
    return model


def _positive(n: int, seed: int, zeros: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    rng, X = _design(n, seed)
    y = rng.lognormal(X @ np.array([0.2, 0.4, -0.3]), 0.5)
    return X, np.where(rng.random(n) < zeros, 0.0, y)


def hurdle_gamma(n: int, seed: int = 0) -> pm.Model:
    X, y = _positive(n, seed, zeros=0.2)
    with pm.Model() as model:
        b = _coef(sd=0.5)
        psi = pm.Beta("psi", 2.0, 2.0)
        s = pm.HalfNormal("s", 1.0)
        pm.HurdleGamma("y", psi=psi, mu=pm.math.exp(X @ b), sigma=s, observed=y)
    return model


def hurdle_lognormal(n: int, seed: int = 0) -> pm.Model:
    X, y = _positive(n, seed, zeros=0.2)
    with pm.Model() as model:
        b = _coef(sd=0.5)
        psi = pm.Beta("psi", 2.0, 2.0)
        s = pm.HalfNormal("s", 1.0)
        pm.HurdleLogNormal("y", psi=psi, mu=X @ b, sigma=s, observed=y)
    return model


def zero_inflated_poisson(n: int, seed: int = 0) -> pm.Model:
    X, y = _counts(n, seed)
    with pm.Model() as model:
        b = _coef(sd=0.5)
        psi = pm.Beta("psi", 2.0, 2.0)
        pm.ZeroInflatedPoisson("y", psi=psi, mu=pm.math.exp(X @ b), observed=y)
    return model


def zero_inflated_negative_binomial(n: int, seed: int = 0) -> pm.Model:
    X, y = _overdispersed_counts(n, seed)
    with pm.Model() as model:
        b = _coef(sd=0.5)
        psi = pm.Beta("psi", 2.0, 2.0)
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        pm.ZeroInflatedNegativeBinomial("y", psi=psi, mu=pm.math.exp(X @ b), alpha=alpha,
                                        observed=y)
    return model


def zero_inflated_binomial(n: int, seed: int = 0) -> pm.Model:
    rng, X = _design(n, seed)
    trials = rng.integers(1, 12, size=n)
    y = np.where(rng.random(n) < 0.2, 0, rng.binomial(trials, 0.4))
    with pm.Model() as model:
        b = _coef(sd=0.5)
        psi = pm.Beta("psi", 2.0, 2.0)
        pm.ZeroInflatedBinomial("y", psi=psi, n=trials, p=pm.math.invlogit(X @ b), observed=y)
    return model


def mixture_per_row_weights(n: int, seed: int = 0) -> pm.Model:
    """A two-component Normal mixture whose weights follow a per-row logistic regression."""
    rng, X = _design(n, seed)
    y = np.where(rng.random(n) < 0.5, -1.0, 1.5) + rng.normal(size=n)
    with pm.Model() as model:
        g = _coef("g", sd=0.5)
        mu = pm.Normal("mu", [-1.0, 1.0], 1.0, transform=pm.distributions.transforms.ordered)
        p = pm.math.invlogit(X @ g)
        w = pt.stack([p, 1.0 - p], axis=-1)
        pm.NormalMixture("y", w=w, mu=mu, sigma=1.0, observed=y)
    return model


def mixture_per_row_components(n: int, seed: int = 0) -> pm.Model:
    """A Normal / Student-t mixture whose components' means are per-row regressions."""
    rng, X = _design(n, seed)
    y = X @ np.array([0.2, 0.5, 0.0]) + rng.standard_t(3, size=n)
    with pm.Model() as model:
        b = _coef(sd=0.5)
        w = pm.Dirichlet("w", np.ones(2))
        s = pm.HalfNormal("s", 1.0)
        comps = [pm.Normal.dist(X @ b, s), pm.StudentT.dist(nu=3, mu=X @ b, sigma=2.0 * s)]
        pm.Mixture("y", w=w, comp_dists=comps, observed=y)
    return model


def normal_mixture(n: int, seed: int = 0) -> pm.Model:
    """Two Normal components with fixed weights and sd and sampled means ``b``, their priors
    apart (no label switching at these sizes)."""
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n) < 0.3, 2.0, -0.5) + 0.8 * rng.normal(size=n)
    with pm.Model() as model:
        b = pm.Normal("b", [-1.0, 2.0], 1.0)
        pm.NormalMixture("y", w=[0.7, 0.3], mu=b, sigma=0.8, observed=y)
    return model


def _ordinal(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng, X = _design(n, seed)
    eta = X[:, 1:] @ np.array([1.0, -0.5]) + rng.logistic(size=n)
    return X[:, 1:], np.searchsorted(np.array([-1.0, 0.0, 1.2]), eta)


def ordered_logistic(n: int, seed: int = 0) -> pm.Model:
    X, y = _ordinal(n, seed)
    with pm.Model() as model:
        b = _coef(shape=D)
        c = pm.Normal("c", np.linspace(-1, 1, 3), 2.0,
                      transform=pm.distributions.transforms.ordered)
        # compute_p=False: no N × K Deterministic of probabilities stored with every draw
        pm.OrderedLogistic("y", eta=X @ b, cutpoints=c, compute_p=False, observed=y)
    return model


def ordered_probit(n: int, seed: int = 0) -> pm.Model:
    X, y = _ordinal(n, seed)
    with pm.Model() as model:
        b = _coef(shape=D)
        c = pm.Normal("c", np.linspace(-1, 1, 3), 2.0,
                      transform=pm.distributions.transforms.ordered)
        pm.OrderedProbit("y", eta=X @ b, cutpoints=c, sigma=1.0, compute_p=False,
                         observed=y)
    return model


K = 3  #: classes of the categorical models


def _classes(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng, X = _design(n, seed)
    return X, rng.integers(0, K, size=n)


def categorical_softmax(n: int, seed: int = 0) -> pm.Model:
    X, y = _classes(n, seed)
    with pm.Model() as model:
        B = pm.Normal("B", 0.0, 1.0, shape=(D + 1, K))
        pm.Categorical("y", p=pm.math.softmax(X @ B, axis=-1), observed=y)
    return model


def categorical_reference_zeros(n: int, seed: int = 0) -> pm.Model:
    """Multinomial logit, the reference class an N-sized constant ``pt.zeros((N, 1))``; its
    coefficients ``b``, ``(D + 1) × (K − 1)``."""
    X, y = _classes(n, seed)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 1.0, shape=(D + 1, K - 1))
        pm.Categorical("y", logit_p=pt.concatenate([pt.zeros((n, 1)), X @ b], axis=1),
                       observed=y)
    return model


def categorical_reference_zeros_like(n: int, seed: int = 0) -> pm.Model:
    """Multinomial logit, the reference class ``pt.zeros_like(X[:, :1])``."""
    X, y = _classes(n, seed)
    with pm.Model() as model:
        xd = pm.Data("X", X)
        B = pm.Normal("B", 0.0, 1.0, shape=(D + 1, K - 1))
        pm.Categorical("y", logit_p=pt.concatenate([pt.zeros_like(xd[:, :1]), xd @ B], axis=1),
                       observed=y)
    return model


def _trials(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng, X = _design(n, seed)
    trials = rng.integers(1, 20, size=n)
    y = rng.binomial(trials, 1.0 / (1.0 + np.exp(-(X @ np.array([0.2, 0.5, -0.4])))))
    return X, trials, y


def binomial_trials_array(n: int, seed: int = 0) -> pm.Model:
    X, trials, y = _trials(n, seed)
    with pm.Model() as model:
        b = _coef()
        pm.Binomial("y", n=trials, logit_p=X @ b, observed=y)
    return model


def binomial_trials_data(n: int, seed: int = 0) -> pm.Model:
    X, trials, y = _trials(n, seed)
    with pm.Model() as model:
        xd = pm.Data("X", X)
        nd = pm.Data("trials", trials)
        b = _coef()
        pm.Binomial("y", n=nd, logit_p=xd @ b, observed=y)
    return model


def beta_binomial_trials(n: int, seed: int = 0) -> pm.Model:
    """Overdispersed counts (precision 10). On binomial data φ's posterior sits near 200,
    where the automatic bound's enclosures of ``gammaln`` differences are loose: 99 % of
    MHSS's moves fell back to the full data at 20,000 rows (exact, but O(N))."""
    rng, X = _design(n, seed)
    trials = rng.integers(1, 20, size=n)
    p = 1.0 / (1.0 + np.exp(-(X @ np.array([0.2, 0.5, -0.4]))))
    y = rng.binomial(trials, rng.beta(10.0 * p, 10.0 * (1.0 - p)))
    with pm.Model() as model:
        nd = pm.Data("trials", trials)
        b = _coef()
        phi = pm.Gamma("phi", 2.0, 0.2)
        p = pm.math.invlogit(X @ b)
        pm.BetaBinomial("y", n=nd, alpha=p * phi, beta=(1.0 - p) * phi, observed=y)
    return model


def lognormal(n: int, seed: int = 0) -> pm.Model:
    X, y = _positive(n, seed)
    with pm.Model() as model:
        b = _coef()
        s = pm.HalfNormal("s", 1.0)
        pm.LogNormal("y", mu=X @ b, sigma=s, observed=y)
    return model


def beta(n: int, seed: int = 0) -> pm.Model:
    rng, X = _design(n, seed)
    p = 1.0 / (1.0 + np.exp(-(X @ np.array([0.2, 0.5, -0.4]))))
    y = np.clip(rng.beta(10 * p, 10 * (1 - p)), 1e-6, 1 - 1e-6)
    with pm.Model() as model:
        b = _coef()
        phi = pm.Gamma("phi", 2.0, 0.2)
        mu = pm.math.invlogit(X @ b)
        pm.Beta("y", alpha=mu * phi, beta=(1.0 - mu) * phi, observed=y)
    return model


def exponential(n: int, seed: int = 0) -> pm.Model:
    X, y = _positive(n, seed)
    with pm.Model() as model:
        b = _coef()
        pm.Exponential("y", lam=pm.math.exp(-(X @ b)), observed=y)
    return model


def weibull(n: int, seed: int = 0) -> pm.Model:
    X, y = _positive(n, seed)
    with pm.Model() as model:
        b = _coef()
        k = pm.LogNormal("k", 0.0, 0.5)
        pm.Weibull("y", alpha=k, beta=pm.math.exp(X @ b), observed=y)
    return model


def gamma(n: int, seed: int = 0) -> pm.Model:
    """A Gamma regression with the log link and a sampled shape (rate ``alpha / mean``)."""
    X, y = _positive(n, seed)
    with pm.Model() as model:
        b = _coef()
        alpha = pm.Gamma("alpha", 2.0, 0.5)
        pm.Gamma("y", alpha=alpha, beta=alpha / pm.math.exp(X @ b), observed=y)
    return model


#: Every construct, by name.
MODELS: dict[str, Callable[..., pm.Model]] = {
    f.__name__: f
    for f in (
        censored_weibull_right, censored_normal_left, censored_normal_both,
        censored_exponential_right, truncated_normal, truncated_normal_offset,
        truncated_poisson, hurdle_poisson,
        hurdle_negative_binomial, hurdle_gamma, hurdle_lognormal, zero_inflated_poisson,
        zero_inflated_negative_binomial, zero_inflated_binomial, mixture_per_row_weights,
        mixture_per_row_components, normal_mixture, ordered_logistic, ordered_probit,
        categorical_softmax,
        categorical_reference_zeros, categorical_reference_zeros_like, binomial_trials_array,
        binomial_trials_data, beta_binomial_trials, lognormal, beta, exponential, weibull,
        gamma,
    )
}

#: The models MHSS bounds automatically (no hand-derived family), checked against NUTS at
#: 20,000 rows by ``tests/test_posterior_automatic.py``.
AUTOMATIC: tuple[str, ...] = (
    "binomial_trials_array", "beta_binomial_trials", "lognormal", "beta", "exponential",
    "weibull", "censored_weibull_right", "censored_exponential_right", "zero_inflated_poisson",
    "hurdle_lognormal", "normal_mixture", "ordered_logistic", "censored_normal_both",
    "categorical_reference_zeros", "hurdle_poisson", "truncated_normal",
    "truncated_normal_offset", "ordered_probit",
    "zero_inflated_negative_binomial", "hurdle_negative_binomial",
)
#: coefficients ``b`` of the models where they are not ``D + 1``
COEFFICIENTS: dict[str, int] = {"normal_mixture": 2, "ordered_logistic": D, "ordered_probit": D}
