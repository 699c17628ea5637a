"""Rewrites that put a row log-density's predictor expressions in the forms the automatic
bound encloses tightly (:mod:`~pymc_subsample.model.predictors`): PyMC's parameter checks
dropped, each predictor expression written once and logs of sigmoids as softplus, and the
small graph readers they share.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from pymc.logprob.utils import CheckParameterValue
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.rewriting.basic import node_rewriter
from pytensor.scalar import basic as ps
from pytensor.scalar import math as psm
from pytensor.tensor.basic import Alloc
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.shape import SpecifyShape

from pymc_subsample.bounds.dispersion_ops import (
    NegativeBinomialZeroRate,
    log_one_minus_exp_neg,
    log_rising_factorial,
    negative_binomial_zero_rate,
)

__all__ = ["constant_value", "drop_check", "exp_forms", "log_forms", "negated", "positive",
           "rising_factorial_forms", "scalar_op", "sigmoid_arg"]


@node_rewriter([CheckParameterValue])
def drop_check(fgraph, node):
    """PyMC's parameter checks (``σ > 0``) hold on the support the transforms keep to."""
    return [node.inputs[0]]


def scalar_op(var: Variable):
    """The scalar op of an elementwise ``var``'s owner, else None."""
    return getattr(var.owner.op, "scalar_op", None) if var.owner is not None else None


def negated(var: Variable) -> Variable | None:
    """``x`` when ``var`` is ``−x`` or ``(−1)·x``, else None."""
    op = scalar_op(var)
    if isinstance(op, ps.Neg):
        return var.owner.inputs[0]
    if isinstance(op, ps.Mul) and len(var.owner.inputs) == 2:
        a, b = var.owner.inputs
        for c, x in ((a, b), (b, a)):
            if isinstance(c, Constant) and np.all(np.asarray(c.data) == -1.0):
                return x
    return None


def constant_value(var: Variable) -> float | None:
    """The one value of a constant, or of a fill or broadcast of one (``zeros_like(x)``)."""
    while var.owner is not None:
        op = var.owner.op
        if isinstance(getattr(op, "scalar_op", None), ps.Second):
            var = var.owner.inputs[1]
        elif isinstance(op, DimShuffle | Alloc | SpecifyShape):
            var = var.owner.inputs[0]
        else:
            return None
    if not isinstance(var, Constant):
        return None
    values = np.unique(np.asarray(var.data))
    return float(values[0]) if values.size == 1 else None


def exp_arg(var: Variable) -> Variable | None:
    """``a`` when ``var`` is ``e^a``."""
    return var.owner.inputs[0] if isinstance(scalar_op(var), ps.Exp) else None


#: elementwise ops whose value is positive for every real input
_POSITIVE = (ps.Exp, psm.Softplus, psm.Sigmoid)
#: elementwise ops whose value is positive where all their inputs are
_POSITIVE_OF_POSITIVE = (ps.Add, ps.Mul, ps.TrueDiv, ps.Sqrt)


def positive(var: Variable) -> bool:
    """Whether ``var`` is positive for every real value of its inputs, read off its
    structure (a conservative test): ``e^a``, ``softplus(a)``, ``σ(a)``, positive constants,
    and sums, products and quotients of such."""
    value = constant_value(var)
    if value is not None:
        return value > 0.0
    op = scalar_op(var)
    if isinstance(op, _POSITIVE):
        return True
    return isinstance(op, _POSITIVE_OF_POSITIVE) and all(positive(v) for v in var.owner.inputs)


def log_share(x: Variable) -> Variable | None:
    r""":math:`-\mathrm{softplus}(b - a)` when ``x`` is :math:`e^a / (e^a + e^b)` (in either
    order of the sum), else None: :math:`\log(e^a / (e^a + e^b))`, with ``a`` and ``b`` once
    each (a negative binomial's :math:`\log(\alpha / (\alpha + \mu))` in
    :math:`\log\alpha` and :math:`\log\mu`)."""
    if not isinstance(scalar_op(x), ps.TrueDiv):
        return None
    num, den = x.owner.inputs
    return _log_share(exp_arg(num), den)


def _log_share(a: Variable | None, den: Variable | None) -> Variable | None:
    """``−softplus(b − a)`` when ``den`` is ``e^a + e^b`` or ``e^b + e^a``, else None."""
    if (a is None or den is None or not isinstance(scalar_op(den), ps.Add)
            or len(den.owner.inputs) != 2):
        return None
    first, second = (exp_arg(v) for v in den.owner.inputs)
    if first is a and second is not None:
        return -pt.softplus(second - a)
    if second is a and first is not None:
        return -pt.softplus(first - a)
    return None


