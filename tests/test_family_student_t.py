"""Student-t rows with fixed ν and σ (``pymc_subsample/bounds/student_t.py``).

The derivatives below are written out here and checked against finite differences of
``scipy.stats.t``; the constants against 30-digit numerical derivatives; then the MHSS bound on
10⁴ random pairs and the posterior against NUTS (``tests/family_checks.py``).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy import stats

from pymc_subsample.bounds import derivative_bound, glm_loglik
from pymc_subsample.datasets import STUDENT_NU as NU
from pymc_subsample.datasets import STUDENT_SIGMA as SIGMA
from tests.family_checks import (
    build,
    check_pairs,
    check_posterior,
    check_reference_derivatives,
    sup_on_grid,
)

S2 = NU * SIGMA**2


def f(eta, y):
    return stats.t.logpdf(y, NU, loc=eta, scale=SIGMA)


def f1(eta, y):
    r = y - eta
    return (NU + 1.0) * r / (S2 + r**2)


def f2(eta, y):
    r = y - eta
    return -(NU + 1.0) * (S2 - r**2) / (S2 + r**2) ** 2


def test_loglik_and_reference_derivatives():
    rng = np.random.default_rng(1)
    eta, y = rng.normal(0.0, 5.0, 500), rng.normal(0.0, 5.0, 500)
    np.testing.assert_allclose(glm_loglik("student_t", eta, y, params=(NU, SIGMA)), f(eta, y),
                               rtol=1e-12)
    check_reference_derivatives(f, f1, f2, eta, y)


@pytest.mark.parametrize("order", [1, 2])
def test_constants_bound_and_nearly_attain_the_derivatives(order):
    def row(eta):  # y = 0: every y is a shift of it
        return -0.5 * (NU + 1.0) * mpmath.log(1 + eta**2 / S2)

    sup = sup_on_grid(row, order, np.linspace(-4.0 * SIGMA, 4.0 * SIGMA, 801))
    bound = derivative_bound("student_t", np.array([0.0, 7.0]), order, params=(NU, SIGMA))
    assert np.all(bound == bound[0])
    assert sup <= bound[0] <= sup * (1 + 1e-4)
    expected = (NU + 1) / S2 if order == 1 else 1.4571068 * (NU + 1) / S2**1.5
    assert bound[0] == pytest.approx(expected, rel=1e-7)


def test_mhss_on_student_t_rows():
    """Read from the model with no arguments; the bound on 10⁴ pairs; the posterior vs NUTS."""
    X, y, model, step = build("student_t")
    assert not math.isfinite(step.region_radius)  # global constants
    for order in (1, 2):
        check_pairs(X, y, step, "student_t", order, (NU, SIGMA), f, f1, f2)
    check_posterior(model, step, "student_t")
