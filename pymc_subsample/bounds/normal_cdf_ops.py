r"""The Normal log-CDF and its derivatives as scalar ops with tight interval rules
(``docs/methods/mhss.md``, "Automatic bounds").

PyMC computes :math:`\log\Phi(z)` (``normal_lcdf``), :math:`\log(1 - \Phi(z))`
(``normal_lccdf``) and :math:`\log(\Phi(a) - \Phi(b))` (``log_diff_normal_cdf``) as switches
between formulas of ``erfcx``, ``erfc`` and ``erf`` chosen for their accuracy. Their
derivatives, differentiated formula by formula, are quotients in which the same exponentials
appear several times, and their natural interval enclosures are loose (an ordinal probit's
were infinite on most rows' boxes). The ops here stand for each function *as one op*, so its
enclosure is its exact range on the box (up to a bound of the rounding error), and their
``grad`` returns ops of this module again, so ``pytensor.grad`` composes to every order:

- :class:`LogNormalCDF`, :math:`L(x) = \log\Phi(x)` (SciPy's ``log_ndtr``), increasing; its
  derivative is :class:`MillsRatio`;
- :class:`MillsRatio`, :math:`m(x) = \varphi(x)/\Phi(x)`, decreasing: its derivative is
  :math:`m'(x) = -m(x)(x + m(x))`, negative since :math:`m(x) > -x` for every real ``x``
  (for :math:`x < 0` that is the Mills-ratio inequality :math:`\Phi(x) < \varphi(x)/|x|`);
- :class:`LogNormalCDFDiff`, :math:`F(m, h) = \log(\Phi(m + h) - \Phi(m - h))` on
  :math:`h > 0`, the log-probability of the interval ``(b, a) = (m − h, m + h)``, taken in its
  midpoint and half-width rather than its ends: an ordinal probit's ends ``c_k − η`` and
  ``c_{k−1} − η`` share ``η``, and their interval enclosures, independent, reach ``a ≤ b`` on
  any box of ``η`` wider than the gap, where ``h = (c_k − c_{k−1})/2`` is free of ``η``. ``F``
  increases in ``h`` and decreases in ``|m|`` (``∂_m F = (φ(a) − φ(b))/D``, negative iff
  ``|a| > |b|``, iff ``m > 0``). Its gradient is
  :math:`(W_a - W_b, W_a + W_b)` with the two :class:`NormalCDFDiffWeight` ops
  :math:`W_a = \varphi(a)/D`, :math:`W_b = \varphi(b)/D`, :math:`D = \Phi(a) - \Phi(b)`;
- the weights: :math:`\partial_m W_a = -W_a(a - \mu)`, :math:`\partial_h W_a =
  -W_a(a + W_a + W_b)`, :math:`\partial_m W_b = W_b(\mu - b)`, :math:`\partial_h W_b =
  -W_b(W_a + W_b - b)`, where :math:`\mu = W_b - W_a = E[X \mid b < X < a]` for a standard
  Normal ``X``, so ``b < μ < a``; and :math:`aD + \varphi(a) + \varphi(b) =
  \int_b^a (a - x)\varphi(x)\,dx + 2\varphi(b) > 0`, likewise
  :math:`\varphi(a) + \varphi(b) - bD > 0`. So :math:`W_a` decreases in ``m`` and ``h``,
  :math:`W_b` increases in ``m`` and decreases in ``h``, and every rule takes the function at
  two corners of the box (``F`` at the ``m`` nearest 0 for its top).

The higher derivatives are polynomials in these ops and the arguments, each piece enclosed on
its exact range; on tall data's narrow boxes that is close to the derivatives' own range.

Rounding: each rule evaluates the function at the box's corners in floating point and widens
the result by a generous bound of the evaluation's error. The dominant term is the rounding of
the argument inside (``x/√2``, relative ``ε``), which moves :math:`\log\Phi` by
:math:`m(x)\,|x|\,\varepsilon`, up to about :math:`x^2\varepsilon` relative to its value in the
upper tail; the bounds below are :math:`64\varepsilon(1 + x^2)` relative, checked against
30-digit mpmath values in ``tests/test_normal_cdf_ops.py``. :data:`NORMAL_CDF_RULES` are
registered in :data:`~pymc_subsample.bounds.interval_rules.RULES` on import of this module.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.special as sc
from pytensor.scalar import basic as ps
from pytensor.scalar import math as psm
from pytensor.tensor.elemwise import Elemwise

from pymc_subsample.bounds.interval_rules import RULES, Interval, outward, outward_ulp

__all__ = ["NORMAL_CDF_RULES", "LogNormalCDF", "LogNormalCDFDiff", "MillsRatio",
           "NormalCDFDiffWeight", "NormalCDFDiffWeightA", "NormalCDFDiffWeightB",
           "log_normal_cdf", "log_normal_cdf_diff"]

_EPS = np.finfo(np.float64).eps
#: relative error bound of a log-CDF or Mills ratio value, per unit of ``1 + x²`` (module
#: docstring): measured within ``5ε(1 + x²)`` on ``|x| ≤ 40``
_REL_PER_X2 = 64.0 * _EPS
#: absolute slack for values in the subnormal range (below 2.2e-308), where the relative
#: accuracy of a float is lost: log Φ(x) for x > 37.5, m(x) for x > 37.5
_TINY = 1e-300
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


# ------------------------------------------------------------------ point values (NumPy)
def _log_phi(x: np.ndarray) -> np.ndarray:
    """:math:`\\log\\Phi(x)` (SciPy's ``log_ndtr``)."""
    return sc.log_ndtr(x)


def _log_phi_err(x: np.ndarray, value: np.ndarray) -> np.ndarray:
    """A bound on the error of :func:`_log_phi` (0 where the value is ``−∞``, exact)."""
    with np.errstate(all="ignore"):
        err = _REL_PER_X2 * (1.0 + x * x) * np.abs(value) + _TINY
    return np.where(np.isfinite(err), err, 0.0)


def _mills(x: np.ndarray) -> np.ndarray:
    """:math:`m(x) = \\varphi(x)/\\Phi(x) = \\sqrt{2/\\pi}/\\mathrm{erfcx}(-x/\\sqrt2)`, with no
    cancellation (``erfcx(u) = e^{u²} erfc(u)``); 0 where ``erfcx`` overflows (``x > 37``)."""
    with np.errstate(all="ignore"):
        return _SQRT_2_OVER_PI / sc.erfcx(-x / math.sqrt(2.0))


def _log_diff(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r""":math:`\log(\Phi(a) - \Phi(b))` and a bound on its error; ``a ≤ b`` is undefined
    (NaN). Where ``b < 0 < a`` it is :math:`\mathrm{log1p}(-s)` with the tails' mass
    :math:`s = \Phi(-a) + \Phi(b)` while ``s < ½``, else :math:`\log((\mathrm{erf}(a/\sqrt2)
    - \mathrm{erf}(b/\sqrt2))/2)`, a sum of two positive terms (no cancellation; each ``erf``
    changes by at most its own relative rounding under the argument's, as ``x·erf′(x) ≤
    erf(x)`` on ``x ≥ 0``). Elsewhere, with ``(u, v) = (a, b)``, or ``(−b, −a)`` where
    ``b ≥ 0`` (the upper tail, where :math:`\Phi(a)` and :math:`\Phi(b)` are both near 1),
    it is :math:`L(u) + \mathrm{log1mexp}(L(v) - L(u))`."""
    upper = b >= 0.0
    middle = (b < 0.0) & (a > 0.0)
    u = np.where(upper, -b, a)
    v = np.where(upper, -a, b)
    with np.errstate(all="ignore"):
        lu, lv = _log_phi(u), _log_phi(v)
        d = lv - lu
        tails = lu + _log1mexp(d)
        err_u, err_v = _log_phi_err(u, lu), _log_phi_err(v, lv)
        # the error of d (0 where L(v) = −∞: then d = −∞ and log1mexp(d) = 0 exactly)
        dd = np.where(np.isfinite(d), err_u + err_v + _EPS * np.abs(d), 0.0)
        # |log1mexp'(t)| = 1/expm1(−t), increasing in t < 0: taken at d + dd
        top = d + dd
        slope = np.where(top < 0.0, 1.0 / np.expm1(-top), np.inf)
        slope = np.where(np.isneginf(d), 0.0, slope)
        err_tails = err_u + dd * slope + 8.0 * _EPS * np.abs(tails)
        # the two tails' mass s = Φ(−a) + Φ(b): log1p(−s) while s < ½, accurate where
        # F ≈ −s is tiny; else log D with D ≤ ½ a sum of two positive erf terms
        tail = 0.5 * (sc.erfc(a / math.sqrt(2.0)) + sc.erfc(-b / math.sqrt(2.0)))
        small = tail < 0.5
        between = np.where(small, np.log1p(-tail), np.log(
            sc.erf(a / math.sqrt(2.0)) - sc.erf(b / math.sqrt(2.0))) - math.log(2.0))
        err_between = np.where(small, _REL_PER_X2 * (1.0 + a * a + b * b) * np.abs(between),
                               32.0 * _EPS + 8.0 * _EPS * np.abs(between)) + _TINY
    value = np.where(middle, between, tails)
    err = np.where(middle, err_between, err_tails)
    value = np.where(a > b, value, np.nan)
    return value, np.where(np.isnan(err), np.inf, err)


def _ends_of(m: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(a, b) = (m + h, m − h)`` and a bound on their rounding (half an ulp each)."""
    a, b = m + h, m - h
    return a, b, _EPS * (np.abs(a) + np.abs(b))


def _log_diff_mh(m: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:math:`F(m, h)` and a bound on its error: :func:`_log_diff` at the rounded ends, whose
    rounding moves ``F`` by at most ``|∂_a F| + |∂_b F| = W_a + W_b`` times it."""
    a, b, shift = _ends_of(m, h)
    value, err = _log_diff(a, b)
    with np.errstate(all="ignore"):
        w_sum = (np.exp(-0.5 * a * a) + np.exp(-0.5 * b * b)) / math.sqrt(2.0 * math.pi) \
            * np.exp(-value)
        err = err + 2.0 * w_sum * shift
    value = np.where(h > 0.0, value, np.nan)
    return value, np.where(np.isnan(err) | ~(h > 0.0), np.inf, err)


def _log1mexp(t: np.ndarray) -> np.ndarray:
    """``log(1 − e^t)`` for ``t ≤ 0`` (Mächler's two branches)."""
    with np.errstate(all="ignore"):
        return np.where(t < -math.log(2.0), np.log1p(-np.exp(t)), np.log(-np.expm1(t)))


def _diff_weight(side: int, m: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r""":math:`W = \varphi(x)/(\Phi(a) - \Phi(b))` with ``x = a = m + h`` (``side`` 0) or
    ``x = b = m − h`` (1), as ``exp(log φ(x) − F(m, h))``, and a bound on its error."""
    a, b, shift = _ends_of(m, h)
    x = a if side == 0 else b
    f, err_f = _log_diff_mh(m, h)
    with np.errstate(all="ignore"):
        exponent = -0.5 * x * x - _LOG_SQRT_2PI - f
        value = np.exp(exponent)
        # log φ(x) moves by |x| times the rounding of x
        delta = err_f + 4.0 * _EPS * (1.0 + x * x + np.abs(f)) + 2.0 * np.abs(x) * shift
        err = value * np.expm1(delta) + 4.0 * _EPS * value + _TINY
        # φ(±∞) = 0 exactly
        value = np.where(np.isinf(x) & (h > 0.0), 0.0, value)
        err = np.where(np.isinf(x) & (h > 0.0), 0.0, err)
    return value, np.where(np.isnan(err), np.inf, err)


# ------------------------------------------------------------------ C code
def _c_log_phi(x: str, out: str) -> str:
    """C statements setting ``out`` to log Φ(``x``) (PyMC's ``normal_lcdf`` formulas)."""
    return (f"{out} = ({x} < -1.0) ? log(Faddeeva::erfcx(-({x}) * M_SQRT1_2) / 2.0) "
            f"- 0.5 * ({x}) * ({x}) : log1p(-erfc(({x}) * M_SQRT1_2) / 2.0);")


def _c_log_diff(a: str, b: str, out: str) -> str:
    """C statements setting ``out`` to log(Φ(a) − Φ(b)) (:func:`_log_diff`)."""
    return "\n".join([
        f"int upper_ = ({b}) >= 0.0;",
        f"double u_ = upper_ ? -({b}) : ({a});",
        f"double v_ = upper_ ? -({a}) : ({b});",
        "double lu_, lv_;",
        _c_log_phi("u_", "lu_"),
        _c_log_phi("v_", "lv_"),
        "double d_ = lv_ - lu_;",
        "double l1m_ = (d_ < -M_LN2) ? log1p(-exp(d_)) : log(-expm1(d_));",
        f"double tail_ = 0.5 * (erfc(({a}) * M_SQRT1_2) + erfc(-({b}) * M_SQRT1_2));",
        f"double between_ = (tail_ < 0.5) ? log1p(-tail_) : "
        f"log(erf(({a}) * M_SQRT1_2) - erf(({b}) * M_SQRT1_2)) - M_LN2;",
        f"{out} = (({a}) > ({b})) ? ((({b}) < 0.0 && ({a}) > 0.0) ? between_ : lu_ + l1m_) "
        ": NAN;",
    ])


class _ErfcxCode:
    """The C support of the ops here: PyTensor's own ``erfcx`` (the Faddeeva package), the
    same text as :class:`pytensor.scalar.math.Erfcx`'s, so a fused loop holding both includes
    it once."""

    def c_header_dirs(self, **kwargs):
        return psm.erfcx.c_header_dirs(**kwargs)

    def c_support_code(self, **kwargs):
        return psm.erfcx.c_support_code(**kwargs)

    def c_code_cache_version(self) -> tuple[int, ...]:
        return (4,)


# ------------------------------------------------------------------ the ops
class LogNormalCDF(_ErfcxCode, ps.UnaryScalarOp):
    r""":math:`\log\Phi(x)`; its derivative is :class:`MillsRatio`."""

    nfunc_spec = ("scipy.special.log_ndtr", 1, 1)

    def __init__(self) -> None:
        super().__init__(ps.upgrade_to_float_no_complex, name="log_normal_cdf")

    def impl(self, x):
        return np.float64(_log_phi(np.float64(x)))

    def c_code(self, node, name, inputs, outputs, sub) -> str:
        (x,) = inputs
        (z,) = outputs
        return "{\n" + _c_log_phi(x, z) + "\n}"

    def grad(self, inputs, output_gradients):
        (x,) = inputs
        (gz,) = output_gradients
        return [gz * mills_ratio(x)]


class MillsRatio(_ErfcxCode, ps.UnaryScalarOp):
    r""":math:`m(x) = \varphi(x)/\Phi(x)`, the derivative of :math:`\log\Phi`; its derivative
    is :math:`-m(x)(x + m(x))`."""

    def __init__(self) -> None:
        super().__init__(ps.upgrade_to_float_no_complex, name="mills_ratio")

    def impl(self, x):
        return np.float64(_mills(np.float64(x)))

    def c_code(self, node, name, inputs, outputs, sub) -> str:
        (x,) = inputs
        (z,) = outputs
        return f"{z} = {_SQRT_2_OVER_PI!r} / Faddeeva::erfcx(-({x}) * M_SQRT1_2);"

    def grad(self, inputs, output_gradients):
        (x,) = inputs
        (gz,) = output_gradients
        m = mills_ratio(x)
        return [-(gz * m * (x + m))]


class LogNormalCDFDiff(_ErfcxCode, ps.BinaryScalarOp):
    r""":math:`\log(\Phi(m + h) - \Phi(m - h))` on :math:`h > 0` (NaN elsewhere); its
    gradient is :math:`(W_a - W_b, W_a + W_b)` (:class:`NormalCDFDiffWeight`)."""

    def __init__(self) -> None:
        super().__init__(ps.upgrade_to_float_no_complex, name="log_normal_cdf_diff")

    def impl(self, m, h):
        return np.float64(_log_diff_mh(np.float64(m), np.float64(h))[0])

    def c_code(self, node, name, inputs, outputs, sub) -> str:
        m, h = inputs
        (z,) = outputs
        return ("{\n" + f"double a_ = ({m}) + ({h}), b_ = ({m}) - ({h});\n"
                + _c_log_diff("a_", "b_", z) + "\n}")

    def grad(self, inputs, output_gradients):
        m, h = inputs
        (gz,) = output_gradients
        w_a, w_b = _weight(0, m, h), _weight(1, m, h)
        return [gz * (w_a - w_b), gz * (w_a + w_b)]


class NormalCDFDiffWeight(_ErfcxCode, ps.BinaryScalarOp):
    r""":math:`\varphi(x)/(\Phi(a) - \Phi(b))` with ``x = a`` (:class:`NormalCDFDiffWeightA`)
    or ``x = b`` (:class:`NormalCDFDiffWeightB`): the derivatives of
    :class:`LogNormalCDFDiff` (module docstring)."""

    #: 0: the weight of ``a``; 1: of ``b``
    side = 0

    def __init__(self) -> None:
        super().__init__(ps.upgrade_to_float_no_complex,
                         name=f"normal_cdf_diff_weight_{'ab'[self.side]}")

    def impl(self, m, h):
        return np.float64(_diff_weight(self.side, np.float64(m), np.float64(h))[0])

    def c_code(self, node, name, inputs, outputs, sub) -> str:
        m, h = inputs
        (z,) = outputs
        x = ("a_", "b_")[self.side]
        return ("{\n" + f"double a_ = ({m}) + ({h}), b_ = ({m}) - ({h});\ndouble f_;\n"
                + _c_log_diff("a_", "b_", "f_")
                + f"\n{z} = isinf({x}) ? 0.0 : exp(-0.5 * {x} * {x} - {_LOG_SQRT_2PI!r} - f_);"
                + "\n}")

    def grad(self, inputs, output_gradients):
        m, h = inputs
        (gz,) = output_gradients
        w_a, w_b = _weight(0, m, h), _weight(1, m, h)
        if self.side == 0:
            a = m + h
            return [-(gz * w_a * (a + w_a - w_b)), -(gz * w_a * (a + w_a + w_b))]
        b = m - h
        return [gz * w_b * (w_b - w_a - b), -(gz * w_b * (w_a + w_b - b))]


class NormalCDFDiffWeightA(NormalCDFDiffWeight):
    r""":math:`W_a = \varphi(a)/(\Phi(a) - \Phi(b))`."""

    side = 0


class NormalCDFDiffWeightB(NormalCDFDiffWeight):
    r""":math:`W_b = \varphi(b)/(\Phi(a) - \Phi(b))`."""

    side = 1


_log_normal_cdf = LogNormalCDF()
_mills_ratio = MillsRatio()
_log_normal_cdf_diff = LogNormalCDFDiff()
_weights = (NormalCDFDiffWeightA(), NormalCDFDiffWeightB())


def mills_ratio(x):
    """:class:`MillsRatio` of a scalar or tensor."""
    return (_mills_ratio if _is_scalar(x) else Elemwise(_mills_ratio))(x)


def _weight(side: int, a, b):
    op = _weights[side]
    return (op if _is_scalar(a) and _is_scalar(b) else Elemwise(op))(a, b)


def _is_scalar(x) -> bool:
    return isinstance(x.type, ps.ScalarType)


def log_normal_cdf(x):
    r""":math:`\log\Phi(x)` of a tensor, elementwise, as one :class:`LogNormalCDF`."""
    return Elemwise(_log_normal_cdf)(x)


def log_normal_cdf_diff(a, b):
    r""":math:`\log(\Phi(a) - \Phi(b))` of tensors (``a > b``), elementwise, as one
    :class:`LogNormalCDFDiff` of the midpoint ``(a + b)/2`` and half-width ``(a − b)/2``."""
    return Elemwise(_log_normal_cdf_diff)(0.5 * (a + b), 0.5 * (a - b))


# ------------------------------------------------------------------ interval rules
def _ends(x: Interval) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(x[0], dtype=np.float64), np.asarray(x[1], dtype=np.float64)


def _log_phi_rule(x: Interval) -> Interval:
    """log Φ increases: ``[L(lo), L(hi)]``, widened by the error bound, at most 0."""
    lo, hi = _ends(x)
    with np.errstate(all="ignore"):
        a, b = _log_phi(lo), _log_phi(hi)
        out_lo, out_hi = outward_ulp(a - _log_phi_err(lo, a), b + _log_phi_err(hi, b))
    return out_lo, np.minimum(out_hi, 0.0)


def _mills_rule(x: Interval) -> Interval:
    """m decreases: ``[m(hi), m(lo)]``, widened relatively by ``64ε(2 + x²)`` (and by
    ``10⁻³⁰⁰`` for subnormal values), at least 0."""
    lo, hi = _ends(x)
    with np.errstate(all="ignore"):
        a, b = _mills(hi), _mills(lo)
        out_lo, out_hi = outward(a * (1.0 - _REL_PER_X2 * (2.0 + hi * hi)) - _TINY,
                                 b * (1.0 + _REL_PER_X2 * (2.0 + lo * lo)) + _TINY, 0.0)
    return np.maximum(out_lo, 0.0), out_hi


def _log_diff_rule(m: Interval, h: Interval) -> Interval:
    """F increases in ``h`` and decreases in ``|m|``: its bottom at ``(the m farthest from
    0, h_lo)``, its top at ``(the m nearest 0, h_hi)``; the whole line where the box reaches
    ``h ≤ 0`` (undefined)."""
    (m_lo, m_hi), (h_lo, h_hi) = _ends(m), _ends(h)
    far = np.where(np.abs(m_lo) >= np.abs(m_hi), m_lo, m_hi)
    near = np.where((m_lo <= 0.0) & (m_hi >= 0.0), 0.0,
                    np.where(m_lo > 0.0, m_lo, m_hi))
    low, err_low = _log_diff_mh(far, h_lo)
    high, err_high = _log_diff_mh(near, h_hi)
    with np.errstate(all="ignore"):
        out_lo, out_hi = outward_ulp(low - err_low, high + err_high)
    bad = ~(h_lo > 0.0)
    return np.where(bad, -np.inf, out_lo), np.where(bad, np.inf, np.minimum(out_hi, 0.0))


def _weight_rule(side: int):
    def rule(m: Interval, h: Interval) -> Interval:
        """Both weights decrease in ``h``; ``W_a`` decreases and ``W_b`` increases in ``m``:
        two corners, at least 0; the whole line where the box reaches ``h ≤ 0``."""
        (m_lo, m_hi), (h_lo, h_hi) = _ends(m), _ends(h)
        m_low, m_high = (m_hi, m_lo) if side == 0 else (m_lo, m_hi)
        low, err_low = _diff_weight(side, m_low, h_hi)
        high, err_high = _diff_weight(side, m_high, h_lo)
        with np.errstate(all="ignore"):
            out_lo, out_hi = outward_ulp(low - err_low, high + err_high)
        bad = ~(h_lo > 0.0)
        return (np.where(bad, -np.inf, np.maximum(out_lo, 0.0)),
                np.where(bad, np.inf, out_hi))

    return rule


#: the interval rules of the ops here, by op type
NORMAL_CDF_RULES = {LogNormalCDF: _log_phi_rule, MillsRatio: _mills_rule,
                    LogNormalCDFDiff: _log_diff_rule, NormalCDFDiffWeightA: _weight_rule(0),
                    NormalCDFDiffWeightB: _weight_rule(1)}
RULES.update(NORMAL_CDF_RULES)
