r"""The negative binomial's dispersion ops: scalar ops whose interval rules are tight where the
natural enclosure of the formula PyMC writes is loose (``docs/methods/mhss.md``, "Automatic
bounds"; the same construction as :mod:`pymc_subsample.bounds.special_ops`). They carry their
rules themselves (:class:`~pymc_subsample.bounds.interval_rules.OwnRule`: a rule that depends
on the op's derivative order), and their ``grad`` is the same op one order higher.

- :class:`NegativeBinomialZeroRate` of ``(η, λ)`` and its partial derivatives (the op's
  ``(a, b)``): :math:`T = e^\lambda\,\mathrm{softplus}(\eta - \lambda)`, minus the
  log-probability of 0 of a negative binomial with mean :math:`e^\eta` and dispersion
  :math:`\alpha = e^\lambda`. As a product of :math:`e^\lambda` and a function of
  :math:`t = \eta - \lambda` (which move in opposite directions with λ) its natural
  enclosure is loose (``[0.13, 6.5]`` for a range of ``[0.8, 1.1]`` on a box of λ of
  half-width 0.92), and its λ-derivatives, differentiated as written, are differences
  :math:`\alpha(\mathrm{softplus}(t) - \sigma(t))` whose enclosures cancel. Here
  :math:`\partial_\eta^a\partial_\lambda^b T = e^\lambda D_{a,b}(t)` with
  :math:`D_{a,b} = (1 - d/dt)^b\,\mathrm{softplus}^{(a)}`, one function of ``t``:
  :math:`D_{a,b}(t) = [a = 0]\,\mathrm{softplus}(t) + q_{a,b}(\sigma(t))`, ``q`` a
  polynomial (:math:`\mathrm{softplus}^{(k)} = p_{k-1}(\sigma)` below). Its range on
  ``[t_lo, t_hi]`` is that of :math:`h(s) = [a = 0](-\log(1 - s)) + q_{a,b}(s)` on
  :math:`[\sigma(t_{lo}), \sigma(t_{hi})]`: ``h`` at the ends and at its turning points,
  the roots in ``(0, 1)`` of the polynomial :math:`q'` (or :math:`1 + (1 - s)q'(s)` when
  ``a = 0``). The op's enclosure is the product of that range and :math:`e^\lambda`'s
  (each factor exact; only their coupling through λ is lost). ``T`` itself (``a = b = 0``)
  increases in both inputs.
- :class:`LogRisingFactorial` of ``(λ, y)`` and its derivatives in λ (the op's ``order``
  ``m``): :math:`B(\lambda; y) = \log\Gamma(y + e^\lambda) - \log\Gamma(e^\lambda)`, the
  negative binomial's count term in its log-dispersion. Its derivatives, differentiated as
  written, are differences of polygamma functions, :math:`\alpha(\psi(y + \alpha) -
  \psi(\alpha))` and so on, whose enclosures cancel badly on a wide box of λ (third
  derivatives of ``±3000`` for a value of 0.02 on a box of half-width 0.92). For an integer
  :math:`y \ge 0`, :math:`B = \sum_{j<y}\log(e^\lambda + j)` (Γ's recurrence), so
  :math:`B^{(1)} = 1 + \sum_{1 \le j < y}\sigma(\lambda - \log j)` and
  :math:`B^{(m)} = \sum_{1 \le j < y}\sigma^{(m-1)}(\lambda - \log j)` for
  :math:`m \ge 2`, where :math:`\sigma^{(k)}` is a polynomial :math:`p_k` in
  :math:`s = \sigma(x)` (:math:`p_0(s) = s`, :math:`p_{k+1} = p_k'(s)\,s(1 - s)`). Each
  term's range on the box is the exact range of :math:`p_{m-1}` on
  :math:`[\sigma(\lambda_{lo} - \log j), \sigma(\lambda_{hi} - \log j)]` (its ends and the
  roots of :math:`p_{m-1}'` between them), and the sum of the terms' ranges holds the sum's.
  :math:`B` itself increases in λ (each term does) and takes the box's ends. A row whose ``y``
  is not a whole number has no such sum, and its derivatives' enclosure is the whole line.

- :class:`LogOneMinusExpNeg` of ``T > 0`` and its derivatives (the op's ``order`` ``k``):
  :math:`g(T) = \log(1 - e^{-T})`, a hurdle's :math:`\log P(Y > 0)` with
  :math:`T = -\log P(Y = 0)`. Differentiated as written (``log1mexp``), its derivatives are
  quotients of :math:`e^T` and :math:`e^T - 1` whose enclosures multiply the box's relative
  width many times (``[−44, 2.7]`` for a value near ``−0.1`` on a box of ``T`` in
  ``[2.1, 4.3]``). But :math:`g'(T) = \sum_{n \ge 1} e^{-nT}` is completely monotone:
  :math:`(-1)^{k-1} g^{(k)}(T) = \sum_n n^{k-1} e^{-nT} = q A_{k-1}(q)/(1 - q)^k`,
  :math:`q = e^{-T}`, with the Eulerian polynomial :math:`A_{k-1}` (positive coefficients: no
  cancellation), positive and decreasing in ``T``; ``g`` itself increases. So each order's
  range is its values at the box's ends.

Each rule evaluates its function at the box's ends and turning points in floating point and
widens the result outward by a bound of its rounding error, so the enclosure holds for the
exact real values.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.special as sc
from numpy.polynomial import polynomial as P
from pytensor.gradient import grad_undefined
from pytensor.scalar import basic as ps
from pytensor.tensor.elemwise import Elemwise

from pymc_subsample.bounds.interval_rules import Interval, OwnRule, outward, outward_ulp
from pymc_subsample.bounds.scalar_op_base import PropsScalarOp, horner_code
from pymc_subsample.bounds.special_ops import box_ends

__all__ = ["LogOneMinusExpNeg", "LogRisingFactorial", "NegativeBinomialZeroRate",
           "log_one_minus_exp_neg", "log_rising_factorial", "negative_binomial_zero_rate"]

_EPS = np.finfo(np.float64).eps
_LOG2 = math.log(2.0)


def sigmoid_derivative_coefficients(k: int) -> np.ndarray:
    r"""Coefficients (lowest degree first) of the polynomial :math:`p_k` with
    :math:`\sigma^{(k)}(x) = p_k(\sigma(x))`: :math:`p_0(s) = s`,
    :math:`p_{k+1}(s) = p_k'(s)(s - s^2)`."""
    coef = np.array([0.0, 1.0])
    for _ in range(k):
        coef = P.polymul(P.polyder(coef), [0.0, 1.0, -1.0])
    return coef


def _turning_points(coef: np.ndarray) -> np.ndarray:
    """The real roots of the polynomial's derivative in ``(0, 1)``, widened into tiny
    intervals by the caller's rounding bound (only their values are used, as candidates)."""
    roots = P.polyroots(P.polyder(coef)) if coef.size > 2 else np.array([])
    roots = roots[np.abs(roots.imag) < 1e-9].real
    return roots[(roots > 0.0) & (roots < 1.0)]