def sigmoid_arg(var: Variable) -> Variable | None:
    """``z`` when ``var`` is ``σ(z)``."""
    return var.owner.inputs[0] if isinstance(scalar_op(var), psm.Sigmoid) else None


def log_forms(x: Variable) -> Variable | None:
    r"""``log x`` in a form whose pieces are monotone in one variable each, or None:
    ``log switch(c, a, b) = switch(c, log a, log b)`` (a row's own class picked by the data)
    and the ordinal logit's interval probability

    .. math::

        \log(\sigma(a) - \sigma(b)) = -\mathrm{softplus}(-a) - \mathrm{softplus}(b)
        + \mathrm{log1mexp}(b - a),

    since :math:`\sigma(a) - \sigma(b) = \sigma(a)(1 - \sigma(b))(1 - e^{b-a})`; the end
    classes' :math:`\sigma(a) - 0` and :math:`1 - \sigma(b)` likewise."""
    op = scalar_op(x)
    if isinstance(op, ps.Switch):
        cond, a, b = x.owner.inputs
        return pt.switch(cond, pt.log(a), pt.log(b))
    if not isinstance(op, ps.Sub):
        return None
    first, second = x.owner.inputs
    a, b = sigmoid_arg(first), sigmoid_arg(second)
    if a is not None and b is not None:
        return -pt.softplus(-a) - pt.softplus(b) + pt.log1mexp(b - a)
    if a is not None and constant_value(second) == 0.0:
        return -pt.softplus(-a)
    if b is not None and constant_value(first) == 1.0:
        return -pt.softplus(b)
    return None


def _zero_rate(factors: list[Variable]) -> Variable | None:
    """The product of ``factors`` with ``e^λ·softplus(η − λ)`` among them as one
    :class:`~pymc_subsample.bounds.dispersion_ops.NegativeBinomialZeroRate` ``T(η, λ)``, else
    None."""
    for i, exp_factor in enumerate(factors):
        lam = exp_arg(exp_factor)
        if lam is None:
            continue
        for j, softplus_factor in enumerate(factors):
            x = (softplus_factor.owner.inputs[0]
                 if isinstance(scalar_op(softplus_factor), psm.Softplus) else None)
            if (x is not None and isinstance(scalar_op(x), ps.Sub)
                    and x.owner.inputs[1] is lam):
                rest = [v for k, v in enumerate(factors) if k not in (i, j)]
                return pt.mul(negative_binomial_zero_rate(x.owner.inputs[0], lam), *rest)
    return None


def _log_arg(var: Variable) -> Variable | None:
    return var.owner.inputs[0] if isinstance(scalar_op(var), ps.Log) else None


