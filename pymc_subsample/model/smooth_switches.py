r"""PyMC's stabilised Normal log-CDFs found in a row term and written as one op each.

A Tobit row's ``log Φ(z)``, a truncated Normal's normalising ``log(1 − Φ(a))`` and an ordinal
probit's ``log(Φ(a) − Φ(b))`` are built by PyMC's ``normal_lcdf``, ``normal_lccdf`` and
``log_diff_normal_cdf`` (``pymc.distributions.dist_math``) as switches between formulas chosen
for their accuracy in floating point:

- ``normal_lcdf``: ``z < −1`` picks ``log(erfcx(−z/√2)/2) − z²/2``, else
  ``log1p(−erfc(z/√2)/2)``; both are ``log Φ(z)`` for every real ``z``, since
  ``erfcx(x) = e^{x²} erfc(x)`` and ``Φ(z) = erfc(−z/√2)/2 = 1 − erfc(z/√2)/2``;
- ``normal_lccdf``: the same for ``log(1 − Φ(z)) = log Φ(−z)``, switching at ``z > 1``;
- ``log_diff_normal_cdf`` (``x = (a − μ)/(σ√2) > y = (b − μ)/(σ√2)``): ``y > 0`` picks
  ``−y² + log(erfcx(y) − e^{y² − x²} erfcx(x))``, ``x < 0`` picks
  ``−x² + log(erfcx(−x) − e^{x² − y²} erfcx(−y))``, else ``log(erf(x) − erf(y))``, each plus
  ``log ½``; all three are ``log((erf(x) − erf(y))/2) = log(Φ(a′) − Φ(b′))`` for every
  ``x > y`` (multiply out ``erfcx``), the argument of each ``log`` then positive.

So each is one analytic function of its standardised arguments, and
:func:`rewrite_normal_log_cdfs` writes it as one op
(:mod:`~pymc_subsample.bounds.normal_cdf_ops`: ``log Φ(z)``, ``log Φ(−z)``,
``log(Φ(a′) − Φ(b′))``) whose interval enclosure is its exact range on a box and whose
derivatives are ops of the same kind: the automatic bound then encloses the row term's
derivatives tightly, also across the switch points, where the switch's derivatives, formula by
formula, were quotients of the same exponentials enclosed loosely (an ordinal probit's were
infinite on most rows' boxes). It finds each switch by rebuilding the function with PyMC's own
code from the inputs the switch reads and comparing the two graphs node by node
(``equal_computations``): a switch that only looks similar, or a user's own
``switch(z < −1, ...)``, is left as written, and the automatic bound then treats it as a
possible kink. Other switches are not touched. The ops compute the same values (to a few ulps:
SciPy's ``log_ndtr`` in NumPy, PyMC's own formulas in C) for the sampler as for the bound.
"""

from __future__ import annotations

from collections.abc import Callable

import pytensor.tensor as pt
from pymc.distributions.dist_math import log_diff_normal_cdf, normal_lccdf, normal_lcdf
from pytensor.graph.basic import Variable, equal_computations
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import graph_inputs, io_toposort
from pytensor.scalar import basic as ps

from pymc_subsample.bounds.normal_cdf_ops import log_normal_cdf, log_normal_cdf_diff
from pymc_subsample.model.predictor_forms import scalar_op

__all__ = ["rewrite_normal_log_cdfs"]


def _standardised(z: Variable, scaled: bool) -> tuple[Variable, Variable, Variable] | None:
    """``(x, μ, σ)`` when ``z`` is ``(x − μ)/σ`` (``((x − μ)/σ)/c`` if ``scaled``)."""
    if scaled:
        if not isinstance(scalar_op(z), ps.TrueDiv):
            return None
        z = z.owner.inputs[0]
    if not isinstance(scalar_op(z), ps.TrueDiv):
        return None
    difference, sigma = z.owner.inputs
    if not isinstance(scalar_op(difference), ps.Sub):
        return None
    x, mu = difference.owner.inputs
    return x, mu, sigma


