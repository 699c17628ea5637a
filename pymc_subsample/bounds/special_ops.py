r"""Scalar ops whose interval rules are tight where the natural enclosure of their formula is
loose (``docs/methods/mhss.md``, "Automatic bounds").

The automatic bound encloses a row term's derivatives op by op. A formula in which one
quantity appears several times is enclosed loosely (the dependency problem): a multinomial
logit's :math:`\log\sum_k e^{c_k}` has derivatives that are quotients of the same
exponentials, :math:`e^{c_j}/\sum_k e^{c_k}`, whose numerator and denominator are enclosed
independently. The ops here stand for such a function *as one op*, so its enclosure is the
exact range of the function on the box (up to rounding), and their ``grad`` returns ops of this
module again (the negative binomial's dispersion ops, built the same way, are in
:mod:`pymc_subsample.bounds.dispersion_ops`), so ``pytensor.grad`` composes to every order
with tight pieces:

- :class:`LogSumExp` of ``n`` inputs, :math:`L(c) = \log\sum_k e^{c_k}`, increasing in each
  input: its range on a box is ``[L(lo), L(hi)]``;
- :class:`SoftmaxWeight` of ``n`` inputs, :math:`P_j(c) = e^{c_j - L(c)}` with :math:`c_j`
  its first input, the gradient of ``L`` in :math:`c_j`. Since
  :math:`\partial P_j/\partial c_k = P_j(\delta_{jk} - P_k)`, it increases in :math:`c_j`
  and decreases in every other input, so its range on a box is
  ``[P_j(lo_j, hi_{-j}), P_j(hi_j, lo_{-j})]`` (the two opposite corners), within ``[0, 1]``.

The higher derivatives of ``L`` are then polynomials in the :math:`P_k`
(:math:`\partial_k P_j = P_j(\delta_{jk} - P_k)`), enclosed from tight enclosures of each
:math:`P_k`; on tall data's narrow boxes that is close to the derivatives' own range.

Each rule evaluates the function at the box's corners in floating point and widens the result
by a generous bound of its rounding error (a few ulps per operation of a sum of ``n``
exponentials and a logarithm, relative to the sizes of the intermediate terms), so the
enclosure holds for the exact real values. :data:`SPECIAL_RULES` are registered in
:data:`~pymc_subsample.bounds.interval_rules.RULES` on import of this module.
"""

from __future__ import annotations

import math

import numpy as np
from pytensor import config
from pytensor.scalar import basic as ps
from pytensor.tensor.elemwise import Elemwise

from pymc_subsample.bounds.interval_rules import (
    RULES,
    Interval,
    outward_ulp,
)
from pymc_subsample.bounds.scalar_op_base import PropsScalarOp

__all__ = ["SPECIAL_RULES", "LogSumExp", "SoftmaxWeight", "box_ends", "log_sum_exp"]

_EPS = np.finfo(np.float64).eps
_LOG2 = math.log(2.0)
#: ulps of widening per input and per unit of the intermediate terms' size: each exponential
#: and the logarithm are within an ulp or two (libm), each sum and difference half an ulp of
#: its terms' size, so ``(n + 4)`` ulps of the largest term would do; 16 per input leaves a
#: wide margin
_ULPS_PER_INPUT = 16.0


