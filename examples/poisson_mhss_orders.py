"""Poisson regression: MHSS with first- against second-order control variates.

Both orders are exact, so their posteriors must agree (the ``z_vs_ref`` column measures the
largest difference of posterior means in Monte Carlo standard errors). What changes is the
cost: the rows read per iteration grow like √N for order 1 and stay O(1) for order 2 near the
mode (Prado, Nemeth & Sherlock 2024, Sec. 4.3). The likelihood is ``y ~ Poisson(softplus(η))``,
the form whose bounds the paper derives (Sec. 5.3).

    python examples/poisson_mhss_orders.py      # under a minute
"""

from __future__ import annotations

from functools import partial

import pymc_subsample as pms
from pymc_subsample.compare import Comparison, compare
from pymc_subsample.datasets import glm_data, glm_model
from pymc_subsample.demo import blas_notice

N_ROWS, DIM = 50_000, 5


def main() -> Comparison:
    if notice := blas_notice():  # one line instead of PyTensor's BLAS warning
        print(notice)
    X, y = glm_data(N_ROWS, DIM, "poisson", seed=2)
    model = glm_model(X, y, "poisson")
    result = compare(
        model,
        {
            "MHSS-1": partial(pms.MHSS, cv_order=1),
            "MHSS-2": partial(pms.MHSS, cv_order=2),
        },
        draws=10_000,
        tune=1000,
        chains=2,
        nuts=False,
        reference="MHSS-2",
        random_seed=2,
    )
    print(f"Poisson regression, N = {N_ROWS:,} rows, d = {DIM}\n")
    print(result)
    rows = result.table.set_index("method")["rows_per_iter"]
    print(f"\nOrder 1 reads {rows['MHSS-1'] / rows['MHSS-2']:.0f}x as many rows per iteration "
          "as order 2.")
    return result


if __name__ == "__main__":
    main()
