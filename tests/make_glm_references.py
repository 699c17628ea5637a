"""Make the NUTS reference posteriors of the GLM posterior tests (seeded, small files).

For each case in :data:`CASES` (family, rows, dimension, data seed) this runs PyMC's NUTS on
``glm_model(*glm_data(n, d, family, seed=seed), family)`` and saves the posterior mean, sd and
MCSE of the mean of ``b`` to ``tests/data/nuts_<family>_<n>x<d>.npz``, with the settings and
versions as a JSON string under ``settings``. The tests load these instead of running NUTS on
tens of thousands of rows themselves. Rerun when a case or :mod:`pymc_subsample.datasets`
changes:

    python tests/make_glm_references.py
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm

from pymc_subsample.datasets import glm_data, glm_model

DATA = Path(__file__).parent / "data"
#: (family, rows, dimension, data seed)
CASES = [("poisson_log", 20_000, 4, 9)]
SETTINGS = dict(draws=2500, tune=1000, chains=4, random_seed=12)


def reference_path(family: str, n: int, d: int) -> Path:
    return DATA / f"nuts_{family}_{n}x{d}.npz"


def make(family: str, n: int, d: int, seed: int) -> Path:
    with glm_model(*glm_data(n, d, family, seed=seed), family):
        idata = pm.sample(**SETTINGS, cores=1, progressbar=False)
    post = idata.posterior["b"]
    summary = az.summary(idata, var_names=["b"])
    settings = dict(SETTINGS, family=family, rows=n, dim=d, data_seed=seed,
                    python=platform.python_version(), pymc=pm.__version__,
                    arviz=az.__version__, min_ess_bulk=float(summary["ess_bulk"].min()),
                    max_r_hat=float(summary["r_hat"].max()))
    path = reference_path(family, n, d)
    np.savez(path, mean=post.mean(("chain", "draw")).values,
             sd=post.std(("chain", "draw")).values,
             mcse=az.mcse(idata, var_names=["b"])["b"].values,
             settings=json.dumps(settings))
    return path


if __name__ == "__main__":
    DATA.mkdir(exist_ok=True)
    for case in CASES:
        print(make(*case))