def _shifted_sum(xs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(m, log Σ_k e^{x_k − m})`` with ``m = max_k x_k`` (0 where it is infinite, so that
    ``m + log Σ`` is ``±∞`` exactly there and NaN only for a NaN input)."""
    with np.errstate(all="ignore"):
        m = xs[0]
        for x in xs[1:]:
            m = np.maximum(m, x)
        m = np.where(np.isfinite(m), m, 0.0)
        total = np.exp(xs[0] - m)
        for x in xs[1:]:
            total = total + np.exp(x - m)
        return m, np.log(total)


def _lse_point(xs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``L(x)`` and a bound on its rounding error."""
    m, log_total = _shifted_sum(xs)
    with np.errstate(all="ignore"):
        value = m + log_total
        err = _ULPS_PER_INPUT * (len(xs) + 1) * _EPS * (1.0 + np.abs(m) + np.abs(log_total))
    return value, err


def _weight_point(xs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``P(x) = e^{x_1 − L(x)}`` and a bound on its rounding error (relative to its
    exponent's size: the exponential of an argument with absolute error ``δ`` has relative
    error ``e^δ − 1``)."""
    m, log_total = _shifted_sum(xs)
    with np.errstate(all="ignore"):
        arg = (xs[0] - m) - log_total
        value = np.exp(arg)
        delta = _ULPS_PER_INPUT * (len(xs) + 1) * _EPS * (
            1.0 + np.abs(xs[0] - m) + np.abs(arg) + np.abs(log_total))
        err = value * np.expm1(delta) + 4.0 * _EPS * value
    return value, err


def box_ends(inputs: list[Interval]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The lower and upper ends of boxes, each input broadcast to their common shape."""
    shape = np.broadcast_shapes(*(np.shape(x[0]) for x in inputs))
    lo = [np.broadcast_to(np.asarray(x[0], dtype=np.float64), shape) for x in inputs]
    hi = [np.broadcast_to(np.asarray(x[1], dtype=np.float64), shape) for x in inputs]
    return lo, hi


def _lse_rule(*inputs: Interval) -> Interval:
    """``L`` increases in each input: its range is ``[L(lo), L(hi)]``, widened by the
    rounding error."""
    lo, hi = box_ends(list(inputs))
    a, err_a = _lse_point(lo)
    b, err_b = _lse_point(hi)
    with np.errstate(invalid="ignore"):
        return outward_ulp(a - err_a, b + err_b)


def _c_shifted_sum(inputs: list[str]) -> str:
    """C code declaring ``m`` (the finite maximum, else 0) and ``log_total``."""
    lines = [f"double m = {inputs[0]};"]
    lines += [f"m = fmax(m, {x});" for x in inputs[1:]]
    lines.append("if (!isfinite(m)) m = 0.0;")
    lines.append("double total = " + " + ".join(f"exp({x} - m)" for x in inputs) + ";")
    lines.append("double log_total = log(total);")
    return "\n".join(lines)


class LogSumExp(PropsScalarOp):
    r""":math:`\log\sum_{k=1}^n e^{x_k}` of ``n`` inputs (module docstring); its gradient in
    :math:`x_j` is :class:`SoftmaxWeight` ``j``."""

    __props__ = ("n",)
    nout = 1

    def __init__(self, n: int) -> None:
        super().__init__(ps.upgrade_to_float_no_complex, name=f"log_sum_exp{n}")
        self.n = int(n)
        self.nin = self.n


    def impl(self, *xs):
        m, log_total = _shifted_sum([np.float64(x) for x in xs])
        return np.float64(m + log_total)

    def c_code(self, node, name, inputs, outputs, sub) -> str:
        (z,) = outputs
        return "{\n" + _c_shifted_sum(list(inputs)) + f"\n{z} = m + log_total;\n}}"

    def grad(self, inputs, output_gradients):
        (gz,) = output_gradients
        return _masked(inputs, [gz * _weight(j, inputs) for j in range(self.n)])


class SoftmaxWeight(PropsScalarOp):
    r""":math:`e^{x_1}/\sum_{k=1}^n e^{x_k}` (module docstring): the softmax probability of
    its *first* input, the gradient of :class:`LogSumExp` in that input (the ``j``-th weight is
    this op with ``x_j`` first); its gradient is
    :math:`P(1 - P)` in the first input and :math:`-P P_k` in the ``k``-th."""

    __props__ = ("n",)
    nout = 1

    def __init__(self, n: int) -> None:
        super().__init__(ps.upgrade_to_float_no_complex, name=f"softmax_weight{n}")
        self.n = int(n)
        self.nin = self.n


    def impl(self, *xs):
        m, log_total = _shifted_sum([np.float64(x) for x in xs])
        with np.errstate(all="ignore"):
            return np.float64(np.exp((np.float64(xs[0]) - m) - log_total))

    def c_code(self, node, name, inputs, outputs, sub) -> str:
        (z,) = outputs
        return ("{\n" + _c_shifted_sum(list(inputs))
                + f"\n{z} = exp(({inputs[0]} - m) - log_total);\n}}")

    def grad(self, inputs, output_gradients):
        (gz,) = output_gradients
        p = self(*inputs)
        out = [gz * p * (1.0 - p)]
        out += [-(gz * p * _weight(k, inputs)) for k in range(1, self.n)]
        return _masked(inputs, out)


def _masked(inputs, grads):
    """``grads`` with a zero for each integer input (a constant class column of zeros)."""
    return [x.zeros_like(dtype=config.floatX) if x.type in ps.discrete_types else g
            for x, g in zip(inputs, grads, strict=True)]


def _weight(j: int, xs):
    """The ``j``-th softmax weight of ``xs`` as a :class:`SoftmaxWeight` (``x_j`` first, the
    others in order)."""
    return SoftmaxWeight(len(xs))(xs[j], *(x for k, x in enumerate(xs) if k != j))


def log_sum_exp(*columns):
    """``log Σ_k e^{c_k}`` of tensors (elementwise, broadcast) as one :class:`LogSumExp`."""
    return Elemwise(LogSumExp(len(columns)))(*columns)


def _lse_weight_rule(*inputs: Interval) -> Interval:
    """:class:`SoftmaxWeight`'s rule: increasing in the first input, decreasing in the
    others, so its range is taken at the two opposite corners, widened by the rounding error
    and cut to ``[0, 1]``."""
    lo, hi = box_ends(list(inputs))
    a, err_a = _weight_point([lo[0], *hi[1:]])
    b, err_b = _weight_point([hi[0], *lo[1:]])
    with np.errstate(invalid="ignore"):
        out_lo, out_hi = outward_ulp(a - err_a, b + err_b)
    # 0 ≤ P ≤ 1 wherever it is defined (a NaN end is the whole line, then [0, 1])
    return np.clip(out_lo, 0.0, 1.0), np.clip(out_hi, 0.0, 1.0)


SPECIAL_RULES = {LogSumExp: _lse_rule, SoftmaxWeight: _lse_weight_rule}
RULES.update(SPECIAL_RULES)
