"""MHSS (orders 1 and 2) against PyMC's NUTS on logistic regression, side by side.

Prints, for each N: ESS per second (minimum over coordinates, bulk ESS from ArviZ, divided by
the whole wall time: step construction with MAP, control variates and compilation, tuning and
sampling), rows of data read per iteration, microseconds per iteration (sampling only, setup
excluded) and acceptance rate. Data follow Prado, Nemeth & Sherlock (2024), Sec. 5.1.

    python benchmarks/mhss_vs_nuts.py                         # N = 1e4, 1e5, 1e6
    python benchmarks/mhss_vs_nuts.py --rows 100000 --draws 20000
"""

from __future__ import annotations

import argparse
import logging
import platform
import time
import warnings

import arviz as az
import numpy as np
import pandas as pd
import pymc as pm

import pymc_subsample as pms

logging.getLogger("pymc").setLevel(logging.ERROR)
warnings.filterwarnings("ignore")


def logistic_data(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Intercept plus N(0,1) covariates, coefficients N(0, 1/d): η stays O(1) (Sec. 5.1)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[:, 0] = 1.0
    beta = rng.normal(size=d) / np.sqrt(d)
    y = rng.binomial(1, 1.0 / (1.0 + np.exp(-(X @ beta))))
    return X, y


def logistic_model(X: np.ndarray, y: np.ndarray) -> pm.Model:
    with pm.Model() as model:
        Xd = pm.Data("X", X)
        b = pm.Normal("b", 0.0, 10.0, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=Xd @ b, observed=y)
    return model


def run(model, label, make_step, draws, tune, chains, seed, n_rows):
    """Time step construction and sampling; return one table row."""
    with model:
        t0 = time.perf_counter()
        step = make_step()
        t_setup = time.perf_counter() - t0
        t1 = time.perf_counter()
        idata = pm.sample(draws, tune=tune, chains=chains, cores=1, step=step, random_seed=seed,
                          progressbar=False, compute_convergence_checks=False)
        t_sample = time.perf_counter() - t1
    ess = float(az.ess(idata, var_names=["b"])["b"].min())
    stats = idata.sample_stats
    iters = chains * (draws + tune)
    if "n_data" in stats:
        rows = float(stats["n_data"].mean())
        accept = float(stats["accepted"].mean())
    else:  # NUTS reads every row at every gradient
        rows = float(stats["n_steps"].mean()) * n_rows
        accept = float(stats["acceptance_rate"].mean())
    wall = t_setup + t_sample
    return {
        "N": n_rows, "method": label, "draws": f"{chains}x{draws}+{tune}",
        "setup_s": round(t_setup, 2), "wall_s": round(wall, 2), "min_ess": round(ess, 1),
        "ess_per_s": round(ess / wall, 2), "rows_per_iter": round(rows, 2),
        "us_per_iter": round(t_sample / iters * 1e6, 1), "accept": round(accept, 3),
    }


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, nargs="+", default=[1e4, 1e5, 1e6])
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--draws", type=int, default=20000)
    parser.add_argument("--tune", type=int, default=2000)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--nuts-draws", type=int, default=1000,
                        help="NUTS draws (and tuning) per chain; scaled down above 1e5 rows")
    parser.add_argument("--mode", default=None, help="PyTensor mode for MHSS, e.g. NUMBA")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    compile_kwargs = {"mode": args.mode} if args.mode else None
    rows = []
    for n in (int(r) for r in args.rows):
        X, y = logistic_data(n, args.dim, args.seed)
        model = logistic_model(X, y)
        for order in (1, 2):
            rows.append(run(model, f"MHSS-{order}",
                            lambda o=order: pms.MHSS(cv_order=o, compile_kwargs=compile_kwargs),
                            args.draws, args.tune, args.chains, args.seed, n))
            print(rows[-1], flush=True)
        nuts_draws = args.nuts_draws if n <= 100_000 else max(200, args.nuts_draws // 5)
        rows.append(run(model, "NUTS", lambda: pm.NUTS(), nuts_draws, nuts_draws, args.chains,
                        args.seed, n))
        print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    for n, grp in table.groupby("N"):
        nuts = grp.loc[grp.method == "NUTS", "ess_per_s"].iloc[0]
        table.loc[grp.index, "vs_nuts"] = (grp["ess_per_s"] / nuts).round(1)
    print(f"\nlogistic regression, d = {args.dim}; {platform.processor() or platform.machine()}, "
          f"{platform.python_version()}, PyMC {pm.__version__}\n")
    print(table.to_string(index=False))
    return table


if __name__ == "__main__":
    main()
