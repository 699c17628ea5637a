"""Make the NUTS reference posteriors of the GLM posterior tests (seeded, small files).

For each case in :data:`CASES` (family, rows, dimension, data seed) this runs NUTS (PyMC's;
NumPyro's for the automatic-bound families of :data:`tests.row_models.AUTOMATIC` but those of
:data:`PYMC_NUTS`) on
``glm_model(*glm_data(n, d, family, seed=seed), family)`` and saves the posterior mean, sd and
MCSE of the mean of ``b`` (as ``mean``, ``sd``, ``mcse``) and of any other free variable ``v``
(as ``v_mean``, ``v_sd``, ``v_mcse``) to ``tests/data/nuts_<family>_<n>x<d>.npz``, with the
settings and versions as a JSON string under ``settings``. The tests load these instead of
running NUTS on tens of thousands of rows themselves. A case whose family names a model of
:mod:`tests.row_models` (a censored Weibull, a zero-inflated Poisson) builds that model with
``n`` rows and the data seed (``d`` is then its number of coefficients). Rerun when a case or
:mod:`pymc_subsample.datasets` changes:

    python tests/make_glm_references.py                  # every case
    python tests/make_glm_references.py gaussian_scale   # the cases of one family
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm

from pymc_subsample.datasets import (
    glm_data,
    glm_model,
    random_effects_data,
    random_effects_model,
)
from tests import row_models

DATA = Path(__file__).parent / "data"
#: (family, rows, dimension, data seed)
CASES = [("poisson_log", 20_000, 4, 9), ("gaussian_scale", 20_000, 4, 9),
         ("cloglog", 20_000, 4, 9), ("gamma_log", 20_000, 4, 9),
         ("negative_binomial", 20_000, 4, 9), ("student_t", 20_000, 4, 9),
         ("student_t_scale", 20_000, 4, 9), ("negative_binomial_scale", 20_000, 4, 9),
         ("gamma_log_scale", 20_000, 4, 9), ("random_effects", 12_000, 3, 5),
         ("random_effects_noncentred", 12_000, 3, 5), ("random_effects_many", 12_000, 3, 5),
         ("random_effects_funnel", 3200, 3, 5), ("random_effects_crossed", 6000, 3, 7),
         ("random_effects_1000", 100_000, 3, 5), ("random_effects_crossed_200x50", 100_000, 3, 7),
         ("student_t_nu", 20_000, 4, 9),
         ("logistic_product", 20_000, 4, 9), ("logistic", 20_000, 4, 9),
         ("censored_weibull_right", 3000, row_models.D + 1, 4),
         ("zero_inflated_poisson", 3000, row_models.D + 1, 4),
         *((name, 20_000, row_models.COEFFICIENTS.get(name, row_models.D + 1), 4)
           for name in row_models.AUTOMATIC)]
#: Groups of the random-effects cases, and of the many-levels one (rows split by level,
#: the arrow frame: at least ``pymc_subsample.model.levels.MIN_SPLIT_LEVELS``).
RE_GROUPS, MANY_GROUPS = 40, 64
#: Levels of the two crossed factors of ``"random_effects_crossed"`` (the first split, the
#: second among the fixed coordinates: ``pymc_subsample.model.crossed``).
CROSSED_GROUPS = (70, 12)
#: The cases of issue 27 at its sizes (10⁵ rows): levels of ``"random_effects_1000"`` (one
#: factor, centred) and of ``"random_effects_crossed_200x50"``'s two factors.
ISSUE_27_GROUPS, ISSUE_27_CROSSED = 1000, (200, 50)


def crossed_model(n: int, seed: int, d: int = 3,
                  groups: tuple[int, int] = CROSSED_GROUPS) -> pm.Model:
    """Crossed random intercepts, logistic: ``η = Xb + u[g] + v[h]`` with
    ``u ~ N(0, s_u)`` on the first factor's ``groups[0]`` levels, ``v ~ N(0, s_v)`` on the
    second's ``groups[1]``, each row's two levels uniform (the data drawn from ``seed``)."""
    rng = np.random.default_rng(seed)
    g1, g2 = groups
    X = np.column_stack([np.ones(n), rng.normal(size=(n, d - 1))])
    first, second = rng.integers(0, g1, n), rng.integers(0, g2, n)
    eta = (X @ rng.normal(0.0, 0.5, d) + rng.normal(0.0, 0.6, g1)[first]
           + rng.normal(0.0, 0.4, g2)[second])
    y = rng.binomial(1, 1.0 / (1.0 + np.exp(-eta)))
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 5.0, shape=d)
        s_u, s_v = pm.HalfNormal("s_u", 1.0), pm.HalfNormal("s_v", 1.0)
        u = pm.Normal("u", 0.0, s_u, shape=g1)
        v = pm.Normal("v", 0.0, s_v, shape=g2)
        pm.Bernoulli("y", logit_p=pm.Data("X", X) @ b + u[pm.Data("g1", first)]
                     + v[pm.Data("g2", second)], observed=y)
    return model
SETTINGS = dict(draws=2500, tune=1000, chains=4, random_seed=12)


def reference_path(family: str, n: int, d: int) -> Path:
    return DATA / f"nuts_{family}_{n}x{d}.npz"


def reference_model(family: str, n: int, d: int, seed: int) -> pm.Model:
    """The model of a case: ``glm_model``'s, or the random-intercept logistic regression
    (:data:`RE_GROUPS` groups), centred for ``"random_effects"`` and non-centred (``s * z[g]``)
    for ``"random_effects_noncentred"``, centred with :data:`MANY_GROUPS` groups for
    ``"random_effects_many"``, and non-centred with :data:`MANY_GROUPS` groups for
    ``"random_effects_funnel"`` (50 rows a level: the centred joint posterior has no mode, and
    NUTS samples its non-centred twin; :func:`make` stores ``u = s·z``); the crossed
    intercepts of :func:`crossed_model` for ``"random_effects_crossed"`` and
    ``"random_effects_crossed_200x50"``, and :data:`ISSUE_27_GROUPS` centred groups for
    ``"random_effects_1000"``."""
    if family in row_models.MODELS:
        return row_models.MODELS[family](n, seed=seed)
    if family == "random_effects_crossed":
        return crossed_model(n, seed, d)
    if family == "random_effects_crossed_200x50":
        return crossed_model(n, seed, d, ISSUE_27_CROSSED)
    if family == "random_effects_1000":
        return random_effects_model(*random_effects_data(n, d, ISSUE_27_GROUPS, seed=seed),
                                    groups=ISSUE_27_GROUPS)
    if family.startswith("random_effects"):
        groups = RE_GROUPS if family in ("random_effects", "random_effects_noncentred") \
            else MANY_GROUPS
        centred = family not in ("random_effects_noncentred", "random_effects_funnel")
        return random_effects_model(*random_effects_data(n, d, groups, seed=seed),
                                    groups=groups, centred=centred)
    return glm_model(*glm_data(n, d, family, seed=seed), family)


#: Cases of :data:`tests.row_models.AUTOMATIC` whose reference is PyMC's NUTS, not NumPyro's,
#: and why
PYMC_NUTS = {
    # NumPyro's left one chain of four at its jittered start (r̂ 1.5 on both, seed 12)
    "censored_weibull_right": "a NumPyro chain stuck at its start",
    "censored_exponential_right": "a NumPyro chain stuck at its start",
    # PyMC's normal log-CDF uses erfcx, which PyTensor's JAX backend has only with
    # tensorflow-probability installed
    "censored_normal_both": "no JAX erfcx",
    "truncated_normal": "no JAX erfcx",
    "truncated_normal_offset": "no JAX erfcx",
}


#: Cases whose model's graph has PyMC's normal log-CDF (``erfcx``) and whose NumPyro reference
#: uses :func:`register_jax_erfcx`
JAX_ERFCX = ("ordered_probit",)


def register_jax_erfcx() -> str:
    """Give PyTensor's JAX backend ``jax.scipy.special.erfcx`` for its ``Erfcx`` op (which it
    otherwise takes from tensorflow-probability, not installed here), for this script only.

    JAX's ``erfcx`` agrees with SciPy's to 1.2e-15 relative on 4,001 points of
    ``[-5, 10⁸]`` (checked here on every call, over that range and beyond PyMC's
    ``z < −1`` branch, whose argument is ``−z/√2 > 0.7``). Returns how the op was made, for
    the reference's settings."""
    import jax
    import jax.numpy as jnp
    import jax.scipy.special as jsp
    import scipy.special as sp
    from pytensor.link.jax.dispatch import jax_funcify
    from pytensor.scalar.math import Erfcx

    jax.config.update("jax_enable_x64", True)
    x = np.concatenate([np.linspace(-5.0, 5.0, 2001), np.geomspace(5.0, 1e8, 2000)])
    error = float(np.max(np.abs(np.asarray(jsp.erfcx(jnp.asarray(x))) / sp.erfcx(x) - 1.0)))
    if error > 1e-13:
        raise RuntimeError(f"jax.scipy.special.erfcx is off by {error:.1e} relative")

    @jax_funcify.register(Erfcx)
    def _erfcx(op, **kwargs):
        return jsp.erfcx

    return f"PyTensor's Erfcx on JAX as jax.scipy.special.erfcx (max rel. error {error:.1e})"


