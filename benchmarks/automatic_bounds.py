"""MHSS with automatic bounds at N = 10⁶, d = 10 (generated data): rows per iteration,
full-data fallback rate, setup time and time to a minimum bulk ESS of 1000, for the families
whose bound comes from the model's graph; and, for logistic, Poisson log and Normal with a
sampled σ, the automatic bound's rows per iteration against the hand-derived one's (the
automatic path forced with the private ``pymc_subsample.model.setup._AUTOMATIC_ONLY``).

    PYTHONPATH=. python benchmarks/automatic_bounds.py [--rows 1000000] [--draws 2000] [--nuts]

``--nuts`` adds NumPyro's NUTS (``pm.sample(nuts_sampler="numpyro")``, one chain of
``--nuts-draws`` draws after as many tuning steps) on the same model in the same run, its whole
wall time to a minimum bulk ESS of 1000 extrapolated linearly from that run
(``compare.run_numpyro_nuts`` and ``compare.time_to_ess``: NumPyro's run, its tuning and JIT
included, scaled; the rest of ``pm.sample`` paid once), for the hurdle negative binomial
on the same density written so that JAX can differentiate it (:func:`_hurdle_nb_potential`,
checked against the model's before the run). PyMC's Normal log-CDF (Tobit, the
truncated Normal) uses the op ``erfcx``, which JAX has only through TensorFlow Probability:
those two need ``pip install tfp-nightly`` for ``--nuts`` (the release 0.25 does not import
with JAX 0.10). ``tests/test_posterior_automatic.py`` checks the posteriors against stored
NUTS references at N = 20,000.
"""

from __future__ import annotations

import argparse
import os
import time

import arviz as az
import numpy as np
import pymc as pm
import pytensor.tensor as pt
from scipy.special import erf

import pymc_subsample as pms
from pymc_subsample.compare import run_numpyro_nuts, time_to_ess
from pymc_subsample.model import setup as setup_module

D = 10


def _design(rng, n):
    X = np.column_stack([np.ones(n), rng.normal(size=(n, D - 1)) / np.sqrt(D)])
    beta = rng.normal(0.0, 0.5, D)
    return X, X @ beta


