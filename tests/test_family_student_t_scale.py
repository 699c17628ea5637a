"""Student-t rows with fixed ν and a sampled σ: two predictors, μ and λ = log σ
(``pymc_subsample/bounds/student_t.py``, ``student_t_scale_row_constants``).

Checked: every mixed partial of order 2 and 3 against 30-digit numerical derivatives of the
log-density (the scaling ``(ν + 1) ν^{−a/2} e^{−aλ} P_{a,b}(q)`` and the suprema of ``P``), the
bound on 10⁴ random pairs in the ball against remainders from ``scipy.stats.t`` (independent of
the package), and the posterior of ``b`` and ``σ`` against NUTS.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy import stats

from pymc_subsample.bounds.student_t import SCALE_SUPREMA, student_t_scale_row_constants
from pymc_subsample.datasets import STUDENT_NU as NU
from tests.family_checks import (
    check_two_predictor_family,
    check_two_predictor_pairs,
    check_written_derivatives,
    two_predictors,
)


def _row_mp(y):
    def f(mu, lam):
        return (-(NU + 1) / 2 * mpmath.log(1 + (y - mu) ** 2 * mpmath.exp(-2 * lam) / NU) - lam)
    return f


@pytest.mark.parametrize("a, b", sorted(SCALE_SUPREMA))
def test_mixed_partials_scale_and_their_suprema(a, b):
    """∂^a_μ ∂^b_λ f = (ν+1) ν^{−a/2} e^{−aλ} P(q), q = (y − μ)e^{−λ}/√ν, with sup |P| as given."""
    worst = 0.0
    with mpmath.workdps(30):
        for lam in (-0.7, 0.4):
            f = _row_mp(0.0)
            for q in np.concatenate([np.linspace(-3.0, 3.0, 601), np.linspace(-20.0, 20.0, 41)]):
                mu = -q * math.sqrt(NU) * math.exp(lam)  # y = 0
                d = float(mpmath.diff(f, (mpmath.mpf(mu), mpmath.mpf(lam)), (a, b)))
                p = d / ((NU + 1) * NU ** (-a / 2) * math.exp(-a * lam))
                worst = max(worst, abs(p))
    assert worst <= SCALE_SUPREMA[(a, b)] * (1 + 1e-9)
    assert worst >= 0.999 * SCALE_SUPREMA[(a, b)]


def test_family_closed_forms_are_autodiff():
    """The family's closed-form gradient and Hessian in (μ, log σ) (what the pass and the
    control variates compile) against autodiff of its log-density, rows from the centre to far
    tails and ν per row."""
    import pytensor
    import pytensor.tensor as pt

    from pymc_subsample.bounds import autodiff_row_terms
    from pymc_subsample.bounds.student_t import StudentTScale

    fam = StudentTScale()
    rng = np.random.default_rng(12)
    n = 400
    y = rng.standard_t(2.0, size=n) * 10.0 ** rng.uniform(-1, 5, size=n)
    mu, lam, nu = rng.normal(size=n), rng.normal(0.0, 1.5, size=n), rng.uniform(0.1, 50, size=n)
    ps = (pt.vector("mu", dtype="float64"), pt.vector("lam", dtype="float64"))
    yv, nuv = pt.vector("y", dtype="float64"), pt.vector("nu", dtype="float64")
    outputs = []
    for f, grad, hess in (fam.row_terms(ps, yv, (nuv,)),
                          autodiff_row_terms(fam.row_logp, ps, yv, (nuv,))):
        fn = pytensor.function([*ps, yv, nuv], [f, *grad, *hess], mode="FAST_COMPILE")
        outputs.append(fn(mu, lam, y, nu))
    for ours, auto in zip(*outputs, strict=True):
        assert np.max(np.abs(ours - auto) / (1.0 + np.abs(auto))) < 1e-9


def _check_bound_on_random_pairs(X, y, step, order):
    rows = two_predictors(X, step)  # θ = (b, log σ)
    mu_hat, ls_hat = rows.first_hat, rows.second_hat

    def f(mu, ls):
        return stats.t.logpdf(y[:, None], NU, loc=mu, scale=np.exp(ls))

    # gradient and Hessian at (μ̂, λ̂), written out and checked by finite differences
    q = (y - mu_hat) * math.exp(-ls_hat) / math.sqrt(NU)
    e = math.exp(-ls_hat) / math.sqrt(NU)
    g_mu = ((NU + 1) * q / (1 + q**2) * e)[:, None]
    g_ls = ((NU + 1) * q**2 / (1 + q**2) - 1)[:, None]
    h_mm = ((NU + 1) * e**2 * (q**2 - 1) / (1 + q**2) ** 2)[:, None]
    h_ml = ((NU + 1) * e * -2 * q / (1 + q**2) ** 2)[:, None]
    h_ll = ((NU + 1) * -2 * q**2 / (1 + q**2) ** 2)[:, None]
    check_written_derivatives(f, rows, (g_mu, g_ls))
    consts = student_t_scale_row_constants(order, rows.s_first, rows.s_second,
                                           np.full(len(y), ls_hat), step.region_radius, NU,
                                           rows.cos)
    check_two_predictor_pairs(step, rows, f, (g_mu, g_ls), (h_mm, h_ml, h_ll), consts, order)


@pytest.mark.slow
def test_mhss_on_student_t_rows_with_a_sampled_sigma():
    """One build, then the bound on 10⁴ pairs per order and the posterior against NUTS."""
    # two predictors and no angle factors: more rows than a one-predictor family at this N
    check_two_predictor_family("student_t_scale", _check_bound_on_random_pairs,
                               others=("sigma",), max_rows=20)