#: Cases whose model's graph has PyMC's negative binomial log-CDF at 0 (``BetaInc(α, 1, p)``,
#: a hurdle's normaliser) and whose NumPyro reference uses :func:`register_jax_betainc_b1`
JAX_BETAINC = ("hurdle_negative_binomial",)


def register_jax_betainc_b1() -> str:
    """Give PyTensor's JAX backend ``BetaInc`` as ``I_x(a, 1) = x^a`` (``B(x; a, 1) = x^a/a``,
    ``B(a, 1) = 1/a``), NaN for any other ``b``, for this script only: JAX's ``betainc`` has
    no gradient in ``a``, which NUTS needs for a hurdle negative binomial's ``P(Y = 0)``, and
    a ``b ≠ 1`` would make the chain fail rather than sample a wrong posterior. Checked here
    against SciPy on 1,000 points. Returns how the op was made, for the reference's
    settings."""
    import jax
    import jax.numpy as jnp
    import scipy.special as sp
    from pytensor.link.jax.dispatch import jax_funcify
    from pytensor.scalar.math import BetaInc

    jax.config.update("jax_enable_x64", True)

    def betainc_b1(a, b, x):
        return jnp.where(b == 1.0, x**a, jnp.nan)

    rng = np.random.default_rng(0)
    a, x = rng.uniform(0.05, 50.0, 1000), rng.uniform(0.0, 1.0, 1000)
    error = float(np.max(np.abs(np.asarray(betainc_b1(a, 1.0, x)) - sp.betainc(a, 1.0, x))))
    if error > 1e-12:
        raise RuntimeError(f"x^a is off I_x(a, 1) by {error:.1e}")

    @jax_funcify.register(BetaInc)
    def _betainc(op, **kwargs):
        return betainc_b1

    return (f"PyTensor's BetaInc on JAX as I_x(a, 1) = x^a, NaN for b != 1 (max abs. error "
            f"{error:.1e} against SciPy)")