def model(name: str, n: int, seed: int = 1, *, yardstick: bool = False) -> pm.Model:
    """The family's model; ``yardstick`` writes the hurdle negative binomial's density for
    NumPyro (:func:`_hurdle_nb_potential`), every other model as it is."""
    rng = np.random.default_rng(seed)
    X, eta = _design(rng, n)
    with pm.Model() as m:
        if name not in ("ordered_logistic", "ordered_probit", "multinomial_logit"):
            b = pm.Normal("b", 0, 5, shape=D)
            lin = pm.Data("X", X) @ b
        if name == "binomial":
            trials = rng.integers(1, 20, n)
            pm.Binomial("y", n=trials, logit_p=lin,
                        observed=rng.binomial(trials, 1 / (1 + np.exp(-eta))))
        elif name == "beta_binomial":
            trials = rng.integers(1, 20, n)
            phi = pm.Gamma("phi", 2.0, 0.1)
            p = pm.math.invlogit(lin)
            q = 1 / (1 + np.exp(-eta))
            pm.BetaBinomial("y", n=trials, alpha=p * phi, beta=(1 - p) * phi,
                            observed=rng.binomial(trials, rng.beta(q * 10, (1 - q) * 10)))
        elif name == "lognormal":
            s = pm.HalfNormal("s", 2.0)
            pm.LogNormal("y", mu=lin, sigma=s, observed=np.exp(eta + 0.8 * rng.normal(size=n)))
        elif name == "exponential":
            pm.Exponential("y", lam=pm.math.exp(-lin), observed=rng.exponential(np.exp(eta)))
        elif name == "weibull":
            k = pm.Gamma("k", 2.0, 1.0)
            pm.Weibull("y", alpha=k, beta=pm.math.exp(lin),
                       observed=np.exp(eta) * rng.weibull(1.7, n))
        elif name == "beta":
            phi = pm.Gamma("phi", 2.0, 0.1)
            p = pm.math.invlogit(lin)
            q = 1 / (1 + np.exp(-eta))
            pm.Beta("y", alpha=p * phi, beta=(1 - p) * phi,
                    observed=np.clip(rng.beta(q * 10, (1 - q) * 10), 1e-6, 1 - 1e-6))
        elif name == "censored_weibull":  # right-censored at the 70 % quantile
            k = pm.Gamma("k", 2.0, 1.0)
            t = np.exp(eta) * rng.weibull(1.7, n)
            c = float(np.quantile(t, 0.7))
            pm.Censored("y", pm.Weibull.dist(alpha=k, beta=pm.math.exp(lin)), lower=None,
                        upper=c, observed=np.minimum(t, c))
        elif name == "tobit":  # censored below at 0 (about 40 % of the rows)
            s = pm.HalfNormal("s", 2.0)
            pm.Censored("y", pm.Normal.dist(mu=lin, sigma=s), lower=0.0, upper=None,
                        observed=np.maximum(eta + 0.8 * rng.normal(size=n), 0.0))
        elif name == "censored_normal_both":  # below at -0.5, above at per-row bounds
            s = pm.HalfNormal("s", 2.0)
            upper = rng.uniform(0.3, 1.5, n)
            pm.Censored("y", pm.Normal.dist(mu=lin, sigma=s), lower=-0.5, upper=upper,
                        observed=np.clip(eta + 0.8 * rng.normal(size=n), -0.5, upper))
        elif name == "truncated_normal":  # truncated below at -0.5
            s = pm.HalfNormal("s", 2.0)
            y = eta + 0.8 * rng.normal(size=n)
            while np.any(y < -0.5):  # rejection: a truncated Normal sample
                bad = y < -0.5
                y[bad] = eta[bad] + 0.8 * rng.normal(size=int(bad.sum()))
            pm.Truncated("y", pm.Normal.dist(mu=lin, sigma=s), lower=-0.5, observed=y)
        elif name == "zero_inflated_poisson":
            psi = pm.Beta("psi", 2.0, 2.0)
            pm.ZeroInflatedPoisson("y", psi=psi, mu=pm.math.exp(lin), observed=np.where(
                rng.random(n) < 0.3, 0, rng.poisson(np.exp(eta))))
        elif name == "hurdle_poisson":
            psi = pm.Beta("psi", 2.0, 2.0)
            pm.HurdlePoisson("y", psi=psi, mu=pm.math.exp(lin), observed=np.where(
                rng.random(n) < 0.3, 0, rng.poisson(np.exp(eta))))
        elif name in ("hurdle_negative_binomial", "zero_inflated_negative_binomial"):
            # overdispersed counts (dispersion 2, a gamma–Poisson mixture), 30 % extra zeros
            psi = pm.Beta("psi", 2.0, 2.0)
            alpha = pm.Gamma("alpha", 2.0, 1.0)
            y = np.where(rng.random(n) < 0.3, 0,
                         rng.poisson(rng.gamma(2.0, np.exp(eta) / 2.0)))
            if yardstick and name == "hurdle_negative_binomial":
                _hurdle_nb_potential(psi, pm.math.exp(lin), alpha, y)
            else:
                dist = (pm.HurdleNegativeBinomial if name == "hurdle_negative_binomial"
                        else pm.ZeroInflatedNegativeBinomial)
                dist("y", psi=psi, mu=pm.math.exp(lin), alpha=alpha, observed=y)
        elif name == "hurdle_lognormal":
            psi = pm.Beta("psi", 2.0, 2.0)
            s = pm.HalfNormal("s", 2.0)
            pm.HurdleLogNormal("y", psi=psi, mu=lin, sigma=s, observed=np.where(
                rng.random(n) < 0.2, 0.0, np.exp(eta + 0.8 * rng.normal(size=n))))
        elif name == "ordered_logistic":
            # no intercept column (the cutpoints take its place): d = 9 + 3
            b = pm.Normal("b", 0, 5, shape=D - 1)
            c = pm.Normal("c", np.linspace(-1, 1, 3), 3.0,
                          transform=pm.distributions.transforms.ordered)
            # compute_p=False: no (N, 4) Deterministic of probabilities stored per draw
            pm.OrderedLogistic("y", eta=pm.Data("X", X[:, 1:]) @ b, cutpoints=c,
                               compute_p=False,
                               observed=np.searchsorted(np.array([-1.0, 0.0, 1.2]),
                                                        eta + rng.logistic(size=n)))
        elif name == "ordered_probit":  # as ordered_logistic, Normal noise and sigma 1
            b = pm.Normal("b", 0, 5, shape=D - 1)
            c = pm.Normal("c", np.linspace(-1, 1, 3), 3.0,
                          transform=pm.distributions.transforms.ordered)
            pm.OrderedProbit("y", eta=pm.Data("X", X[:, 1:]) @ b, cutpoints=c, sigma=1.0,
                             compute_p=False,
                             observed=np.searchsorted(np.array([-1.0, 0.0, 1.2]),
                                                      eta + rng.normal(size=n)))
        elif name == "multinomial_logit":
            B = pm.Normal("B", 0, 5, shape=(D, 2))
            logits = np.column_stack([np.zeros(n), eta, -eta])
            p = np.exp(logits - logits.max(1, keepdims=True))
            u = rng.random(n)[:, None]
            y = (u > np.cumsum(p / p.sum(1, keepdims=True), 1)).sum(1)
            pm.Categorical("y", logit_p=pt.concatenate(
                [pt.zeros((n, 1)), pm.Data("X", X) @ B], axis=1), observed=y)
        elif name == "censored_exponential":  # right-censored at the 70 % quantile
            t = rng.exponential(np.exp(eta))
            c = float(np.quantile(t, 0.7))
            pm.Censored("y", pm.Exponential.dist(lam=pm.math.exp(-lin)), lower=None, upper=c,
                        observed=np.minimum(t, c))
        elif name == "normal_mixture":  # two components, means eta and eta + 2, 30 % / 70 %
            shift = pm.Normal("shift", 0.0, 5.0)
            mu = pt.stack([lin, lin + shift], axis=-1)
            pm.NormalMixture("y", w=[0.7, 0.3], mu=mu, sigma=0.8, observed=eta + np.where(
                rng.random(n) < 0.3, 2.0, 0.0) + 0.8 * rng.normal(size=n))
        elif name == "bernoulli_probit":
            pm.Bernoulli("y", p=pm.math.invprobit(lin),
                         observed=rng.random(n) < 0.5 * (1 + erf(eta / np.sqrt(2))))
        elif name == "poisson_softplus":
            pm.Poisson("y", mu=pm.math.log1pexp(lin), observed=rng.poisson(np.logaddexp(0, eta)))
        elif name == "normal_identity":
            pm.Normal("y", mu=lin, sigma=0.8, observed=eta + 0.8 * rng.normal(size=n))
        elif name == "logistic":
            pm.Bernoulli("y", logit_p=lin, observed=rng.binomial(1, 1 / (1 + np.exp(-eta))))
        elif name == "poisson_log":
            pm.Poisson("y", mu=pm.math.exp(lin), observed=rng.poisson(np.exp(eta)))
        elif name == "normal_sigma":
            s = pm.HalfNormal("s", 2.0)
            pm.Normal("y", mu=lin, sigma=s, observed=eta + 0.8 * rng.normal(size=n))
        else:
            raise ValueError(name)
    return m