@node_rewriter([Elemwise])
def exp_forms(fgraph, node):
    """``(e^a)^k → e^{k a}``, ``b / e^a → b e^{−a}``, ``Q(1, x) → e^{−x}``,
    ``P(1, x) → 1 − e^{−x}``, ``log(1 − σ(z)) → −softplus(z)``,
    ``log σ(z) → −softplus(−z)`` and ``log1mexp(log1mexp(x)) → x``: each predictor expression
    once, so that the derivatives are not quotients of repeated terms whose enclosures
    overestimate (a Weibull's or Exponential's ``y/λ`` with ``λ = e^η``, a Bernoulli's
    ``log1p(−σ(η))``, a censored row's ``log S = log1mexp(log F)``)."""
    scalar = node.op.scalar_op
    minus = negated(node.inputs[0]) if isinstance(scalar, ps.Log1p) else None
    inner = scalar_op(node.inputs[0])
    if isinstance(scalar, psm.Log1mexp) and isinstance(inner, psm.Log1mexp):
        # log(1 − (1 − e^x)) = x for x ≤ 0: a survival term log S written as log1mexp of a
        # log-CDF (PyMC's Censored). Its enclosures explode through the two poles otherwise
        out = node.inputs[0].owner.inputs[0]
    elif isinstance(scalar, psm.Log1mexp) and isinstance(inner, ps.Switch):
        # through the log-CDF's own guard (switch(y < 0, −inf, log1mexp(...))) to the above
        cond, a, b = node.inputs[0].owner.inputs
        out = pt.switch(cond, pt.log1mexp(a), pt.log1mexp(b))
    elif (isinstance(scalar, psm.Log1mexp) and (rate := negated(node.inputs[0])) is not None
          and isinstance(scalar_op(rate), NegativeBinomialZeroRate)):
        # a hurdle negative binomial's log P(Y > 0) = log(1 − e^{−T}): one op whose every
        # derivative is monotone in T (dispersion_ops.LogOneMinusExpNeg)
        out = log_one_minus_exp_neg(rate)
    elif minus is not None and isinstance(scalar_op(minus), psm.Sigmoid):
        # log(1 − σ(z)) = −softplus(z): monotone, one occurrence of z
        out = -pt.softplus(minus.owner.inputs[0])
    elif isinstance(scalar, ps.Log) and isinstance(scalar_op(node.inputs[0]), psm.Sigmoid):
        out = -pt.softplus(-node.inputs[0].owner.inputs[0])
    elif isinstance(scalar, ps.Log) and (rewritten := log_forms(node.inputs[0])) is not None:
        out = rewritten
    elif isinstance(scalar, ps.Log) and (rewritten := log_share(node.inputs[0])) is not None:
        out = rewritten
    elif (isinstance(scalar, ps.Sub) and (rewritten := _log_share(
            node.inputs[0], _log_arg(node.inputs[1]))) is not None):
        # a − log(e^a + e^b) = −softplus(b − a): the same, after log(a/b) was split
        out = rewritten
    elif (isinstance(scalar, ps.EQ) and any(constant_value(v) == 0.0 for v in node.inputs)
          and any(positive(v) for v in node.inputs)):
        # e^a = 0 is false for every real a: PyMC's 0·log 0 guards (logpow(μ/(μ + α), y))
        # on a positive expression of the predictors select one branch on every box
        out = pt.zeros_like(node.outputs[0])
    elif isinstance(scalar, psm.GammaIncC | psm.GammaInc) and constant_value(node.inputs[0]) == 1.0:
        # Q(1, x) = e^{−x} and P(1, x) = 1 − e^{−x} (a Gamma(1) variable is exponential): a
        # hurdle or truncated Poisson's P(Y = 0) = Q(1, μ), whose log is then −μ, one
        # occurrence of μ instead of a derivative graph through the incomplete gamma function
        x = node.inputs[1]
        out = pt.exp(-x) if isinstance(scalar, psm.GammaIncC) else -pt.expm1(-x)
    elif isinstance(scalar, ps.Mul) and (rewritten := _zero_rate(node.inputs)) is not None:
        out = rewritten
    elif isinstance(scalar, ps.Pow):
        base, k = node.inputs
        if isinstance(scalar_op(base), ps.Exp):
            out = pt.exp(k * base.owner.inputs[0])
        else:
            return None
    elif isinstance(scalar, ps.TrueDiv):
        a, b = node.inputs
        if isinstance(scalar_op(b), ps.Exp):
            out = a * pt.exp(-b.owner.inputs[0])
        else:
            return None
    else:
        return None
    return [pt.cast(pt.broadcast_to(out, node.outputs[0].shape), node.outputs[0].dtype)]


def rising_factorial_forms(predictors: set[Variable], data: set[Variable]):
    r"""A rewrite of :math:`\log\Gamma(y + e^\lambda)`, ``y`` one of the row's ``data`` and
    ``λ`` one of its ``predictors``, into :math:`B(\lambda; y) + \log\Gamma(e^\lambda)`
    with ``B`` one :class:`~pymc_subsample.bounds.dispersion_ops.LogRisingFactorial` op, so that
    a negative binomial's :math:`\log\Gamma(y + \alpha) - \log\Gamma(\alpha)` becomes
    ``B`` alone once PyTensor's canonicalisation cancels the two :math:`\log\Gamma(\alpha)`:
    its derivatives in :math:`\lambda = \log\alpha` are then sums of sigmoid derivatives
    (tight on a wide box of λ) instead of differences of polygamma functions."""

    @node_rewriter([Elemwise])
    def rising_factorial(fgraph, node):
        if not isinstance(node.op.scalar_op, psm.GammaLn):
            return None
        (x,) = node.inputs
        if not isinstance(scalar_op(x), ps.Add) or len(x.owner.inputs) != 2:
            return None
        for y, e in (x.owner.inputs, x.owner.inputs[::-1]):
            lam = exp_arg(e)
            if y in data and lam in predictors:
                out = log_rising_factorial(lam, y) + pt.gammaln(e)
                return [pt.cast(pt.broadcast_to(out, node.outputs[0].shape),
                                node.outputs[0].dtype)]
        return None

    return rising_factorial