def make(family: str, n: int, d: int, seed: int) -> Path:
    # NumPyro's NUTS for the cases added since it became the yardstick (same settings), PyMC's
    # for those of PYMC_NUTS
    numpyro = ((family in row_models.AUTOMATIC and family not in PYMC_NUTS)
               or family.startswith(("random_effects_funnel", "random_effects_crossed",
                                     "random_effects_1000")))
    sampler = "numpyro" if numpyro else "pymc"
    extra = {"erfcx": register_jax_erfcx()} if numpyro and family in JAX_ERFCX else {}
    if numpyro and family in JAX_BETAINC:
        extra["betainc"] = register_jax_betainc_b1()
    with reference_model(family, n, d, seed):
        idata = pm.sample(**SETTINGS, cores=1, progressbar=False, nuts_sampler=sampler)
    if family == "random_effects_funnel":
        post = idata.posterior
        idata.posterior = post.assign(u=post["s"] * post["z"]).drop_vars("z")
    names = list(idata.posterior.data_vars)
    summary = az.summary(idata)
    settings = dict(SETTINGS, nuts_sampler=sampler, family=family, rows=n, dim=d, data_seed=seed,
                    python=platform.python_version(), pymc=pm.__version__,
                    arviz=az.__version__, min_ess_bulk=float(summary["ess_bulk"].min()),
                    max_r_hat=float(summary["r_hat"].max()), **extra)
    path = reference_path(family, n, d)
    arrays = {}
    for name in names:
        post = idata.posterior[name]
        prefix = "" if name == "b" else f"{name}_"
        arrays[f"{prefix}mean"] = post.mean(("chain", "draw")).values
        arrays[f"{prefix}sd"] = post.std(("chain", "draw")).values
        arrays[f"{prefix}mcse"] = az.mcse(idata, var_names=[name])[name].values
    np.savez(path, **arrays, settings=json.dumps(settings))
    return path


if __name__ == "__main__":
    DATA.mkdir(exist_ok=True)
    families = set(sys.argv[1:])
    for case in CASES:
        if not families or case[0] in families:
            print(make(*case))