def _polynomial_range(coef: np.ndarray, lo: np.ndarray, hi: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
    """The least and largest value of the polynomial on ``[lo, hi] ⊆ [0, 1]`` (its ends and
    the turning points inside), evaluated in floating point."""
    a, b = P.polyval(lo, coef), P.polyval(hi, coef)
    low, high = np.minimum(a, b), np.maximum(a, b)
    for root in _turning_points(coef):
        inside = (lo < root) & (root < hi)
        value = P.polyval(root, coef)
        low = np.where(inside, np.minimum(low, value), low)
        high = np.where(inside, np.maximum(high, value), high)
    return low, high


def _is_count(y: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.isfinite(y) & (y >= 0.0) & (y == np.floor(y))


def _rising_terms(order: int, lam_lo: np.ndarray, lam_hi: np.ndarray, y: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``Σ_{1 ≤ j < y} [range of σ^{(m−1)}(λ − log j)]`` on ``[lam_lo, lam_hi]``, plus 1 for
    ``j = 0`` when ``m = 1`` and ``y ≥ 1``, widened by a bound of the rounding error: each
    ``σ`` is off by at most ``ε(4 + |λ| + log j)`` (its argument's rounding and libm's),
    which moves ``p_{m−1}`` by at most its Lipschitz constant on ``[0, 1]`` times that,
    and the polynomial and the sum add a few ulps of their terms' sizes."""
    coef = sigmoid_derivative_coefficients(order - 1)
    lipschitz = float(np.sum(np.abs(P.polyder(coef)))) if coef.size > 1 else 0.0
    size = float(np.sum(np.abs(coef)))
    count = np.where(_is_count(y), y, 0.0)
    lam_lo, lam_hi, count = np.broadcast_arrays(lam_lo, lam_hi, count)
    lo = np.where((order == 1) & (count >= 1.0), 1.0, 0.0)
    hi = lo.copy()
    err = np.zeros_like(lo)
    # the term j on the rows with y > j only: the rows sorted by y, those a suffix, so the
    # work is the sum of the y's, not the largest y times the rows
    by_count = np.argsort(count, kind="stable")
    sorted_count = count[by_count]
    top = int(sorted_count[-1]) if count.size else 0
    with np.errstate(all="ignore"):
        for j in range(1, top):
            rows = by_count[np.searchsorted(sorted_count, j, side="right"):]
            shift = math.log(j)
            s_lo = 1.0 / (1.0 + np.exp(-(lam_lo[rows] - shift)))
            s_hi = 1.0 / (1.0 + np.exp(-(lam_hi[rows] - shift)))
            a, b = _polynomial_range(coef, s_lo, s_hi)
            lo[rows] += a
            hi[rows] += b
            err[rows] += (lipschitz * 4.0 * _EPS
                          * (4.0 + np.maximum(np.abs(lam_lo[rows]), np.abs(lam_hi[rows]))
                             + shift)
                          + 8.0 * coef.size * _EPS * size)
        err = err + 4.0 * _EPS * count * (np.abs(lo) + np.abs(hi))
    return lo - err, hi + err


def _log_rising_point(lam: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``B(λ; y)`` by ``gammaln`` and a generous bound of its error (the two ``gammaln``'s own
    and the rounding of ``e^λ``, which moves ``B`` by ``B'(λ)·2ε ≤ 2yε``)."""
    with np.errstate(all="ignore"):
        alpha = np.exp(lam)
        g1, g2 = sc.gammaln(y + alpha), sc.gammaln(alpha)
        value = g1 - g2
        err = 16.0 * _EPS * (1.0 + np.abs(g1) + np.abs(g2) + np.abs(y))
    return value, err


def _log_rising_rule(order: int, lam: Interval, y: Interval) -> Interval:
    """:class:`LogRisingFactorial`'s rule (module docstring): ``B`` at the box's ends (it
    increases in λ for ``y ≥ 0``), its derivatives as sums over ``j < y``; the whole line
    where ``y`` is not one whole number ``≥ 0``."""
    (l_lo, y_lo), (l_hi, y_hi) = box_ends([lam, y])
    exact = (y_lo == y_hi) & _is_count(y_lo)
    if order == 0:
        a, err_a = _log_rising_point(l_lo, y_lo)
        b, err_b = _log_rising_point(l_hi, y_lo)
        lo, hi = a - err_a, b + err_b
    else:
        lo, hi = _rising_terms(order, l_lo, l_hi, y_lo)
    with np.errstate(invalid="ignore"):
        out_lo, out_hi = outward_ulp(lo, hi)
    return np.where(exact, out_lo, -np.inf), np.where(exact, out_hi, np.inf)


class LogRisingFactorial(OwnRule, PropsScalarOp):
    r"""The ``order``-th derivative in λ of
    :math:`B(\lambda; y) = \log\Gamma(y + e^\lambda) - \log\Gamma(e^\lambda)`
    (module docstring), inputs ``(λ, y)``; its gradient in λ is the same op of the next
    order (in ``y``, data, it is not defined)."""

    __props__ = ("order",)
    nin = 2
    nout = 1

    def __init__(self, order: int = 0) -> None:
        super().__init__(ps.upgrade_to_float_no_complex,
                         name=f"log_rising_factorial_d{int(order)}")
        self.order = int(order)


    def impl(self, lam, y):
        lam, y = np.float64(lam), np.float64(y)
        if self.order == 0:
            return np.float64(_log_rising_point(lam, y)[0])
        if not _is_count(np.asarray(y)):
            return np.float64(np.nan)
        coef = sigmoid_derivative_coefficients(self.order - 1)
        j = np.arange(1, max(int(y), 1), dtype=np.float64)
        s = 1.0 / (1.0 + np.exp(-(lam - np.log(j))))
        return np.float64((self.order == 1 and y >= 1.0) + np.sum(P.polyval(s, coef)))

    def c_code(self, node, name, inputs, outputs, sub) -> str:
        lam, y = inputs
        (z,) = outputs
        if self.order == 0:
            return f"{z} = lgamma({y} + exp({lam})) - lgamma(exp({lam}));"
        horner = horner_code(sigmoid_derivative_coefficients(self.order - 1), "s")
        return (f"{{\ndouble y = {y};\n"
                f"if (!(y >= 0.0) || y != floor(y) || !isfinite(y)) {{ {z} = NAN; }}\n"
                f"else {{\ndouble total = {1.0 if self.order == 1 else 0.0!r} * (y >= 1.0);\n"
                "for (long j = 1; j < (long) y; ++j) {\n"
                f"double s = 1.0 / (1.0 + exp(-({lam} - log((double) j))));\n"
                f"total += {horner};\n}}\n{z} = total;\n}}\n}}")

    def interval_rule(self, lam: Interval, y: Interval) -> Interval:
        return _log_rising_rule(self.order, lam, y)

    def grad(self, inputs, output_gradients):
        lam, y = inputs
        (gz,) = output_gradients
        return [gz * LogRisingFactorial(self.order + 1)(lam, y),
                grad_undefined(self, 1, y, "the count y is data")]


def log_rising_factorial(lam, y):
    """``log Γ(y + e^λ) − log Γ(e^λ)`` of tensors (elementwise) as one
    :class:`LogRisingFactorial`."""
    return Elemwise(LogRisingFactorial(0))(lam, y)


def eulerian_coefficients(n: int) -> np.ndarray:
    r"""The Eulerian polynomial :math:`A_n` (lowest degree first): :math:`\sum_{m \ge 1}
    m^n q^m = q A_n(q)/(1 - q)^{n+1}`; :math:`A_0 = 1`,
    :math:`A_{n+1}(q) = (1 + nq) A_n(q) + q(1 - q) A_n'(q)`."""
    coef = np.array([1.0])
    for k in range(n):
        coef = P.polyadd(P.polymul([1.0, float(k)], coef),
                         P.polymul([0.0, 1.0, -1.0], P.polyder(coef) if coef.size > 1
                                   else [0.0]))
    return coef


def _log1mexp_neg_point(order: int, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``g^{(k)}(T)`` and a bound on its rounding error: ``q = e^{−T}`` and ``1 − q =
    −expm1(−T)`` are within a few ulps relative, the polynomial of positive coefficients
    within ``2·deg`` ulps, the quotient and the power add ``k + 2``: ``(4k + 16)ε``
    relative, plus ``T``'s own rounding moves ``g^{(k)}`` by ``|g^{(k+1)}|·ε|T|``, within
    ``(k + 1)ε|T|`` relative of ``g^{(k)}`` where ``T`` is small and far less elsewhere
    (``|g^{(k+1)}/g^{(k)}| ≤ k/T + 1``): ``(k + 1)ε(T + 1)`` more is generous."""
    with np.errstate(all="ignore"):
        if order == 0:
            # PyTensor's log1mexp's two formulas, each accurate on its side of log 2
            value = np.where(t < _LOG2, np.log(-np.expm1(-t)), np.log1p(-np.exp(-t)))
            # log moves by its argument's relative error: absolute here
            err = 16.0 * _EPS * (1.0 + np.abs(value) + np.abs(t) / np.maximum(
                -np.expm1(-t), _EPS))
            return value, err
        q = np.exp(-t)
        value = (-1.0) ** (order - 1) * q * P.polyval(q, eulerian_coefficients(order - 1)) \
            / (-np.expm1(-t)) ** order
        err = np.abs(value) * _EPS * ((4.0 * order + 16.0) + (order + 1.0) * (np.abs(t) + 1.0))
    return value, err


class LogOneMinusExpNeg(OwnRule, PropsScalarOp):
    r"""The ``order``-th derivative of :math:`g(T) = \log(1 - e^{-T})` (module docstring);
    its gradient is the same op of the next order."""

    __props__ = ("order",)
    nin = 1
    nout = 1

    def __init__(self, order: int = 0) -> None:
        super().__init__(ps.upgrade_to_float_no_complex,
                         name=f"log_one_minus_exp_neg_d{int(order)}")
        self.order = int(order)


    def impl(self, t):
        return np.float64(_log1mexp_neg_point(self.order, np.float64(t))[0])

    def c_code(self, node, name, inputs, outputs, sub) -> str:
        (t,) = inputs
        (z,) = outputs
        if self.order == 0:
            return f"{z} = {t} < {_LOG2!r} ? log(-expm1(-{t})) : log1p(-exp(-{t}));"
        horner = horner_code(eulerian_coefficients(self.order - 1), "q")
        sign = 1.0 if self.order % 2 else -1.0
        return (f"{{\ndouble q = exp(-{t});\n"
                f"{z} = {sign!r} * q * ({horner}) / pow(-expm1(-{t}), {self.order});\n}}")

    def interval_rule(self, t: Interval) -> Interval:
        """``g`` increases; ``(−1)^{k−1} g^{(k)}`` is positive and decreases: the values at
        the ends, widened by the rounding error; the whole line where the box reaches
        ``T ≤ 0`` (a pole)."""
        (lo,), (hi,) = box_ends([t])
        a, err_a = _log1mexp_neg_point(self.order, lo)
        b, err_b = _log1mexp_neg_point(self.order, hi)
        if self.order == 0 or self.order % 2 == 0:  # increasing: g, and g^{(k)} ≤ 0 for even k
            low, high = a - err_a, b + err_b
        else:
            low, high = b - err_b, a + err_a
        with np.errstate(invalid="ignore"):
            out_lo, out_hi = outward_ulp(low, high)
        bad = ~(lo > 0.0)
        return np.where(bad, -np.inf, out_lo), np.where(bad, np.inf, out_hi)

    def grad(self, inputs, output_gradients):
        (t,) = inputs
        (gz,) = output_gradients
        return [gz * LogOneMinusExpNeg(self.order + 1)(t)]


def zero_rate_polynomial(a: int, b: int) -> np.ndarray:
    r"""The polynomial :math:`q_{a,b}` (lowest degree first) with
    :math:`D_{a,b}(t) = [a = 0]\,\mathrm{softplus}(t) + q_{a,b}(\sigma(t))` (module
    docstring): :math:`\sum_{c \le b,\ a + c \ge 1} \binom{b}{c}(-1)^c p_{a+c-1}`."""
    coef = np.zeros(1)
    for c in range(b + 1):
        if a + c >= 1:
            coef = P.polyadd(coef, math.comb(b, c) * (-1.0) ** c
                             * sigmoid_derivative_coefficients(a + c - 1))
    return coef


def _zero_rate_h(a: int, coef: np.ndarray, s: np.ndarray, t: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``h(s)`` (``softplus`` from ``t`` where given, else ``−log(1 − s)``) and a bound of
    its absolute rounding error: the polynomial within ``2(deg + 1)`` ulps of the sum of its
    terms' sizes, the softplus within a few ulps of itself."""
    with np.errstate(all="ignore"):
        value = P.polyval(s, coef)
        err = 4.0 * (coef.size + 1) * _EPS * P.polyval(np.abs(s), np.abs(coef))
        if a == 0:
            soft = np.logaddexp(0.0, t) if t is not None else -np.log1p(-s)
            value = value + soft
            err = err + 8.0 * _EPS * np.abs(soft)
    return value, err + 4.0 * _EPS * np.abs(value)


def _zero_rate_turning(a: int, coef: np.ndarray) -> np.ndarray:
    """The turning points of ``h`` in ``(0, 1)``: roots of ``q'`` (``a ≥ 1``) or of
    ``1 + (1 − s) q'(s)`` (``a = 0``: ``h' = 1/(1 − s) + q'``)."""
    deriv = P.polyder(coef) if coef.size > 1 else np.zeros(1)
    poly = P.polyadd([1.0], P.polymul([1.0, -1.0], deriv)) if a == 0 else deriv
    poly = P.polytrim(poly)
    if poly.size < 2:
        return np.array([])
    roots = P.polyroots(poly)
    roots = roots[np.abs(roots.imag) < 1e-9].real
    return roots[(roots > 0.0) & (roots < 1.0)]


def _zero_rate_rule(a: int, b: int, eta: Interval, lam: Interval) -> Interval:
    """:class:`NegativeBinomialZeroRate`'s rule (module docstring): the range of ``h`` on the
    box's ``s = σ(t)`` interval times that of ``e^λ``, each widened by its rounding error."""
    (e_lo, l_lo), (e_hi, l_hi) = box_ends([eta, lam])
    coef = zero_rate_polynomial(a, b)
    with np.errstate(all="ignore"):
        # t = η − λ on the box, its ends rounded outward; σ's few ulps outward too
        t_lo, _ = outward_ulp(e_lo - l_hi, e_lo - l_hi)
        _, t_hi = outward_ulp(e_hi - l_lo, e_hi - l_lo)
        s_lo = np.clip((1.0 / (1.0 + np.exp(-t_lo))) * (1.0 - 8.0 * _EPS), 0.0, 1.0)
        s_hi = np.clip((1.0 / (1.0 + np.exp(-t_hi))) * (1.0 + 8.0 * _EPS), 0.0, 1.0)
        h_lo, err_lo = _zero_rate_h(a, coef, s_lo)
        h_hi, err_hi = _zero_rate_h(a, coef, s_hi)
        low, high = np.minimum(h_lo - err_lo, h_hi - err_hi), np.maximum(h_lo + err_lo,
                                                                         h_hi + err_hi)
        for root in _zero_rate_turning(a, coef):
            inside = (s_lo < root) & (root < s_hi)
            value, err = _zero_rate_h(a, coef, np.float64(root))
            low = np.where(inside, np.minimum(low, value - err), low)
            high = np.where(inside, np.maximum(high, value + err), high)
        # an end of s at 1 (t = +inf) is −log 0 = +inf for a = 0: the whole line above
        low, high = outward_ulp(low, high)
        x_lo, x_hi = outward(np.exp(l_lo), np.exp(l_hi), 8.0 * _EPS)
        x_lo = np.maximum(x_lo, 0.0)
        products = [low * x_lo, low * x_hi, high * x_lo, high * x_hi]
        out_lo = np.minimum.reduce(products)
        out_hi = np.maximum.reduce(products)
    return outward_ulp(out_lo, out_hi)


class NegativeBinomialZeroRate(OwnRule, PropsScalarOp):
    r""":math:`\partial_\eta^a\partial_\lambda^b T(\eta, \lambda)`,
    :math:`T = e^\lambda\,\mathrm{softplus}(\eta - \lambda)` (module docstring), inputs
    ``(η, λ)``; its gradient is the same op of orders ``(a + 1, b)`` and ``(a, b + 1)``."""

    __props__ = ("a", "b")
    nin = 2
    nout = 1

    def __init__(self, a: int = 0, b: int = 0) -> None:
        super().__init__(ps.upgrade_to_float_no_complex,
                         name=f"negative_binomial_zero_rate_d{int(a)}{int(b)}")
        self.a, self.b = int(a), int(b)


    def impl(self, eta, lam):
        t = np.float64(eta) - np.float64(lam)
        with np.errstate(all="ignore"):
            s = 1.0 / (1.0 + np.exp(-t))
            h = _zero_rate_h(self.a, zero_rate_polynomial(self.a, self.b), s, t)[0]
            return np.float64(np.exp(np.float64(lam)) * h)

    def c_code(self, node, name, inputs, outputs, sub) -> str:
        eta, lam = inputs
        (z,) = outputs
        horner = horner_code(zero_rate_polynomial(self.a, self.b), "s")
        soft = ("(t > 0.0 ? t + log1p(exp(-t)) : log1p(exp(t)))" if self.a == 0 else "0.0")
        return (f"{{\ndouble t = {eta} - {lam};\n"
                "double s = 1.0 / (1.0 + exp(-t));\n"
                f"{z} = exp({lam}) * ({soft} + ({horner}));\n}}")

    def interval_rule(self, eta: Interval, lam: Interval) -> Interval:
        return _zero_rate_rule(self.a, self.b, eta, lam)

    def grad(self, inputs, output_gradients):
        eta, lam = inputs
        (gz,) = output_gradients
        return [gz * NegativeBinomialZeroRate(self.a + 1, self.b)(eta, lam),
                gz * NegativeBinomialZeroRate(self.a, self.b + 1)(eta, lam)]


def negative_binomial_zero_rate(eta, lam):
    """``e^λ softplus(η − λ)`` of tensors (elementwise) as one
    :class:`NegativeBinomialZeroRate`."""
    return Elemwise(NegativeBinomialZeroRate(0, 0))(eta, lam)


def log_one_minus_exp_neg(t):
    """``log(1 − e^{−T})`` of a tensor (elementwise) as one :class:`LogOneMinusExpNeg`."""
    return Elemwise(LogOneMinusExpNeg(0))(t)


#: the interval rules of the ops here, by op type
