"""Reading a Bernoulli's link off a PyTensor graph, and its rows' stable log density.

Shared by the model layer (:mod:`pymc_subsample.model.rebuild` writes a probit or cloglog
Bernoulli's row terms in the stable form) and the bounds
(:mod:`pymc_subsample.bounds.bernoulli` reads ``η`` the same way and differentiates the same
``f``), so that neither imports the other. Graph reading only: no model, no data.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from pymc.distributions.dist_math import normal_lcdf
from pytensor.graph.basic import Variable
from pytensor.scalar.basic import Exp, Expm1, Mul, Neg, Sub
from pytensor.scalar.math import Erfc
from pytensor.tensor.basic import get_underlying_scalar_constant_value
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.random.basic import BernoulliRV

__all__ = [
    "cloglog_predictor",
    "cloglog_row_logp",
    "probit_predictor",
    "probit_row_logp",
    "scalar_op",
    "stable_bernoulli_logp",
]


def scalar_op(var: Variable):
    """The scalar op of an elementwise node (``Exp``, ``Mul``, ...), or None for anything else:
    how the families and the model layer read a graph's shape."""
    owner = var.owner
    if owner is not None and isinstance(owner.op, Elemwise):
        return owner.op.scalar_op
    return None


def _constant(var: Variable) -> float | None:
    try:
        return float(get_underlying_scalar_constant_value(var))
    except NotScalarConstantError:
        return None


def _negated(var: Variable) -> Variable | None:
    """``x`` when ``var`` is ``-x`` (``Neg`` or a product with the constant −1), else None."""
    op = scalar_op(var)
    if isinstance(op, Neg):
        return var.owner.inputs[0]
    if isinstance(op, Mul) and len(var.owner.inputs) == 2:
        for c, x in (var.owner.inputs, var.owner.inputs[::-1]):
            if _constant(c) == -1.0:
                return x
    return None


def probit_predictor(p: Variable) -> Variable | None:
    """``η`` when ``p`` is PyMC's ``invprobit(η) = ½·erfc(−η/√2)`` (by its graph), else None."""
    if not (isinstance(scalar_op(p), Mul) and len(p.owner.inputs) == 2):
        return None
    for half, other in (p.owner.inputs, p.owner.inputs[::-1]):
        if _constant(half) == 0.5 and isinstance(scalar_op(other), Erfc):
            return -np.sqrt(2.0) * other.owner.inputs[0]
    return None


def probit_row_logp(eta: Variable, y: Variable) -> Variable:
    """``log Φ(η)`` for ``y = 1`` and ``log Φ(−η)`` for ``y = 0``, stable in both tails."""
    return normal_lcdf(0.0, 1.0, (2.0 * pt.cast(y, "float64") - 1.0) * pt.cast(eta, "float64"))


def cloglog_predictor(p: Variable) -> Variable | None:
    """``η`` when ``p`` is ``1 − exp(−exp(η))`` or ``−expm1(−exp(η))`` (by its graph)."""
    if isinstance(scalar_op(p), Sub) and _constant(p.owner.inputs[0]) == 1.0:
        inner = p.owner.inputs[1]
        if not isinstance(scalar_op(inner), Exp):
            return None
        arg = inner.owner.inputs[0]
    else:
        inner = _negated(p)
        if inner is None or not isinstance(scalar_op(inner), Expm1):
            return None
        arg = inner.owner.inputs[0]
    u = _negated(arg)
    if u is None or not isinstance(scalar_op(u), Exp):
        return None
    return u.owner.inputs[0]


def cloglog_row_logp(eta: Variable, y: Variable) -> Variable:
    """``log(1 − exp(−e^η))`` for ``y = 1`` and ``−e^η`` for ``y = 0``, stable in both tails."""
    u = pt.exp(pt.cast(eta, "float64"))
    return pt.switch(pt.eq(pt.cast(y, "float64"), 1.0), pt.log1mexp(-u), -u)


def stable_bernoulli_logp(rv: Variable, value: Variable) -> Variable | None:
    """A probit or cloglog Bernoulli's row terms in a stable form, or None for any other variable.

    PyMC's Bernoulli computes ``log(1 − p)`` by ``log1p(−p)``: for ``p = Φ(η)`` inaccurate
    beyond ``η ≈ 5`` and ``-inf`` beyond 8.3, where ``log Φ(−η)`` is finite; for
    ``p = 1 − exp(−e^η)`` ``-inf`` beyond ``η ≈ 3.6``, where it is ``−e^η``
    (``docs/bad-inputs.md``). The families' own ``f`` (:mod:`pymc_subsample.bounds.bernoulli`)
    are these forms.
    """
    if rv.owner is None or not isinstance(rv.owner.op, BernoulliRV):
        return None
    (p,) = rv.owner.op.dist_params(rv.owner)
    y = pt.cast(value, "float64")
    eta = probit_predictor(p)
    if eta is not None:
        logp = probit_row_logp(eta, y)
    else:
        eta = cloglog_predictor(p)
        if eta is None:
            return None
        logp = cloglog_row_logp(eta, y)
    logp = pt.switch(pt.eq(y, 0.0) | pt.eq(y, 1.0), logp, -np.inf)
    return pt.broadcast_to(logp, value.shape)
