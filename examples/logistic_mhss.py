"""Logistic regression on 100 000 rows with exact subsampling MH (MHSS, order 2).

The model is an ordinary PyMC model; the only change from a NUTS run is ``step=pms.MHSS()``.
MHSS finds the posterior mode once on all rows, builds second-order Taylor control variates
there, and then decides each Metropolis–Hastings move from a handful of rows while still
targeting the exact posterior (Prado, Nemeth & Sherlock 2024).

    python examples/logistic_mhss.py            # about half a minute
"""

from __future__ import annotations

import warnings

# ArviZ's once-a-day notice of its coming refactor, raised when it is imported: only that one
warnings.filterwarnings("ignore", message=r"\s*ArviZ is undergoing a major refactor",
                        category=FutureWarning, module="arviz")

import time

import arviz as az
import pymc as pm

import pymc_subsample as pms
from pymc_subsample.datasets import glm_data
from pymc_subsample.demo import blas_notice

N_ROWS, DIM = 100_000, 10


def main() -> az.InferenceData:
    if notice := blas_notice():  # one line instead of PyTensor's BLAS warning
        print(notice)
    X_np, y_np = glm_data(N_ROWS, DIM, "logistic", seed=1)

    with pm.Model():
        X = pm.Data("X", X_np)
        b = pm.Normal("b", 0.0, 10.0, shape=DIM)
        pm.Bernoulli("y", logit_p=X @ b, observed=y_np)

        start = time.perf_counter()
        step = pms.MHSS(cv_order=2)  # MAP, control variates and bounds: one pass over the rows
        setup = time.perf_counter() - start
        idata = pm.sample(10_000, tune=1000, chains=4, cores=1, step=step, random_seed=1,
                          progressbar=False)
        sampling = time.perf_counter() - start - setup

    stats = idata.sample_stats
    print(az.summary(idata, var_names=["b"], kind="all", round_to=4))
    print(f"\nN = {N_ROWS:,} rows, d = {DIM}; setup {setup:.1f} s, sampling {sampling:.1f} s")
    print(f"rows of data evaluated per iteration: {float(stats['n_data'].mean()):.2f} on "
          f"average, {int(stats['n_data'].max())} at most")
    print(f"acceptance rate {float(stats['accepted'].mean()):.2f}; passed the control-variate "
          f"screen {float(stats['accept_stage1'].mean()):.2f}; full-data fallbacks "
          f"{int(stats['full_data_fallback'].sum())}; clipped rates {int(stats['clipped'].sum())}")
    return idata


if __name__ == "__main__":
    main()