def run(name: str, n: int, draws: int, automatic: bool) -> dict:
    setup_module._AUTOMATIC_ONLY = automatic
    try:
        m = model(name, n)
        with m:
            t0 = time.perf_counter()
            step = pms.MHSS()
            setup_s = time.perf_counter() - t0
            kind = type(step._reference_pass.terms[0]).__name__
            t0 = time.perf_counter()
            idata = pm.sample(draws, tune=1000, chains=2, cores=1, step=step, random_seed=3,
                              progressbar=False, compute_convergence_checks=False)
            sample_s = time.perf_counter() - t0
    finally:
        setup_module._AUTOMATIC_ONLY = False
    ess = az.ess(idata, method="bulk")
    min_ess = min(float(ess[v].min()) for v in ess.data_vars)
    stats = idata.sample_stats
    return dict(family=name, bound="automatic" if kind == "PredictorTerm" else "hand-derived",
                rows=float(stats["n_data"].mean()),
                fallback=float(stats["full_data_fallback"].mean()), setup_s=setup_s,
                min_ess=min_ess, to_ess_1000_s=time_to_ess(setup_s, sample_s, min_ess))


def _hurdle_nb_potential(psi, mu, alpha, y: np.ndarray) -> None:
    """``pm.HurdleNegativeBinomial``'s log-likelihood as a ``pm.Potential``, with the negative
    binomial's ``P(0) = (α/(μ + α))^α`` in closed form: NumPyro cannot differentiate PyMC's
    truncation at zero, which reaches the CDF through JAX's ``betainc`` (no gradient in its
    ``a``, ``b``). The same density (:func:`_check_yardstick`)."""
    log_nb = pm.logp(pm.NegativeBinomial.dist(mu=mu, alpha=alpha), y)
    log_p0 = alpha * (pt.log(alpha) - pt.log(mu + alpha))
    pm.Potential("y", pt.sum(pt.switch(y > 0, pt.log(psi) + log_nb - pt.log1mexp(log_p0),
                                       pt.log1p(-psi))))


