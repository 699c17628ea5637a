"""MHSS (orders 1 and 2) against NUTS on logistic regression, side by side.

For each N, :func:`pymc_subsample.compare` runs the three methods on one model and reports ESS
per second (minimum bulk ESS over coordinates, divided by the whole wall time: step
construction with MAP, control variates and compilation, tuning and sampling), the whole wall
time extrapolated to a bulk ESS of 1000, rows of data read per iteration, microseconds per
iteration (sampling only, setup excluded) and acceptance. Data follow Prado, Nemeth & Sherlock
(2024), Sec. 5.1. NUTS is NumPyro's when it is installed (``--nuts-sampler``), and runs fewer
draws above 1e5 rows (its cost per draw grows with N; its ESS per second does not depend on
run length). ``benchmarks/grid.py`` is the fuller comparison (more N and d, HMCECS, the MHSS
proposals).

    python benchmarks/mhss_vs_nuts.py                         # N = 1e4, 1e5, 1e6
    python benchmarks/mhss_vs_nuts.py --rows 100000 --draws 50000
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import warnings
from functools import partial

import pandas as pd
import pymc as pm

import pymc_subsample as pms
from pymc_subsample.compare import NUTS_SAMPLERS, nuts_method_name
from pymc_subsample.datasets import glm_data, glm_model

logging.getLogger("pymc").setLevel(logging.ERROR)
warnings.filterwarnings("ignore")


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, nargs="+", default=[1e4, 1e5, 1e6])
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--draws", type=int, default=50_000)
    parser.add_argument("--tune", type=int, default=2_000)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--nuts-draws", type=int, default=1000,
                        help="NUTS draws and tuning per chain up to 1e5 rows, / 5 above")
    parser.add_argument("--mode", default=None, help="PyTensor mode for MHSS, e.g. NUMBA")
    parser.add_argument("--nuts-sampler", choices=NUTS_SAMPLERS, default="auto")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    compile_kwargs = {"mode": args.mode} if args.mode else None
    tables = []
    for n in (int(r) for r in args.rows):
        X, y = glm_data(n, args.dim, "logistic", seed=args.seed)
        nuts_draws = args.nuts_draws if n <= 100_000 else max(100, args.nuts_draws // 5)
        result = pms.compare(
            glm_model(X, y, "logistic"),
            {f"MHSS-{k}": partial(pms.MHSS, cv_order=k, compile_kwargs=compile_kwargs)
             for k in (1, 2)},
            draws=args.draws, tune=args.tune, chains=args.chains,
            nuts_sampler=args.nuts_sampler, nuts_draws=nuts_draws, nuts_tune=nuts_draws,
            random_seed=args.seed,
        )
        nuts_name = nuts_method_name(result.nuts_sampler)
        table = result.table.assign(N=n)
        iters = table["chains"] * (table["draws"] + table["tune"])
        table["us_per_iter"] = (table["sampling_s"] / iters * 1e6).round(1)
        nuts = table.loc[table["method"] == nuts_name, "ess_bulk_per_s"].iloc[0]
        table["vs_nuts"] = (table["ess_bulk_per_s"] / nuts).round(1)
        print(table.to_string(index=False), flush=True)
        tables.append(table)
    out = pd.concat(tables, ignore_index=True)
    cols = ["N", "method", "chains", "tune", "draws", "setup_s", "sampling_s", "ess_bulk",
            "ess_bulk_per_s", "time_to_ess1000_s", "vs_nuts", "rows_per_iter", "us_per_iter",
            "accept", "z_vs_ref"]
    print(f"\nlogistic regression, d = {args.dim}; {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, PyMC {pm.__version__}, "
          f"MHSS mode {args.mode or 'default (C)'}\n")
    print(out[cols].to_string(index=False))
    return out


if __name__ == "__main__":
    main()
