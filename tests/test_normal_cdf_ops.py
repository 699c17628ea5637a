"""The Normal log-CDF ops with tight interval rules (``bounds/normal_cdf_ops.py``).

- the monotonicity each rule relies on, against 30-digit mpmath values at random points
  (also far in both tails): ``m(x) + x > 0`` (so ``m = φ/Φ`` decreases); for
  ``log(Φ(a) − Φ(b))`` in ``m = (a + b)/2``, ``h = (a − b)/2``: the truncated mean
  ``W_b − W_a`` inside ``(b, a)``, ``a + W_a + W_b > 0`` and ``W_a + W_b − b > 0`` (so ``W_a``
  decreases in ``m`` and ``h``, ``W_b`` increases in ``m`` and decreases in ``h``);
- on random boxes (seeded), the enclosures of ``log Φ``, ``m``, ``log(Φ(a) − Φ(b))``, its
  weights and their derivatives up to the third order (``pytensor.grad`` of the ops) hold the
  values at random points inside; narrow boxes give narrow enclosures;
- the enclosures' ends hold 30-digit mpmath values at the corners that define them;
- C code, Python ``impl`` and SciPy agree, and the ``grad``s are the closed forms.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.tensor.elemwise import Elemwise

from pymc_subsample.bounds.interval import evaluate_intervals
from pymc_subsample.bounds.normal_cdf_ops import (
    LogNormalCDFDiff,
    log_normal_cdf,
    log_normal_cdf_diff,
)
from tests.pairs import points_inside

RNG_SEED = 20261128


def _mp_log_phi(x):
    x = mpmath.mpf(float(x))
    if x > 0:
        return mpmath.log1p(-mpmath.erfc(x / mpmath.sqrt(2)) / 2)
    return mpmath.log(mpmath.erfc(-x / mpmath.sqrt(2)) / 2)


def _mp_diff(a, b):
    """``Φ(a) − Φ(b)`` in mpmath, accurate in both tails."""
    a, b = mpmath.mpf(float(a)), mpmath.mpf(float(b))
    if b >= 0:
        return (mpmath.erfc(b / mpmath.sqrt(2)) - mpmath.erfc(a / mpmath.sqrt(2))) / 2
    return (mpmath.erfc(-a / mpmath.sqrt(2)) - mpmath.erfc(-b / mpmath.sqrt(2))) / 2


def _mp_log_diff(a, b):
    """``log(Φ(a) − Φ(b))`` in mpmath, accurate also where it is about ``−(Φ(−a) + Φ(b))``."""
    am, bm = mpmath.mpf(float(a)), mpmath.mpf(float(b))
    if bm < 0 < am:
        return mpmath.log1p(-(mpmath.erfc(am / mpmath.sqrt(2))
                              + mpmath.erfc(-bm / mpmath.sqrt(2))) / 2)
    return mpmath.log(_mp_diff(a, b))


def _mp_diff_mh(m, h):
    """``Φ(m + h) − Φ(m − h)`` in mpmath (``m``, ``h`` exact floats)."""
    m, h = mpmath.mpf(float(m)), mpmath.mpf(float(h))
    a, b = m + h, m - h
    if b >= 0:
        return (mpmath.erfc(b / mpmath.sqrt(2)) - mpmath.erfc(a / mpmath.sqrt(2))) / 2
    return (mpmath.erfc(-a / mpmath.sqrt(2)) - mpmath.erfc(-b / mpmath.sqrt(2))) / 2


def _points(rng, n):
    return np.concatenate([rng.uniform(-40, 40, n), rng.uniform(-3, 3, n),
                           -(10.0 ** rng.uniform(0, 3, n // 4))])


def test_the_monotonicity_the_rules_rely_on():
    rng = np.random.default_rng([RNG_SEED, 1])
    with mpmath.workdps(30):
        for x in _points(rng, 200):
            xm = mpmath.mpf(float(x))
            m = mpmath.npdf(xm) / mpmath.exp(_mp_log_phi(x))
            assert m + xm > 0, x
        gaps = 10.0 ** rng.uniform(-6, 1, 400)
        for a, gap in zip(_points(rng, 80)[:400], gaps, strict=False):
            b = a - gap
            d = _mp_diff(a, b)
            if d == 0:
                continue
            am, bm = mpmath.mpf(float(a)), mpmath.mpf(float(b))
            w_a, w_b = mpmath.npdf(am) / d, mpmath.npdf(bm) / d
            # the truncated mean lies inside (b, a); a + W_a + W_b > 0; W_a + W_b − b > 0
            assert bm < w_b - w_a < am, (a, b)
            assert am + w_a + w_b > 0 and w_a + w_b - bm > 0, (a, b)


def _boxes(rng, n, low=-12.0, high=12.0):
    lo = rng.uniform(low, high, n)
    width = rng.uniform(0.0, 2.0, n) * rng.choice([1e-7, 1e-3, 1e-1, 1.0], n)
    return lo, lo + width


def _derivatives(f, xs, order):
    """``f`` and its partial derivatives up to ``order`` in ``xs`` (PyTensor's grads)."""
    out, layer = [f], [f]
    for _ in range(order):
        layer = [pytensor.grad(g.sum(), x) for g in layer for x in xs]
        out += layer
    return out


def _check_enclosures(graphs, xs, boxes, rng, narrow_tol):
    out = evaluate_intervals(graphs, dict(zip(xs, boxes, strict=True)))
    fn = pytensor.function(xs, graphs, mode="FAST_RUN")
    for _ in range(4):
        pts = [points_inside(rng, lo, hi) for lo, hi in boxes]
        # the a > b boxes of the difference: points inside keep a > b
        for (e_lo, e_hi), v in zip(out, fn(*pts), strict=True):
            ok = np.isfinite(v)
            assert np.all((e_lo[ok] <= v[ok]) & (v[ok] <= e_hi[ok]))
    # narrow boxes where the arguments are moderate (in the far lower tail, m ≈ −x and the
    # derivatives' polynomials in x and m cancel: their enclosures are valid, wider)
    narrow = np.all([(hi - lo < 1e-6) & (np.abs(lo) < 8.0) for lo, hi in boxes], axis=0)
    assert narrow.sum() > 100
    for e_lo, e_hi in out:
        scale = np.maximum(1.0, np.abs(e_hi[narrow]))
        assert np.all((e_hi - e_lo)[narrow] <= narrow_tol * scale)
    return out


def test_log_phi_and_mills_ratio_enclose_their_values():
    rng = np.random.default_rng([RNG_SEED, 2])
    x = pt.vector("x", dtype="float64")
    graphs = _derivatives(log_normal_cdf(x), [x], 4)
    lo, hi = _boxes(rng, 4000, -40.0, 40.0)
    out = _check_enclosures(graphs, [x], [(lo, hi)], rng, 1e-3)
    # log Φ ≤ 0 and m ≥ 0 (up to the outward step of the product with the grad's 1)
    assert np.all(out[0][1] <= 0.0) and np.all(out[1][0] >= -1e-300)


def test_log_diff_and_weights_enclose_their_values():
    rng = np.random.default_rng([RNG_SEED, 3])
    a, b = pt.vector("a", dtype="float64"), pt.vector("b", dtype="float64")
    graphs = _derivatives(log_normal_cdf_diff(a, b), [a, b], 3)
    n = 4000
    a_lo, a_hi = _boxes(rng, n, -10.0, 10.0)
    gap = 10.0 ** rng.uniform(-2, 0.7, n)
    b_hi = a_lo - gap
    b_lo = b_hi - rng.uniform(0.0, 1.0, n) * rng.choice([1e-7, 1e-3, 1e-1], n)
    out = _check_enclosures(graphs, [a, b], [(a_lo, a_hi), (b_lo, b_hi)], rng, 1e-3)
    for e_lo, e_hi in out:
        assert np.all(np.isfinite(e_lo) & np.isfinite(e_hi))
    # a box that reaches a ≤ b: undefined there, the whole line
    bad = evaluate_intervals(graphs[:1], {a: (np.array([0.0]), np.array([1.0])),
                                          b: (np.array([0.5]), np.array([0.6]))})[0]
    assert bad[0][0] == -np.inf and bad[1][0] == np.inf


def test_enclosure_ends_hold_the_exact_values_at_the_corners():
    rng = np.random.default_rng([RNG_SEED, 4])
    x = pt.vector("x", dtype="float64")
    lp = log_normal_cdf(x)
    graphs = [lp, pytensor.grad(lp.sum(), x)]
    lo, hi = _boxes(rng, 300, -38.0, 38.0)
    (l_lo, l_hi), (r_lo, r_hi) = evaluate_intervals(graphs, {x: (lo, hi)})
    mv, hv = pt.vector("m", dtype="float64"), pt.vector("h", dtype="float64")
    f = Elemwise(LogNormalCDFDiff())(mv, hv)
    w_a = 0.5 * (pytensor.grad(f.sum(), mv) + pytensor.grad(f.sum(), hv))
    w_b = 0.5 * (pytensor.grad(f.sum(), hv) - pytensor.grad(f.sum(), mv))
    m_lo, m_hi = _boxes(rng, 300, -38.0, 38.0)
    h_lo = 10.0 ** rng.uniform(-8, 1, 300)
    h_hi = h_lo + rng.uniform(0.0, 0.1, 300)
    (f_lo, f_hi), (wa_lo, wa_hi), (wb_lo, wb_hi) = evaluate_intervals(
        [f, w_a, w_b], {mv: (m_lo, m_hi), hv: (h_lo, h_hi)})

    def mp(v):
        return mpmath.mpf(float(v))

    with mpmath.workdps(30):
        for i in range(300):
            assert mp(l_lo[i]) <= _mp_log_phi(lo[i]) and _mp_log_phi(hi[i]) <= mp(l_hi[i])
            m_at = [mpmath.npdf(mp(v)) / mpmath.exp(_mp_log_phi(v)) for v in (hi[i], lo[i])]
            assert mp(r_lo[i]) <= m_at[0] and m_at[1] <= mp(r_hi[i])
            far = m_lo[i] if abs(m_lo[i]) >= abs(m_hi[i]) else m_hi[i]
            near = 0.0 if m_lo[i] <= 0 <= m_hi[i] else min(abs(m_lo[i]), abs(m_hi[i]))
            assert mp(f_lo[i]) <= mpmath.log(_mp_diff_mh(far, h_lo[i]))
            assert mpmath.log(_mp_diff_mh(near, h_hi[i])) <= mp(f_hi[i])
            # W_a: low end at (m_hi, h_hi), high end at (m_lo, h_lo); W_b at (m_lo, h_hi) and
            # (m_hi, h_lo)
            for (e_lo, e_hi), side, (m_low, m_high) in (
                    ((wa_lo, wa_hi), 1, (m_hi[i], m_lo[i])),
                    ((wb_lo, wb_hi), -1, (m_lo[i], m_hi[i]))):
                low = mpmath.npdf(mp(m_low) + side * mp(h_hi[i])) / _mp_diff_mh(m_low, h_hi[i])
                high = (mpmath.npdf(mp(m_high) + side * mp(h_lo[i]))
                        / _mp_diff_mh(m_high, h_lo[i]))
                assert mp(e_lo[i]) <= low and high <= mp(e_hi[i])


def test_c_code_impl_and_grad_agree_with_the_closed_forms():
    """Values and derivatives (``log Φ`` in ``x``, the difference in ``m`` and ``h``) against
    30-digit mpmath, in C and in the Python ``impl``."""
    rng = np.random.default_rng([RNG_SEED, 5])
    x = pt.vector("x", dtype="float64")
    mv, hv = pt.vector("m", dtype="float64"), pt.vector("h", dtype="float64")
    lp = log_normal_cdf(x)
    m = pytensor.grad(lp.sum(), x)
    dm = pytensor.grad(m.sum(), x)
    f = Elemwise(LogNormalCDFDiff())(mv, hv)
    f_m, f_h = pytensor.grad(f.sum(), mv), pytensor.grad(f.sum(), hv)
    hess = [pytensor.grad(f_m.sum(), mv), pytensor.grad(f_m.sum(), hv),
            pytensor.grad(f_h.sum(), hv)]
    outputs = [lp, m, dm, f, f_m, f_h, *hess]
    xv = np.concatenate([rng.uniform(-30, 30, 60), [-1.0, -1.0 - 1e-12, 1.0, 0.0, 37.0]])
    m_v = rng.uniform(-8, 8, xv.size)
    h_v = 10.0 ** rng.uniform(-3, 1, xv.size)
    c_fn = pytensor.function([x, mv, hv], outputs, mode="FAST_RUN")
    py_fn = pytensor.function([x, mv, hv], outputs,
                              mode=pytensor.compile.mode.Mode(linker="py"))
    expected = [[] for _ in outputs]
    scale = []  # the size of the terms each derivative sums (cancelling ones among them)
    with mpmath.workdps(30):
        for xi, mi, hi in zip(xv, m_v, h_v, strict=True):
            xm, am, bm = mpmath.mpf(float(xi)), mpmath.mpf(float(mi + hi)), \
                mpmath.mpf(float(mi - hi))
            mills = mpmath.npdf(xm) / mpmath.exp(_mp_log_phi(xi))
            d = _mp_diff_mh(mi, hi)
            wa, wb = mpmath.npdf(am) / d, mpmath.npdf(bm) / d
            mean = wb - wa  # of a standard Normal truncated to (b, a)
            # ∂_m W_a = −W_a(a − μ), ∂_h W_a = −W_a(a + W_a + W_b), ∂_m W_b = W_b(μ − b),
            # ∂_h W_b = −W_b(W_a + W_b − b)
            d_m = (-wa * (am - mean), wb * (mean - bm))
            d_h = (-wa * (am + wa + wb), -wb * (wa + wb - bm))
            scale.append(float((1 + wa + wb + abs(am) + abs(bm)) ** 2))
            for k, v in enumerate([_mp_log_phi(xi), mills, -mills * (xm + mills),
                                   mpmath.log1p(-(1 - d)) if d > 0.5 else mpmath.log(d),
                                   wa - wb, wa + wb, d_m[0] - d_m[1], d_h[0] - d_h[1],
                                   d_h[0] + d_h[1]]):
                expected[k].append(float(v))
    for fn in (c_fn, py_fn):
        for got, want in zip(fn(xv, m_v, h_v), expected, strict=True):
            # a sum of terms of both signs: to a few ulps of the largest term
            assert np.all(np.abs(got - np.array(want))
                          <= 1e-8 * np.abs(want) + 1e-13 * np.array(scale))


@pytest.mark.parametrize("a, b", [(40.0, 39.0), (-39.0, -40.0), (1e-9, -1e-9), (3.0, -39.0)])
def test_log_diff_is_accurate_in_the_tails(a, b):
    a_v, b_v = pt.dscalar("a"), pt.dscalar("b")
    fn = pytensor.function([a_v, b_v], log_normal_cdf_diff(a_v, b_v), mode="FAST_RUN")
    with mpmath.workdps(40):
        want = _mp_log_diff(a, b)
    assert float(fn(a, b)) == pytest.approx(float(want), rel=1e-10)
