"""Regression with logistic errors: MHSS with a bound you supply (``UserBound``).

MHSS bounds the control-variate error of the families it reads off the model by itself
(``docs/methods/mhss.md``, "Families"); for any other likelihood you can give the per-row
constants ``c_i`` yourself. For a GLM row ``ℓ_i(β) = f(x_iᵀβ; y_i)`` Corollary 2 of Prado,
Nemeth & Sherlock (2024) needs only ``L ≥ sup |f'''|``: then ``c_i = L‖x_i‖³`` with the step's
default ``M`` (order 2). PyMC's ``Logistic(mu=η, s=s)`` likelihood is not in that table. With
``z = (y − η)/s`` its row is ``f = g(z) − log s``, ``g(z) = −z − 2 log(1 + e^{−z})``, so
``g'' = −2σ(z)σ(−z)`` and ``f''' = −g'''(z)/s³ = 2σ(z)σ(−z)(1 − 2σ(z))/s³``: twice the
logistic regression's third derivative over ``s³``, whose largest absolute value is
``2(√3/18)/s³``. The step probes a user's bound on random pairs of points at construction and
refuses one that is violated: the script shows that too, with constants a thousand times too
small.

    python examples/logistic_errors_userbound.py
"""

from __future__ import annotations

import warnings

# ArviZ's once-a-day notice of its coming refactor, raised when it is imported: only that one
warnings.filterwarnings("ignore", message=r"\s*ArviZ is undergoing a major refactor",
                        category=FutureWarning, module="arviz")

import math

import numpy as np
import pymc as pm

import pymc_subsample as pms
from pymc_subsample.demo import blas_notice
from pymc_subsample.errors import SubsamplingModelError

N, D, SCALE, SEED = 50_000, 5, 1.0, 1


def logistic_third_derivative_bound(scale: float) -> float:
    """``sup_η |∂³/∂η³ log Logistic(y; η, s)|``, the same for every ``y``."""
    return 2.0 * (math.sqrt(3.0) / 18.0) / scale**3


def main() -> None:
    if notice := blas_notice():  # one line instead of PyTensor's BLAS warning
        print(notice)
    rng = np.random.default_rng(SEED)
    X = np.column_stack([np.ones(N), rng.normal(size=(N, D - 1))])
    y = X @ rng.normal(size=D) + rng.logistic(0.0, SCALE, size=N)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 10.0, shape=D)
        pm.Logistic("y", mu=pm.Data("X", X) @ b, s=SCALE, observed=y)

    # c_i = L ‖x_i‖³ for order-2 control variates, with the step's default (Euclidean) M
    consts = logistic_third_derivative_bound(SCALE) * np.linalg.norm(X, axis=1) ** 3
    try:
        with model:
            pms.MHSS(bound=pms.UserBound(consts / 1000.0))
    except SubsamplingModelError as err:
        print(f"a bound 1000 times too small is refused:\n  {err}\n")

    result = pms.compare(
        model,
        {"MHSS + UserBound": lambda: pms.MHSS(bound=pms.UserBound(consts))},
        draws=3000, tune=1000, chains=2, nuts_draws=300, nuts_tune=300, random_seed=SEED,
    )
    print(result)
    stats = result.idata["MHSS + UserBound"].sample_stats
    print(f"\nclipped rates (bound violations met while sampling): {int(stats['clipped'].sum())}")


if __name__ == "__main__":
    main()
