"""Robust regression with a Student-t likelihood: MHSS with a bound you supply (``UserBound``).

MHSS bounds the control-variate error of the families it reads off the model by itself; for any
other likelihood you can give the per-row constants ``c_i`` yourself. For a GLM row
``ℓ_i(β) = f(x_iᵀβ; y_i)`` Corollary 2 of Prado, Nemeth & Sherlock (2024) needs only
``L ≥ sup |f'''|``: then ``c_i = L‖x_i‖³`` with the step's default ``M`` (order 2). For a
Student-t with fixed ``ν`` and ``σ``, with ``u = (y − η)/(σ√ν)``,
``f''' = (ν + 1)·2u(3 − u²)/(1 + u²)³ / (σ³ν^{3/2})``, whose largest absolute value is at
``u = √2 − 1`` (the roots of ``u⁴ − 6u² + 1``). The step probes a user's bound on random pairs
of points at construction and refuses one that is violated: the script shows that too, with
constants a thousand times too small.

    python examples/student_t_userbound.py
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm

import pymc_subsample as pms
from pymc_subsample.errors import SubsamplingModelError

N, D, NU, SIGMA, SEED = 50_000, 5, 4.0, 1.0, 1


def student_t_third_derivative_bound(nu: float, sigma: float) -> float:
    """``sup_η |∂³/∂η³ log t_ν(y; η, σ)|``, the same for every ``y``."""
    u = math.sqrt(2.0) - 1.0
    return (nu + 1.0) * 2.0 * u * (3.0 - u * u) / (1.0 + u * u) ** 3 / (sigma**3 * nu**1.5)


def main() -> None:
    rng = np.random.default_rng(SEED)
    X = np.column_stack([np.ones(N), rng.normal(size=(N, D - 1))])
    y = X @ rng.normal(size=D) + SIGMA * rng.standard_t(NU, size=N)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 10.0, shape=D)
        pm.StudentT("y", nu=NU, mu=pm.Data("X", X) @ b, sigma=SIGMA, observed=y)

    # c_i = L ‖x_i‖³ for order-2 control variates, with the step's default (Euclidean) M
    consts = student_t_third_derivative_bound(NU, SIGMA) * np.linalg.norm(X, axis=1) ** 3
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