def _switch_parts(var: Variable) -> tuple[Variable, Variable, Variable] | None:
    if not isinstance(scalar_op(var), ps.Switch):
        return None
    return tuple(var.owner.inputs)


def _one_sided(builder: Callable, comparison: type, sign: float) -> Callable:
    """A recogniser of ``normal_lcdf``/``normal_lccdf``: ``log Φ(sign·z)`` as one op if
    ``switch`` is ``builder(μ, σ, x)`` for the ``z = (x − μ)/σ`` its condition compares, else
    None."""

    def recognise(switch: Variable) -> Variable | None:
        cond, _, _ = _switch_parts(switch)
        if not isinstance(scalar_op(cond), comparison):
            return None
        parts = _standardised(cond.owner.inputs[0], scaled=False)
        if parts is None:
            return None
        x, mu, sigma = parts
        if not equal_computations([switch], [builder(mu, sigma, x)]):
            return None
        z = cond.owner.inputs[0]
        return log_normal_cdf(z if sign > 0 else -z)

    return recognise


def _log_diff(switch: Variable) -> Variable | None:
    """``log(Φ(a′) − Φ(b′)) − log ½`` as one op if ``switch`` is the switch of
    ``log_diff_normal_cdf(μ, σ, a, b)`` (``log ½ +`` it), reading ``a′ = (a − μ)/σ`` from its
    inner condition and ``b′`` from its outer one, else None."""
    outer, _, inner_switch = _switch_parts(switch)
    inner = _switch_parts(inner_switch)
    if inner is None or not isinstance(scalar_op(outer), ps.GT) \
            or not isinstance(scalar_op(inner[0]), ps.LT):
        return None
    lower = _standardised(outer.owner.inputs[0], scaled=True)
    upper = _standardised(inner[0].owner.inputs[0], scaled=True)
    if lower is None or upper is None:
        return None
    (b, mu, sigma), (a, _, _) = lower, upper
    built = log_diff_normal_cdf(mu, sigma, a, b)
    # log(0.5) + switch(...): the switch is the sum's second term
    candidates = [v for v in built.owner.inputs if _switch_parts(v) is not None]
    if len(candidates) != 1 or not equal_computations([switch], candidates):
        return None
    # PyMC's own log ½ (a float32 constant when floatX is): subtracted as it is added, the
    # two cancel exactly in the sum
    (half,) = [v for v in built.owner.inputs if v is not candidates[0]]
    # the conditions compare (a − μ)/σ/√2 and (b − μ)/σ/√2: their numerators are a′ and b′
    a_std = inner[0].owner.inputs[0].owner.inputs[0]
    b_std = outer.owner.inputs[0].owner.inputs[0]
    return log_normal_cdf_diff(a_std, b_std) - half


#: (name, recogniser): each returns the switch's replacement, or None
_RECOGNISERS: tuple[tuple[str, Callable], ...] = (
    ("normal_lcdf", _one_sided(normal_lcdf, ps.LT, 1.0)),
    ("normal_lccdf", _one_sided(normal_lccdf, ps.GT, -1.0)),
    ("log_diff_normal_cdf", _log_diff),
)


def rewrite_normal_log_cdfs(graph: Variable) -> Variable:
    """``graph`` with the switches that are PyMC's ``normal_lcdf``, ``normal_lccdf`` or
    ``log_diff_normal_cdf`` written as the ops of
    :mod:`~pymc_subsample.bounds.normal_cdf_ops` (module docstring); the same graph if there
    is none."""
    replace: dict[Variable, Variable] = {}
    for node in io_toposort(list(graph_inputs([graph])), [graph]):
        out = node.outputs[0]
        if _switch_parts(out) is None:
            continue
        for _source, recognise in _RECOGNISERS:
            replacement = recognise(out)
            if replacement is not None:
                replace[out] = pt.cast(replacement, out.type.dtype)
                break
    if not replace:
        return graph
    return graph_replace(graph, replace, strict=False)


