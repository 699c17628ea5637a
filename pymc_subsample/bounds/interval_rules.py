"""The interval rules of the scalar ops: enclosures ``(lo, hi)`` of each op's values on boxes
of its inputs, rounded outward (:mod:`pymc_subsample.bounds.interval` walks a graph with them;
``docs/methods/mhss.md``, "Automatic bounds")."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import scipy.special as sc
from pytensor.scalar import basic as ps
from pytensor.scalar import math as psm

__all__ = ["REL_ARITH", "RULES", "Interval", "NoIntervalRule", "OwnRule", "as_bool", "magnitude",
           "outward", "outward_ulp"]

#: ``(lo, hi)`` arrays of one variable
Interval = tuple[np.ndarray, np.ndarray]

_EPS = np.finfo(np.float64).eps
#: relative widening after an op: IEEE arithmetic is correctly rounded (half an ulp); libm's
#: elementary functions are within an ulp or two; SciPy's special functions within far less
#: than 1e-13 relative (and the absolute slack covers their zeros)
REL_ARITH = 2.0 * _EPS
_REL_ELEMENTARY = 8.0 * _EPS
_REL_SPECIAL = 1e-13
_ABS_SPECIAL = 1e-15
#: SciPy's regularised incomplete gamma functions (Cephes' igam/igamc): within 2e-13 relative
#: of 30-digit mpmath values on k in (0, 200], x in [0, 500] wherever the value is above 1e-280
#: (tests/test_automatic_bounds.py); widened by 500 times that
_REL_INCOMPLETE_GAMMA = 1e-10
_TINY_INCOMPLETE_GAMMA = 1e-280
#: the minimum of log Γ on (0, ∞): x* and a value below log Γ(x*)
_GAMMALN_ARGMIN = 1.4616321449683623
_GAMMALN_MIN = -0.12148629053584961


class OwnRule:
    """A scalar op that carries its interval rule, where the rule depends on the op's own
    properties (a derivative's order) rather than on its type alone (:data:`RULES`)."""

    def interval_rule(self, *inputs: Interval) -> Interval:
        """The enclosure of the op's values on the box of its inputs' enclosures."""
        raise NotImplementedError


class NoIntervalRule(NotImplementedError):
    """The graph has an op the interval evaluator has no rule for (:attr:`op_name`)."""

    def __init__(self, op_name: str, why: str = "") -> None:
        self.op_name = op_name
        super().__init__(f"no interval rule for the op {op_name}" + (f" ({why})" if why else ""))


def magnitude(enclosure: Interval) -> np.ndarray:
    """``max(|lo|, |hi|)``: a bound on ``|v|`` (``inf`` where the enclosure has a NaN)."""
    lo, hi = enclosure
    out = np.maximum(np.abs(lo), np.abs(hi)).astype(np.float64)
    return np.where(np.isnan(out), np.inf, out)


def _whole_line_where_nan(lo: np.ndarray, hi: np.ndarray) -> Interval:
    """An end that is NaN (an undefined value) makes the enclosure the whole line."""
    with np.errstate(invalid="ignore", over="ignore"):
        # one cheap reduction first: a NaN anywhere (or ±inf + ∓inf) makes it NaN
        if not np.isnan(np.sum(lo) + np.sum(hi)):
            return lo, hi
    bad = np.isnan(lo) | np.isnan(hi)
    if np.any(bad):
        lo = np.where(bad, -np.inf, lo)
        hi = np.where(bad, np.inf, hi)
    return lo, hi


#: the outward step after a rounded result ``v``: ``|v|·2⁻⁵⁰ + 2⁻¹⁰⁷²`` is at least two ulps of
#: ``v`` (and two of the smallest subnormal), more than the half ulp of a correct rounding
#: plus the rounding of the step and of ``v ∓ step`` themselves; ``np.nextafter`` does the
#: same ten times slower
_STEP_REL = 2.0**-50
_STEP_ABS = 2.0**-1072
_MAX = np.finfo(np.float64).max
#: a ufunc reduction called directly: ``np.sum``'s dispatch took a third of its time here
_ADD_REDUCE = np.add.reduce


def _shift(v: np.ndarray, rel: float, absolute: float, up: bool) -> np.ndarray:
    """``v ± (|v|·rel + absolute)``, in place on a temporary; ``±inf`` past itself is NaN
    (then the whole line, :func:`_whole_line_where_nan`)."""
    t = np.abs(v)
    if isinstance(t, np.ndarray) and t.ndim:
        np.multiply(t, rel, out=t)
        np.add(t, absolute, out=t)
        return np.add(v, t, out=t) if up else np.subtract(v, t, out=t)
    t = t * rel + absolute
    return v + t if up else v - t


def outward(lo, hi, rel: float, absolute: float = 0.0) -> Interval:
    """Widen ``[lo, hi]`` by ``rel`` relative (and ``absolute``) and a few ulps outward; a NaN
    end (an undefined value) becomes the whole line."""
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    # no np.errstate here: the graph's walk ignores floating-point warnings once for all its
    # ops (:func:`~pymc_subsample.bounds.interval.evaluate_intervals`), and entering one per
    # op took a tenth of the enclosures' time
    new_lo = _shift(lo, rel + _STEP_REL, absolute + _STEP_ABS, up=False)
    new_hi = _shift(hi, rel + _STEP_REL, absolute + _STEP_ABS, up=True)
    if np.isnan(_ADD_REDUCE(new_lo, axis=None) + _ADD_REDUCE(new_hi, axis=None)):
        # a result that overflowed to +inf is at least the largest float (not undefined)
        new_lo = np.where(lo == np.inf, _MAX, new_lo)
        new_hi = np.where(hi == -np.inf, -_MAX, new_hi)
        return _whole_line_where_nan(new_lo, new_hi)
    return new_lo, new_hi


def outward_ulp(lo, hi) -> Interval:
    """A few ulps outward: enough for the result of one IEEE operation (``+``, ``−``, ``×``,
    ``÷``), which is correctly rounded, so within half an ulp of the exact value (also in the
    subnormal range; an overflow to ``±inf`` is outward already); a NaN end becomes the whole
    line."""
    return outward(lo, hi, 0.0)


def _monotone(fn: Callable, increasing: bool, rel: float = _REL_ELEMENTARY,
              absolute: float = 0.0, domain: float | None = None,
              closed: bool = True) -> Callable:
    """Rule of a monotone function on ``[domain, ∞)`` (``(domain, ∞)`` if not ``closed``, or
    the whole line when ``domain`` is None); outside its domain the result is the whole line."""

    def rule(x: Interval) -> Interval:
        lo, hi = x
        with np.errstate(all="ignore"):
            a = fn(lo)
            b = a if hi is lo else fn(hi)  # an exact input (data): one evaluation
        out = (a, b) if increasing else (b, a)
        out = outward(*out, rel, absolute)
        if domain is not None:
            outside = lo < domain if closed else lo <= domain
            if np.any(outside):
                out = (np.where(outside, -np.inf, out[0]), np.where(outside, np.inf, out[1]))
        return out

    return rule


def _add(x: Interval, y: Interval) -> Interval:
    return outward_ulp(x[0] + y[0], x[1] + y[1])


def _sub(x: Interval, y: Interval) -> Interval:
    return outward_ulp(x[0] - y[1], x[1] - y[0])


def _neg(x: Interval) -> Interval:
    return -x[1], -x[0]  # exact


def _products(x: Interval, y: Interval) -> Interval:
    """The least and largest of the endpoint products (rounded to nearest).

    A product ``0·∞`` (NaN) is left out by ``fmin``/``fmax``: the factor that is 0 makes
    another of the four products 0 (``0·`` the other end of the second factor), or the other
    products are ``−∞`` and ``∞``, so 0 is in the hull anyway; all four NaN makes the result
    the whole line."""
    if y[0] is y[1]:  # an exact factor (a constant or data): two products
        x, y = y, x
    if x[0] is x[1]:
        c, (lo, hi) = x[0], y
        if np.ndim(c) == 0 or np.size(c) == 1:
            c = float(np.ravel(c)[0])
            a, b = (c * lo, c * hi) if c >= 0.0 else (c * hi, c * lo)
            if c == 0.0 or math.isnan(c):  # 0·∞ and NaN alike: by the general rule
                a, b = np.fmin(c * lo, c * hi), np.fmax(c * lo, c * hi)
            return a, b
        p, q = c * lo, c * hi
        return np.fmin(p, q), np.fmax(p, q)
    p00, p01, p10, p11 = x[0] * y[0], x[0] * y[1], x[1] * y[0], x[1] * y[1]
    if (isinstance(p00, np.ndarray) and p00.ndim
            and p00.shape == p01.shape == p10.shape == p11.shape):
        # into the products' own (new) arrays: one temporary, not six
        lo = np.fmin(p00, p01)
        hi = np.fmax(p00, p01, out=p00)
        np.fmin(lo, np.fmin(p10, p11, out=p01), out=lo)
        return lo, np.fmax(hi, np.fmax(p10, p11, out=p10), out=hi)
    return (np.fmin(np.fmin(p00, p01), np.fmin(p10, p11)),
            np.fmax(np.fmax(p00, p01), np.fmax(p10, p11)))


def _mul(x: Interval, y: Interval) -> Interval:
    return outward_ulp(*_products(x, y))


def _reciprocal(x: Interval) -> Interval:
    lo, hi = x
    zero_in = (lo <= 0.0) & (hi >= 0.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a, b = 1.0 / hi, 1.0 / lo
    a = np.where(zero_in, -np.inf, a)
    b = np.where(zero_in, np.inf, b)
    return outward_ulp(a, b)


def _true_div(x: Interval, y: Interval) -> Interval:
    return _mul(x, _reciprocal(y))


def _integer_power(x: Interval, n: int) -> Interval:
    lo, hi = x
    if n == 0:
        return np.ones_like(lo), np.ones_like(hi)
    if n < 0:
        return _reciprocal(_integer_power(x, -n))
    with np.errstate(over="ignore", invalid="ignore"):
        a, b = lo**n, hi**n
    if n % 2 == 1:
        return outward(a, b, n * REL_ARITH)
    straddle = (lo < 0.0) & (hi > 0.0)
    low = np.where(straddle, 0.0, np.minimum(a, b))
    return outward(low, np.maximum(a, b), n * REL_ARITH)


def _pow(x: Interval, c: Interval) -> Interval:
    """``x^c``: a constant integer ``c`` by :func:`_integer_power`; otherwise
    ``exp(c·log x)`` on ``x > 0`` (the whole line elsewhere)."""
    c_lo, c_hi = c
    if np.size(c_lo) and np.all(c_lo == c_hi):
        values = np.unique(np.asarray(c_lo, dtype=np.float64))
        if values.size == 1 and float(values[0]).is_integer() and abs(values[0]) <= 64:
            return _integer_power(x, int(values[0]))
    return RULES[ps.Exp](_mul(c, RULES[ps.Log](x)))


def _abs(x: Interval) -> Interval:
    lo, hi = x
    straddle = (lo < 0.0) & (hi > 0.0)
    a, b = np.abs(lo), np.abs(hi)
    return np.where(straddle, 0.0, np.minimum(a, b)), np.maximum(a, b)  # exact


def _gammaln(x: Interval) -> Interval:
    """log Γ, convex on ``(0, ∞)`` with its minimum at ``x* ≈ 1.4616``; the whole line where
    ``x`` reaches ``(−∞, 0]`` (the poles)."""
    lo, hi = x
    with np.errstate(all="ignore"):
        a, b = sc.gammaln(lo), sc.gammaln(hi)
    low = np.where((lo <= _GAMMALN_ARGMIN) & (hi >= _GAMMALN_ARGMIN), _GAMMALN_MIN,
                   np.minimum(a, b))
    out = outward(low, np.maximum(a, b), _REL_SPECIAL, _ABS_SPECIAL)
    bad = lo <= 0.0
    return np.where(bad, -np.inf, out[0]), np.where(bad, np.inf, out[1])


def _polygamma(n: Interval, x: Interval) -> Interval:
    """``ψ^{(n)}`` for a constant order ``n ≥ 1`` on ``x > 0``: ``(−1)^{n+1}ψ^{(n)}`` is
    positive and decreasing there (completely monotone), so ``ψ^{(n)}`` is monotone."""
    orders = np.unique(np.asarray(n[0]))
    if not (np.all(n[0] == n[1]) and orders.size == 1 and float(orders[0]).is_integer()
            and orders[0] >= 0):
        raise NoIntervalRule("PolyGamma", "its order must be a constant integer")
    order = int(orders[0])
    if order == 0:
        return RULES[psm.Psi](x)
    rule = _monotone(lambda v: sc.polygamma(order, v), increasing=order % 2 == 0,
                     rel=_REL_SPECIAL, absolute=_ABS_SPECIAL, domain=0.0, closed=False)
    return rule(x)


def _incomplete_gamma(upper: bool) -> Callable:
    r"""The regularised incomplete gamma functions ``Q(k, x) = Γ(k, x)/Γ(k)`` (``upper``) and
    ``P = 1 − Q`` on ``k > 0``, ``x ≥ 0``: ``Q`` is the survival function of a Gamma(k, 1)
    variable at ``x``, so it decreases in ``x`` and increases in ``k`` (the Gamma family is
    stochastically increasing in its shape); ``P`` the reverse. The enclosure takes the two
    opposite corners of the box, widened by :data:`_REL_INCOMPLETE_GAMMA` relative, then cut
    to ``[0, 1]``; a lower end below :data:`_TINY_INCOMPLETE_GAMMA`, where SciPy's relative
    accuracy is not assured (subnormal results), is 0. Outside the domain: the whole line."""
    fn = sc.gammaincc if upper else sc.gammainc

    def rule(k: Interval, x: Interval) -> Interval:
        (k_lo, k_hi), (x_lo, x_hi) = k, x
        with np.errstate(all="ignore"):
            if upper:
                lo, hi = fn(k_lo, x_hi), fn(k_hi, x_lo)
            else:
                lo, hi = fn(k_hi, x_lo), fn(k_lo, x_hi)
        lo, hi = outward(lo, hi, _REL_INCOMPLETE_GAMMA)
        lo = np.where(lo < _TINY_INCOMPLETE_GAMMA, 0.0, np.minimum(lo, 1.0))
        hi = np.clip(hi, 0.0, 1.0)
        bad = (k_lo <= 0.0) | (x_lo < 0.0) | np.isnan(lo) | np.isnan(hi)
        return np.where(bad, -np.inf, lo), np.where(bad, np.inf, hi)

    return rule


def _maximum(x: Interval, y: Interval) -> Interval:
    return np.maximum(x[0], y[0]), np.maximum(x[1], y[1])  # exact


def _minimum(x: Interval, y: Interval) -> Interval:
    return np.minimum(x[0], y[0]), np.minimum(x[1], y[1])  # exact


def as_bool(x: Interval) -> Interval:
    """A boolean enclosure: ``lo`` certainly true, ``hi`` possibly true (a number is true
    unless it is 0)."""
    lo, hi = x
    if lo.dtype == bool and hi.dtype == bool:
        return lo, hi
    certainly = (lo > 0) | (hi < 0)
    possibly = ~((lo == 0) & (hi == 0))
    return certainly, possibly


def _switch(cond: Interval, a: Interval, b: Interval) -> Interval:
    true, possibly = as_bool(cond)
    false = ~possibly
    lo = np.where(true, a[0], np.where(false, b[0], np.minimum(a[0], b[0])))
    hi = np.where(true, a[1], np.where(false, b[1], np.maximum(a[1], b[1])))
    return lo, hi


def _compare(certain: Callable, possible: Callable) -> Callable:
    def rule(x: Interval, y: Interval) -> Interval:
        return certain(x, y), possible(x, y)

    return rule


def _eq(x: Interval, y: Interval) -> Interval:
    exact = (x[0] == x[1]) & (y[0] == y[1]) & (x[0] == y[0])
    return exact, (x[0] <= y[1]) & (y[0] <= x[1])


def _neq(x: Interval, y: Interval) -> Interval:
    same, overlap = _eq(x, y)
    return ~overlap, ~same


def _and(x: Interval, y: Interval) -> Interval:
    (xl, xh), (yl, yh) = as_bool(x), as_bool(y)
    return xl & yl, xh & yh


def _or(x: Interval, y: Interval) -> Interval:
    (xl, xh), (yl, yh) = as_bool(x), as_bool(y)
    return xl | yl, xh | yh


def _invert(x: Interval) -> Interval:
    lo, hi = as_bool(x)
    return ~hi, ~lo


def _identity(x: Interval) -> Interval:
    return x


def _isinf(x: Interval) -> Interval:
    # certainly infinite only at one infinite point (a censoring bound of ±inf, data)
    lo, hi = x
    return (lo == hi) & np.isinf(lo), np.isinf(lo) | np.isinf(hi)


def _isnan(x: Interval) -> Interval:
    lo, hi = x
    return np.isnan(lo) & np.isnan(hi), np.isnan(lo) | np.isnan(hi)


def _second(_shape: Interval, x: Interval) -> Interval:
    return x  # fill: the value of the second input, broadcast by the caller


def _log1mexp_point(v):
    """``log(1 − e^v)`` accurate to a few ulps on ``v < 0`` (Mächler's two branches)."""
    return np.where(v < -math.log(2.0), np.log1p(-np.exp(v)), np.log(-np.expm1(v)))


def _log1mexp(x: Interval) -> Interval:
    """``log(1 − e^x)``: decreasing on ``x < 0``, undefined (whole line) from 0."""
    rule = _monotone(_log1mexp_point, increasing=False)
    lo, hi = x
    out = rule((lo, hi))
    # domain here is x < 0: a box that reaches 0 is the whole line
    bad = hi >= 0.0
    return np.where(bad, -np.inf, out[0]), np.where(bad, np.inf, out[1])


def _log(x: Interval) -> Interval:
    """``log x``: increasing on ``x > 0``; ``−∞`` at ``x = 0``; whole line below."""
    lo, hi = x
    with np.errstate(all="ignore"):
        a = np.where(lo > 0.0, np.log(np.maximum(lo, 0.0)), -np.inf)
        b = np.log(hi)
    out = outward(a, b, _REL_ELEMENTARY)
    bad = lo < 0.0
    return np.where(bad, -np.inf, out[0]), np.where(bad, np.inf, out[1])


def _sigmoid(v):
    return sc.expit(v)


def _softplus(v):
    return np.logaddexp(0.0, v)


RULES: dict[type, Callable] = {
    ps.Add: lambda *xs: _fold(_add, xs),
    ps.Mul: lambda *xs: _fold(_mul, xs),
    ps.Sub: _sub,
    ps.Neg: _neg,
    ps.TrueDiv: _true_div,
    ps.Reciprocal: _reciprocal,
    ps.Pow: _pow,
    ps.Sqr: lambda x: _integer_power(x, 2),
    ps.Sqrt: _monotone(np.sqrt, True, REL_ARITH, domain=0.0),
    ps.Abs: _abs,
    ps.Exp: _monotone(np.exp, True),
    ps.Exp2: _monotone(np.exp2, True),
    ps.Expm1: _monotone(np.expm1, True),
    ps.Log: _log,
    ps.Log1p: _monotone(np.log1p, True, domain=-1.0),
    ps.Tanh: _monotone(np.tanh, True),
    psm.Log1mexp: _log1mexp,
    psm.Softplus: _monotone(_softplus, True),
    psm.Sigmoid: _monotone(_sigmoid, True),
    psm.Erf: _monotone(sc.erf, True, _REL_SPECIAL, _ABS_SPECIAL),
    psm.Erfc: _monotone(sc.erfc, False, _REL_SPECIAL, _ABS_SPECIAL),
    psm.Erfcx: _monotone(sc.erfcx, False, _REL_SPECIAL, _ABS_SPECIAL),
    psm.GammaLn: _gammaln,
    psm.Psi: _monotone(sc.digamma, True, _REL_SPECIAL, _ABS_SPECIAL, domain=0.0, closed=False),
    psm.TriGamma: _monotone(lambda v: sc.polygamma(1, v), False, _REL_SPECIAL, _ABS_SPECIAL,
                            domain=0.0, closed=False),
    psm.PolyGamma: _polygamma,
    psm.GammaIncC: _incomplete_gamma(upper=True),
    psm.GammaInc: _incomplete_gamma(upper=False),
    ps.Maximum: _maximum,
    ps.Minimum: _minimum,
    ps.Switch: _switch,
    ps.LT: _compare(lambda x, y: x[1] < y[0], lambda x, y: x[0] < y[1]),
    ps.LE: _compare(lambda x, y: x[1] <= y[0], lambda x, y: x[0] <= y[1]),
    ps.GT: _compare(lambda x, y: x[0] > y[1], lambda x, y: x[1] > y[0]),
    ps.GE: _compare(lambda x, y: x[0] >= y[1], lambda x, y: x[1] >= y[0]),
    ps.EQ: _eq,
    ps.NEQ: _neq,
    ps.AND: _and,
    ps.OR: _or,
    ps.Invert: _invert,
    ps.IsInf: _isinf,
    ps.IsNan: _isnan,
    ps.Identity: _identity,
    ps.Second: _second,
}


def _fold(rule: Callable, xs: Sequence[Interval]) -> Interval:
    out = xs[0]
    for x in xs[1:]:
        out = rule(out, x)
    return out
