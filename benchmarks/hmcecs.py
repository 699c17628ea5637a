"""NumPyro's HMCECS on the same GLM data as the MHSS runs, with the fields of ``compare``'s table.

HMC with energy-conserving subsampling (Dang et al. 2019) as NumPyro implements it:
``numpyro.infer.HMCECS`` around NumPyro's NUTS, the likelihood estimated on a subsample of
``m`` rows with second-order Taylor control variates at the MAP
(``HMCECS.taylor_proxy``, from ``numpyro.contrib.ecs_proxies``), and the subsample indices
updated one block at a time. ``m = 1300`` and 100 blocks are the values of NumPyro's own
example (``examples/hmcecs.py``); its MAP comes from SVI on subsamples, this one from L-BFGS on
all the rows, so that the control variates are centred as precisely as MHSS's.

The data are :func:`pymc_subsample.datasets.glm_data`'s, written as a NumPyro model:
``b ~ N(0, 10²)`` and the likelihood of each family in :data:`FAMILIES` (``_likelihood``), as
:func:`pymc_subsample.datasets.glm_model`.
JAX runs in float64 (as PyMC's JAX backend does).

    python benchmarks/hmcecs.py --rows 1e5 --dim 10 --family logistic --draws 1000
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import arviz as az
import numpy as np

from pymc_subsample.compare import COLUMNS, summarise_run

__all__ = ["NUM_BLOCKS", "SUBSAMPLE_SIZE", "find_map", "numpyro_glm", "run_hmcecs"]

#: Subsample size and number of blocks of NumPyro's HMCECS example.
SUBSAMPLE_SIZE = 1300
NUM_BLOCKS = 100
FAMILIES = ("logistic", "poisson", "poisson_log", "cloglog", "gamma_log", "negative_binomial",
            "student_t")


def _jax():
    """Import JAX and NumPyro (float64), or say how to install them."""
    try:
        import jax
        import numpyro
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError('HMCECS needs NumPyro: pip install "pymc-subsample[jax]"') from err
    jax.config.update("jax_enable_x64", True)
    return jax, numpyro


def _likelihood(family: str, eta):
    """The NumPyro distribution of ``y`` given ``η`` for ``glm_model(X, y, family)``."""
    jax, _ = _jax()
    import jax.numpy as jnp
    import numpyro.distributions as dist

    from pymc_subsample.datasets import GAMMA_SHAPE, NB_ALPHA, STUDENT_NU, STUDENT_SIGMA

    if family == "logistic":
        return dist.Bernoulli(logits=eta)
    if family == "poisson_log":
        return dist.Poisson(jnp.exp(eta))
    if family == "poisson":
        return dist.Poisson(jax.nn.softplus(eta))
    if family == "cloglog":
        return dist.Bernoulli(probs=-jnp.expm1(-jnp.exp(eta)))
    if family == "gamma_log":
        return dist.Gamma(GAMMA_SHAPE, GAMMA_SHAPE * jnp.exp(-eta))
    if family == "negative_binomial":
        return dist.NegativeBinomial2(jnp.exp(eta), NB_ALPHA)
    if family == "student_t":
        return dist.StudentT(STUDENT_NU, eta, STUDENT_SIGMA)
    raise ValueError(f"family must be one of {FAMILIES}; got {family!r}")


def numpyro_glm(family: str, prior_sd: float = 10.0):
    """The NumPyro model ``model(X, y, subsample_size)`` of ``glm_model(X, y, family)``."""
    jax, numpyro = _jax()
    import jax.numpy as jnp
    import numpyro.distributions as dist

    _likelihood(family, jnp.zeros(1))  # refuses an unknown family before sampling

    def model(X, y, subsample_size=None):
        n, d = X.shape
        b = numpyro.sample("b", dist.Normal(jnp.zeros(d), prior_sd).to_event(1))
        with numpyro.plate("N", n, subsample_size=subsample_size):
            xb = numpyro.subsample(X, event_dim=1)
            yb = numpyro.subsample(y, event_dim=0)
            numpyro.sample("obs", _likelihood(family, xb @ b), obs=yb)

    return model


def find_map(X, y, family: str, prior_sd: float = 10.0) -> tuple[np.ndarray, int]:
    """Posterior mode on all the rows by L-BFGS on a jitted JAX log density.

    Returns the mode and the number of full-data passes (value-and-gradient evaluations).
    """
    jax, _ = _jax()
    import jax.numpy as jnp
    from scipy.optimize import minimize

    def neg_log_post(b):
        loglik = jnp.sum(_likelihood(family, X @ b).log_prob(y))
        return -loglik + 0.5 * jnp.sum(b**2) / prior_sd**2

    value_and_grad = jax.jit(jax.value_and_grad(neg_log_post))

    def fun(b):
        value, grad = value_and_grad(jnp.asarray(b))
        return float(value), np.asarray(grad, dtype=np.float64)

    res = minimize(fun, np.zeros(X.shape[1]), jac=True, method="L-BFGS-B",
                   options={"maxiter": 1000, "ftol": 1e-14, "gtol": 1e-8})
    return np.asarray(res.x), int(res.nfev)


def run_hmcecs(
    X: np.ndarray,
    y: np.ndarray,
    family: str = "logistic",
    *,
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 1,
    subsample_size: int = SUBSAMPLE_SIZE,
    num_blocks: int = NUM_BLOCKS,
    seed: int = 0,
    method: str = "HMCECS",
) -> tuple[dict[str, Any], az.InferenceData]:
    """Sample ``glm_model(X, y, family)``'s posterior with NumPyro's HMCECS.

    Returns a row with the fields of :data:`pymc_subsample.compare.COLUMNS` (``z_vs_ref`` NaN)
    plus ``subsample_accept`` (the mean acceptance probability of the block update of the
    subsample), ``divergences`` and ``setup_profile``, and an ``InferenceData`` of ``b``.

    - ``setup_s``: copying the data to JAX, the full-data MAP by L-BFGS (its compilation
      included) and HMCECS's ``init``: the Taylor control variates' sums of the
      log-likelihood, gradient and Hessian at the MAP over all rows (``cv_full_data_s`` in
      ``setup_profile``) and over the first subsample (``cv_subsample_s``), both run eagerly
      by NumPyro, so mostly JAX dispatch and compilation at small ``N``, and NUTS's
      initialisation (``init_s`` is the whole ``init``);
    - ``sampling_s``: the rest of NumPyro's ``MCMC.run``: JAX's compilation of the sampler,
      warm-up (``tune``) and ``draws``, chains one after another;
    - ``rows_per_iter``: rows whose likelihood or gradient is evaluated per iteration,
      estimated as ``m × (leapfrog steps + 1 + subsample acceptance probability)``: one
      ``m``-row gradient per leapfrog step of the inner NUTS (the mean of its ``num_steps``),
      the estimator at the proposed subsample, and the refresh after an accepted one. The
      Taylor terms of the ``m / num_blocks`` rows drawn for the new block are left out;
    - ``accept``: the inner NUTS's mean acceptance probability.

    NUTS starts at the MAP (MHSS starts from a draw of its Laplace approximation there).
    """
    jax, numpyro = _jax()
    import jax.numpy as jnp
    from numpyro.infer import HMCECS, MCMC, NUTS, init_to_value

    profile: dict[str, Any] = {}
    t0 = time.perf_counter()
    Xj = jnp.asarray(X, dtype=jnp.float64)
    yj = jnp.asarray(y, dtype=jnp.float64)
    Xj.block_until_ready()
    profile["to_jax_s"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    b_map, passes = find_map(Xj, yj, family)
    profile["map_s"] = time.perf_counter() - t1

    model = numpyro_glm(family)
    ref = {"b": jnp.asarray(b_map)}
    inner = NUTS(model, init_strategy=init_to_value(values=ref))
    proxy = HMCECS.taylor_proxy(ref)
    cv_seconds = {"cv_full_data_s": 0.0, "cv_subsample_s": 0.0}

    def timed_proxy(*args, **kwargs):  # times the control variates' sums, full and subsample
        start = time.perf_counter()
        proxy_fn, gibbs_init, gibbs_update = proxy(*args, **kwargs)
        cv_seconds["cv_full_data_s"] += time.perf_counter() - start

        def timed_gibbs_init(*init_args, **init_kwargs):
            begin = time.perf_counter()
            state = jax.block_until_ready(gibbs_init(*init_args, **init_kwargs))
            cv_seconds["cv_subsample_s"] += time.perf_counter() - begin
            return state

        return proxy_fn, timed_gibbs_init, gibbs_update

    kernel = HMCECS(inner, num_blocks=num_blocks, proxy=timed_proxy)
    init_seconds = []
    kernel_init = kernel.init

    def timed_init(*args, **kwargs):
        start = time.perf_counter()
        state = kernel_init(*args, **kwargs)
        jax.block_until_ready(state)
        init_seconds.append(time.perf_counter() - start)
        return state

    kernel.init = timed_init
    mcmc = MCMC(kernel, num_warmup=tune, num_samples=draws, num_chains=chains,
                chain_method="sequential", progress_bar=False)
    t2 = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(seed), Xj, yj, subsample_size,
             extra_fields=("hmc_state.num_steps", "hmc_state.accept_prob",
                           "hmc_state.diverging", "accept_prob"))
    samples = mcmc.get_samples(group_by_chain=True)
    jax.block_until_ready(samples)
    run_s = time.perf_counter() - t2
    profile.update(cv_seconds)
    profile["init_s"] = sum(init_seconds)  # includes the two cv_ phases
    profile["full_data_passes"] = passes + 3 * len(init_seconds)  # MAP; CV value, grad, Hessian
    setup_s = profile["to_jax_s"] + profile["map_s"] + profile["init_s"]
    sampling_s = run_s - profile["init_s"]

    extra = mcmc.get_extra_fields(group_by_chain=True)
    num_steps = np.asarray(extra["hmc_state.num_steps"], dtype=float)
    sub_accept = np.asarray(extra["accept_prob"], dtype=float)
    stats = {
        "n_data": subsample_size * (num_steps + 1.0 + sub_accept),
        "n_steps": num_steps,
        "acceptance_rate": np.asarray(extra["hmc_state.accept_prob"], dtype=float),
        "diverging": np.asarray(extra["hmc_state.diverging"], dtype=bool),
        "subsample_accept": sub_accept,
    }
    idata = az.from_dict(posterior={"b": np.asarray(samples["b"])}, sample_stats=stats)
    row, _, _ = summarise_run(idata, ["b"], X.shape[0], setup_s=setup_s, sampling_s=sampling_s)
    row = {"method": method, "tune": tune, **row, "z_vs_ref": math.nan}
    row = {col: row[col] for col in COLUMNS}
    row["subsample_accept"] = float(sub_accept.mean())
    row["divergences"] = int(stats["diverging"].sum())
    row["setup_profile"] = profile
    return row, idata


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from pymc_subsample.datasets import glm_data

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e5)
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--family", choices=FAMILIES, default="logistic")
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--subsample-size", type=int, default=SUBSAMPLE_SIZE)
    parser.add_argument("--num-blocks", type=int, default=NUM_BLOCKS)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    X, y = glm_data(int(args.rows), args.dim, args.family, seed=args.seed)
    row, _ = run_hmcecs(X, y, args.family, draws=args.draws, tune=args.tune,
                        subsample_size=args.subsample_size, num_blocks=args.num_blocks,
                        seed=args.seed)
    for key, value in row.items():
        print(f"{key:>18}: {value}")
    return row


if __name__ == "__main__":
    main()
