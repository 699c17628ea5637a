"""The negative binomial's dispersion ops (``bounds/dispersion_ops.py``) and the hurdle and
zero-inflated negative binomials' row terms read with them (``model/predictor_forms.py``).

- :class:`NegativeBinomialZeroRate` ``∂^a_η ∂^b_λ [e^λ softplus(η − λ)]``,
  :class:`LogRisingFactorial` ``∂^m_λ [log Γ(y + e^λ) − log Γ(e^λ)]`` and
  :class:`LogOneMinusExpNeg` ``∂^k_T log(1 − e^{−T})``: their values against 30-digit mpmath
  derivatives, C code against the Python ``impl``, and on random boxes (seeded) the values
  at random points inside (ends included) lie in the enclosures;
- the hurdle negative binomial's row term as the model layer reads it has none of PyMC's
  ``BetaInc`` left, and an MHSS step on it (and on the zero-inflated one) bounds every row's
  remainder ``|ξ_i| ≤ c_i M`` on random pairs of the region: the rewrites are exact and the
  enclosures hold, end to end, on the model's own likelihood (``pytest -m long``: minutes).
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.graph.traversal import io_toposort
from pytensor.tensor.elemwise import Elemwise

import pymc_subsample as pms
from pymc_subsample.bounds.dispersion_ops import (
    LogOneMinusExpNeg,
    LogRisingFactorial,
    NegativeBinomialZeroRate,
)
from pymc_subsample.bounds.interval import evaluate_intervals
from pymc_subsample.model.predictors import PredictorTerm
from tests import row_models
from tests.pairs import points_inside, step_remainder_shares

RNG_SEED = 20261127
ZERO_RATE_ORDERS = [(a, b) for a in range(5) for b in range(5 - a)]


def _mp_derivative(fn, point, orders):
    with mpmath.workdps(30):
        return float(mpmath.diff(fn, point, orders))


def _zero_rate_mp(eta, lam):
    return mpmath.exp(lam) * mpmath.log1p(mpmath.exp(eta - lam))


def _rising_mp(y):
    return lambda lam: mpmath.loggamma(y + mpmath.exp(lam)) - mpmath.loggamma(mpmath.exp(lam))


def _log1mexp_neg_mp(t):
    return mpmath.log(1 - mpmath.exp(-t))


def _close(got, want, rtol=1e-11, atol=1e-14):
    return abs(got - want) <= rtol * abs(want) + atol


@pytest.mark.parametrize(("a", "b"), ZERO_RATE_ORDERS)
def test_zero_rate_values_and_enclosures(a, b):
    op = NegativeBinomialZeroRate(a, b)
    for eta, lam in [(0.5, 0.7), (-3.0, 2.0), (4.0, -1.0), (1.9, 0.3), (-12.0, 1.0)]:
        assert _close(op.impl(eta, lam), _mp_derivative(_zero_rate_mp, (eta, lam), (a, b)),
                      atol=1e-12 * np.exp(lam))
    rng = np.random.default_rng([RNG_SEED, a, b])
    n = 3000
    lo = rng.uniform(-6.0, 6.0, (2, n))
    hi = lo + rng.uniform(0.0, 1.5, (2, n)) * rng.choice([1e-6, 1e-2, 1.0], (1, n))
    eta, lam = pt.vector("eta"), pt.vector("lam")
    graph = Elemwise(op)(eta, lam)
    (e_lo, e_hi), = evaluate_intervals([graph], {eta: (lo[0], hi[0]), lam: (lo[1], hi[1])})
    impl = np.vectorize(op.impl)
    for _ in range(3):
        pts = points_inside(rng, lo, hi)
        values = impl(pts[0], pts[1])
        assert np.all((e_lo <= values) & (values <= e_hi))


@pytest.mark.parametrize("m", range(5))
def test_log_rising_factorial_values_and_enclosures(m):
    op = LogRisingFactorial(m)
    for lam in (-2.0, 0.7, 3.1):
        for y in (0.0, 1.0, 3.0, 17.0):
            assert _close(op.impl(lam, y), _mp_derivative(_rising_mp(y), lam, m))
    rng = np.random.default_rng([RNG_SEED, 50 + m])
    n = 2000
    lo = rng.uniform(-4.0, 5.0, n)
    hi = lo + rng.uniform(0.0, 1.5, n) * rng.choice([1e-6, 1e-2, 1.0], n)
    y = rng.integers(0, 40, n).astype(np.float64)
    lam, yv = pt.vector("lam"), pt.vector("y")
    graph = Elemwise(op)(lam, yv)
    (e_lo, e_hi), = evaluate_intervals([graph], {lam: (lo, hi), yv: y})
    impl = np.vectorize(op.impl)
    for _ in range(3):
        values = impl(points_inside(rng, lo[None], hi[None])[0], y)
        assert np.all((e_lo <= values) & (values <= e_hi))
    if m:
        # no sum over j < y for a y that is not a count: no bound
        (w_lo, w_hi), = evaluate_intervals([graph], {lam: (lo[:5], hi[:5]),
                                                     yv: np.full(5, 2.5)})
        assert np.all(np.isneginf(w_lo) & np.isposinf(w_hi))


@pytest.mark.parametrize("k", range(6))
def test_log_one_minus_exp_neg_values_and_enclosures(k):
    op = LogOneMinusExpNeg(k)
    for t in (1e-6, 1e-3, 0.5, 0.69, 0.7, 3.0, 40.0):
        assert _close(op.impl(t), _mp_derivative(_log1mexp_neg_mp, t, k), atol=1e-300)
    rng = np.random.default_rng([RNG_SEED, 70 + k])
    n = 3000
    lo = 10.0 ** rng.uniform(-5.0, 1.5, n)
    hi = lo * (1.0 + rng.uniform(0.0, 2.0, n) * rng.choice([1e-6, 1e-2, 1.0], n))
    t = pt.vector("t")
    (e_lo, e_hi), = evaluate_intervals([Elemwise(op)(t)], {t: (lo, hi)})
    impl = np.vectorize(op.impl)
    for _ in range(3):
        values = impl(points_inside(rng, lo[None], hi[None])[0])
        assert np.all((e_lo <= values) & (values <= e_hi))
    # a box reaching T ≤ 0 (the pole) has no bound
    (w_lo, w_hi), = evaluate_intervals([Elemwise(op)(t)], {t: (np.array([-0.1]),
                                                                np.array([0.2]))})
    assert np.isneginf(w_lo[0]) and np.isposinf(w_hi[0])


def test_c_code_agrees_with_impl():
    eta, lam, y, t = (pt.vector(v) for v in ("eta", "lam", "y", "t"))
    # the orders whose C code differs in kind (the softplus term, Horner's polynomial)
    outputs = [*(Elemwise(NegativeBinomialZeroRate(a, b))(eta, lam)
                 for a, b in [(0, 0), (0, 2), (2, 1)]),
               *(Elemwise(LogRisingFactorial(m))(lam, y) for m in (0, 1, 3)),
               *(Elemwise(LogOneMinusExpNeg(k))(t) for k in (0, 1, 4))]
    rng = np.random.default_rng([RNG_SEED, 90])
    values = [rng.normal(0.0, 3.0, 300), rng.normal(0.0, 2.0, 300),
              rng.integers(0, 30, 300).astype(np.float64), 10.0 ** rng.uniform(-4, 1.5, 300)]
    c_fn = pytensor.function([eta, lam, y, t], outputs, mode="FAST_RUN")
    py_fn = pytensor.function([eta, lam, y, t], outputs,
                              mode=pytensor.compile.mode.Mode(linker="py"))
    for got, want in zip(c_fn(*values), py_fn(*values), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


def _ops(graph) -> set[str]:
    return {type(getattr(node.op, "scalar_op", node.op)).__name__
            for node in io_toposort(pytensor.graph.traversal.graph_inputs([graph]), [graph])}


def test_hurdle_negative_binomial_row_term_is_read_with_the_ops():
    from pymc_subsample.model.likelihood import SubsampledLikelihood
    from pymc_subsample.model.predictors import detect_predictor_terms

    model = row_models.hurdle_negative_binomial(300, seed=4)
    lik = SubsampledLikelihood(model, compile_kwargs={"mode": "FAST_COMPILE"})
    (term,) = detect_predictor_terms(lik, order=2)
    ops = _ops(term.family._f)
    assert "BetaInc" not in ops and "GammaLn" not in ops
    assert {"NegativeBinomialZeroRate", "LogRisingFactorial", "LogOneMinusExpNeg"} <= ops
    assert term.family.n_predictors == 3 and term.family.pieces > 1


@pytest.mark.long  # 110–125 s each on a cold compile cache (loaded)
@pytest.mark.parametrize("name", ["hurdle_negative_binomial", "zero_inflated_negative_binomial"])
def test_step_rates_bound_every_remainder(name):
    """MHSS on 2,000 rows: on random pairs inside the region, ``|ξ_i|`` under the step's
    rates on every row (``c_i M``, or the shared-scale bound's), the same both ways (the
    likelihood's row terms, with PyMC's gammaln and ``I_p(α, 1)`` as ``p^α``, not the
    automatic bound's rewritten term)."""
    model = row_models.MODELS[name](2000, seed=4)
    with model:
        step = pms.MHSS()
    assert all(isinstance(t, PredictorTerm) for t in step._reference_pass.terms)
    tight = step_remainder_shares(step, np.random.default_rng([RNG_SEED, 91]))
    assert max(tight) > 1e-4  # the pairs reach where the remainder is a visible share