def _check_yardstick(name: str, n: int) -> None:
    """Raise unless the model NUTS samples has the benchmarked model's log density at its
    initial point and at three random points."""
    ours, theirs = model(name, n), model(name, n, yardstick=True)
    logp, logp_nuts = ours.compile_logp(), theirs.compile_logp()
    rng = np.random.default_rng(0)
    point = ours.initial_point()
    for k in range(4):
        at = {v: x + (0.1 * rng.normal(size=np.shape(x)) if k else 0.0)
              for v, x in point.items()}
        a, b = logp(at), logp_nuts(at)
        if not np.isclose(a, b, rtol=1e-9, atol=1e-6):
            raise AssertionError(f"{name}: NUTS's model has log density {b}, ours {a}")


def run_nuts(name: str, n: int, draws: int) -> dict:
    _check_yardstick(name, n)
    setup_s, sampling_s, idata = run_numpyro_nuts(model(name, n, yardstick=True), draws,
                                                  draws, 1, 3, {})
    ess = az.ess(idata, method="bulk")
    min_ess = min(float(ess[v].min()) for v in ess.data_vars)
    return dict(wall_s=setup_s + sampling_s, min_ess=min_ess,
                to_ess_1000_s=time_to_ess(setup_s, sampling_s, min_ess))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--families", nargs="*", default=None)
    parser.add_argument("--nuts", action="store_true", help="NumPyro's NUTS side by side")
    parser.add_argument("--nuts-draws", type=int, default=500)
    args = parser.parse_args()
    new = ["binomial", "lognormal", "exponential", "weibull", "beta", "beta_binomial",
           "censored_weibull", "zero_inflated_poisson", "hurdle_poisson", "hurdle_lognormal",
           "ordered_logistic", "multinomial_logit", "tobit", "censored_normal_both",
           "truncated_normal", "ordered_probit", "hurdle_negative_binomial",
           "zero_inflated_negative_binomial", "censored_exponential", "normal_mixture"]
    hand = ["bernoulli_probit", "poisson_softplus", "normal_identity"]
    both = ["logistic", "poisson_log", "normal_sigma"]
    cases = [(f, False) for f in new + hand] + [(f, a) for f in both for a in (False, True)]
    if args.families:
        cases = [c for c in cases if c[0] in args.families]
    print(f"N = {args.rows:,}, d = {D}, 2 chains x {args.draws} draws after 1000 tuning")
    nuts_head = " NUTS wall (s) | NUTS min ESS | NUTS to ESS 1000 (s) | speed-up |" if args.nuts \
        else ""
    print("| family | bound | rows/iter | full-data fallback | setup (s) | min bulk ESS "
          "| whole time to ESS 1000 (s) |" + nuts_head)
    print("|---|---|---|---|---|---|---|" + "---|" * (4 if args.nuts else 0))
    for name, automatic in cases:
        r = run(name, args.rows, args.draws, automatic)
        line = (f"| {r['family']} | {r['bound']} | {r['rows']:.2f} | {r['fallback']:.4%} "
                f"| {r['setup_s']:.1f} | {r['min_ess']:.0f} | {r['to_ess_1000_s']:.1f} |")
        if args.nuts:
            u = run_nuts(name, args.rows, args.nuts_draws)
            line += (f" {u['wall_s']:.1f} | {u['min_ess']:.0f} | {u['to_ess_1000_s']:.1f} "
                     f"| {u['to_ess_1000_s'] / r['to_ess_1000_s']:.1f}× |")
        print(line + f" load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
