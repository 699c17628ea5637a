"""The ops with tight interval rules (``bounds/special_ops.py``) and the multinomial logit's
automatic bound built on them.

- ``log Σ e^{c_k}`` and the softmax weight: on random boxes (seeded), their values at random
  points inside lie in the enclosure; at the enclosure's defining corners against 30-digit
  mpmath values; narrow boxes give narrow enclosures; C code, Python ``impl`` and SciPy agree;
  their ``grad`` is the closed form (``P_j``, ``P_j(δ_jk − P_k)``);
- the multinomial logit's row term ``c_y − log Σ e^{c_k}`` as the model layer reads it: its
  order-2 suprema hold at random points of random boxes (PyTensor's compiled derivatives, not
  the interval evaluator) and are close to the derivatives at the box's centre on narrow boxes;
- an MHSS step on a multinomial logit: on random pairs inside the region the rates ``c_i M``
  bound every row's remainder ``|ξ_i|``, and ``M`` is symmetric in the pair.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.special as sc

import pymc_subsample as pms
from pymc_subsample.bounds.interval import evaluate_intervals
from pymc_subsample.bounds.special_ops import log_sum_exp
from pymc_subsample.model.predictors import PredictorTerm
from tests import row_models
from tests.pairs import points_inside, step_remainder_shares

RNG_SEED = 20261127


def _boxes(rng, n, k, low=-8.0, high=8.0):
    lo = rng.uniform(low, high, (k, n))
    width = rng.uniform(0.0, 2.0, (k, n)) * rng.choice([1e-7, 1e-3, 1e-1, 1.0], n)
    return lo, lo + width


def _weight_graph(j, xs):
    """The ``j``-th softmax weight of ``xs`` as PyTensor builds it: ``∂ log Σ e^x / ∂x_j``."""
    return pytensor.grad(log_sum_exp(*xs).sum(), xs[j])


@pytest.mark.parametrize("k", [2, 3, 5])
def test_log_sum_exp_and_weights_enclose_their_values(k):
    rng = np.random.default_rng([RNG_SEED, k])
    xs = [pt.vector(f"x{i}", dtype="float64") for i in range(k)]
    graphs = [log_sum_exp(*xs), *(_weight_graph(j, xs) for j in range(k))]
    n = 4000
    lo, hi = _boxes(rng, n, k)
    out = evaluate_intervals(graphs, {x: (lo[i], hi[i]) for i, x in enumerate(xs)})
    for _ in range(4):
        pts = points_inside(rng, lo, hi)
        values = [sc.logsumexp(pts, axis=0), *sc.softmax(pts, axis=0)]
        for (e_lo, e_hi), v in zip(out, values, strict=True):
            assert np.all((e_lo <= v) & (v <= e_hi))
    # the weights within [0, 1], and narrow boxes give narrow enclosures
    for e_lo, e_hi in out[1:]:
        assert np.all((e_lo >= 0.0) & (e_hi <= 1.0))
    narrow = np.all(hi - lo < 1e-6, axis=0)
    assert narrow.sum() > 500
    for e_lo, e_hi in out:
        assert np.all((e_hi - e_lo)[narrow] <= 1e-5 * np.maximum(1.0, np.abs(e_hi[narrow])))


def test_enclosure_ends_hold_the_exact_values_at_the_corners():
    """30-digit mpmath values of ``log Σ e^x`` at the box's low and high corners and of each
    weight at its two defining corners lie in the enclosures (the rounding widening holds)."""
    rng = np.random.default_rng([RNG_SEED, 7])
    k, n = 3, 60
    xs = [pt.vector(f"x{i}", dtype="float64") for i in range(k)]
    graphs = [log_sum_exp(*xs), *(_weight_graph(j, xs) for j in range(k))]
    lo, hi = _boxes(rng, n, k, low=-700.0, high=700.0)
    lo[:, :20], hi[:, :20] = _boxes(rng, 20, k, low=-3.0, high=3.0)
    out = evaluate_intervals(graphs, {x: (lo[i], hi[i]) for i, x in enumerate(xs)})
    with mpmath.workdps(30):
        def lse(v):
            return mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(float(x))) for x in v))

        for i in range(n):
            assert mpmath.mpf(float(out[0][0][i])) <= lse(lo[:, i])
            assert lse(hi[:, i]) <= mpmath.mpf(float(out[0][1][i]))
            for j in range(k):
                low = [lo[m, i] if m == j else hi[m, i] for m in range(k)]
                high = [hi[m, i] if m == j else lo[m, i] for m in range(k)]
                p_low = mpmath.exp(mpmath.mpf(float(low[j])) - lse(low))
                p_high = mpmath.exp(mpmath.mpf(float(high[j])) - lse(high))
                e_lo, e_hi = out[1 + j][0][i], out[1 + j][1][i]
                assert mpmath.mpf(float(e_lo)) <= p_low and p_high <= mpmath.mpf(float(e_hi))


def test_c_code_impl_and_grad_agree_with_the_closed_forms():
    rng = np.random.default_rng([RNG_SEED, 8])
    k = 3
    xs = [pt.vector(f"x{i}", dtype="float64") for i in range(k)]
    lse = log_sum_exp(*xs)
    weights = [pytensor.grad(lse.sum(), x) for x in xs]
    hess = [[pytensor.grad(w.sum(), x) for x in xs] for w in weights]
    outputs = [lse, *weights, *(h for row in hess for h in row)]
    values = rng.normal(0.0, 5.0, (k, 500))
    values[:, :3] = [[800.0, -800.0, 0.0], [799.0, -np.inf, 1.0], [0.0, -np.inf, -2.0]]
    c_fn = pytensor.function(xs, outputs, mode="FAST_RUN")
    py_fn = pytensor.function(xs, outputs, mode=pytensor.compile.mode.Mode(linker="py"))
    p = sc.softmax(values, axis=0)
    expected = [sc.logsumexp(values, axis=0), *p,
                *(p[j] * ((j == m) - p[m]) for j in range(k) for m in range(k))]
    for fn in (c_fn, py_fn):
        for got, want in zip(fn(*values), expected, strict=True):
            # 1 − P_k near P_k = 1 is exact to an ulp of 1
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


# ----------------------------------------------------- the multinomial logit's row term
def _multinomial_term(n=400):
    from pymc_subsample.model.likelihood import SubsampledLikelihood
    from pymc_subsample.model.predictors import detect_predictor_terms

    model = row_models.categorical_reference_zeros(n, seed=4)
    lik = SubsampledLikelihood(model, compile_kwargs={"mode": "FAST_COMPILE"})
    (term,) = detect_predictor_terms(lik, order=2)
    return lik, term


def test_multinomial_logit_suprema_hold_and_are_tight():
    """The order-2 suprema of ``c_y − log Σ e^{c_k}`` (``c_0 = 0``, two linear predictors) over
    random boxes hold at random points inside (PyTensor's compiled derivatives); on boxes of
    half-width ``5·10⁻³``, tall data's, they are within 3 % of the derivatives at the centre
    (median over rows, each multi-index)."""
    lik, term = _multinomial_term()
    fam = term.family
    assert fam.n_predictors == 2
    rng = np.random.default_rng([RNG_SEED, 9])
    n = lik.n_rows
    # the row data as the model gives them (the reference column, the class indicators)
    params = pytensor.function([lik.theta, lik.idx], list(term.params), mode="FAST_COMPILE",
                               on_unused_input="ignore")(
        np.zeros(lik.dim), np.arange(n, dtype=np.int64))
    params = [np.broadcast_to(v, (n,)) for v in params]
    alphas, graphs = fam.derivatives(2)
    point_fn = pytensor.function([*fam._predictors, *fam._data], graphs, on_unused_input="ignore")
    for width in (1e-3, 0.1, 1.0):
        hats = [rng.uniform(-4, 4, n) for _ in range(2)]
        norms = [width * 10.0 ** rng.uniform(-1, 0, n) for _ in range(2)]
        sup = fam.all_suprema(2, tuple(norms), None, tuple(hats), 5.0, tuple(params))
        for _ in range(4):
            points = [h + 5.0 * s * rng.uniform(-1, 1, n) for h, s in zip(hats, norms,
                                                                         strict=True)]
            at = dict(zip(alphas, point_fn(*points, *params), strict=False))
            for alpha, s_alpha in sup.items():
                assert np.all(np.abs(at[alpha]) <= s_alpha), alpha
        if width == 1e-3:
            centre = dict(zip(alphas, point_fn(*hats, *params), strict=False))
            for alpha, s_alpha in sup.items():
                assert np.median(s_alpha / np.abs(centre[alpha])) < 1.03, alpha


def test_multinomial_logit_step_rates_bound_every_remainder():
    """MHSS on a multinomial logit (K = 3, 2,000 rows): on random pairs inside the region,
    ``|ξ_i| ≤ c_i M`` on every row, and ``M`` is the same both ways."""
    model = row_models.categorical_reference_zeros(2000, seed=4)
    with model:
        step = pms.MHSS()
    assert all(isinstance(t, PredictorTerm) for t in step._reference_pass.terms)
    assert step.rate_bound is None
    tight = step_remainder_shares(step, np.random.default_rng([RNG_SEED, 10]))
    assert max(tight) > 1e-3  # the pairs reach where the remainder is a visible share
