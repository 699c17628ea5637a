"""MHSS's rows per iteration on the truncated Normal of ``benchmarks/automatic_bounds.py``
(``pm.Truncated(pm.Normal.dist(mu=X @ b, sigma=s), lower=-0.5)``, d = 10) at several N, and
the share of rows whose generated mean lies below the truncation point.

That benchmark draws its coefficients after its covariates, so they change with N (and with
them the share of rows with μ below −0.5, which sets how many rows MHSS reads);
``--same-coefficients`` takes instead the first N rows of the 10⁶-row model, one set of
coefficients for every N.

    PYTHONPATH=. python benchmarks/truncated_normal_rows.py --rows 20000 200000 \\
        [--same-coefficients] [--draws 500]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import pymc as pm

import pymc_subsample as pms
from benchmarks.automatic_bounds import D, model

FULL_ROWS = 1_000_000
LOWER = -0.5


def _first_rows(full: pm.Model, n: int) -> pm.Model:
    """The model of ``full``'s first ``n`` rows."""
    X = full["X"].get_value()[:n]
    y = np.asarray(full.rvs_to_values[full.observed_RVs[0]].data)[:n]
    with pm.Model() as m:
        b = pm.Normal("b", 0, 5, shape=D)
        s = pm.HalfNormal("s", 2.0)
        pm.Truncated("y", pm.Normal.dist(mu=pm.Data("X", X) @ b, sigma=s), lower=LOWER,
                     observed=y)
    return m


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, nargs="+", default=[20_000, 200_000])
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--same-coefficients", action="store_true")
    args = parser.parse_args()
    full = model("truncated_normal", FULL_ROWS) if args.same_coefficients else None
    print(f"one chain of {args.draws} draws after as many tuning steps"
          + (f"; the first N rows of the {FULL_ROWS:,}-row model" if full else ""))
    print("| N | predictors | share of μ below a | rows/iter | full-data fallback | setup (s) |")
    print("|---|---|---|---|---|---|")
    for n in args.rows:
        m = _first_rows(full, n) if full is not None else model("truncated_normal", n)
        X = m["X"].get_value()
        # the generating coefficients: the model's data are drawn with them after X
        rng = np.random.default_rng(1)
        rng.normal(size=(FULL_ROWS if full is not None else n, D - 1))
        eta = X @ rng.normal(0.0, 0.5, D)
        with m:
            t0 = time.perf_counter()
            step = pms.MHSS()
            setup_s = time.perf_counter() - t0
            idata = pm.sample(args.draws, tune=args.draws, chains=1, step=step, random_seed=3,
                              progressbar=False, compute_convergence_checks=False)
        stats = idata.sample_stats
        k = step._reference_pass.terms[0].family.n_predictors
        print(f"| {n:,} | {k} | {np.mean(eta < LOWER):.0%} | {float(stats['n_data'].mean()):.2f} "
              f"| {float(stats['full_data_fallback'].mean()):.2%} | {setup_s:.1f} | "
              f"load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
