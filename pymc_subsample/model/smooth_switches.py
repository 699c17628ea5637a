r"""PyMC's stabilised Normal log-CDFs found in a row term and marked as smooth switches.

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

So the row term is analytic across these switches' surfaces, and the automatic bound may
enclose its derivatives on a box that straddles one
(:mod:`~pymc_subsample.bounds.smooth_switch`). :func:`mark_smooth_switches` finds each such
switch by rebuilding the function with PyMC's own code from the inputs the switch reads and
comparing the two graphs node by node (``equal_computations``): a switch that only looks
similar, or a user's own ``switch(z < −1, ...)``, is left unmarked, and the automatic bound
then treats it as a possible kink, as before. Other switches are not touched.
"""

from __future__ import annotations

from collections.abc import Callable

from pymc.distributions.dist_math import log_diff_normal_cdf, normal_lccdf, normal_lcdf
from pytensor.graph.basic import Variable, equal_computations
from pytensor.graph.replace import clone_replace, graph_replace
from pytensor.graph.traversal import graph_inputs, io_toposort
from pytensor.scalar import basic as ps

from pymc_subsample.bounds.smooth_switch import smooth_condition
from pymc_subsample.model.predictor_forms import scalar_op

__all__ = ["mark_smooth_switches"]


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


def _one_sided(builder: Callable, comparison: type) -> Callable:
    """A recogniser of ``normal_lcdf``/``normal_lccdf``: the conditions of ``switch`` if it is
    ``builder(μ, σ, x)`` for the ``(x − μ)/σ`` its condition compares, else None."""

    def recognise(switch: Variable) -> list[Variable] | None:
        cond, _, _ = _switch_parts(switch)
        if not isinstance(scalar_op(cond), comparison):
            return None
        parts = _standardised(cond.owner.inputs[0], scaled=False)
        if parts is None:
            return None
        x, mu, sigma = parts
        if not equal_computations([switch], [builder(mu, sigma, x)]):
            return None
        return [cond]

    return recognise


def _log_diff(switch: Variable) -> list[Variable] | None:
    """The conditions of ``switch`` if it is the switch of ``log_diff_normal_cdf(μ, σ, a, b)``
    (``log ½ +`` it), reading ``a`` from its inner condition and ``b`` from its outer one."""
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
    return [outer, inner[0]]


#: (name, recogniser): each returns the conditions to mark, or None
_RECOGNISERS: tuple[tuple[str, Callable], ...] = (
    ("normal_lcdf", _one_sided(normal_lcdf, ps.LT)),
    ("normal_lccdf", _one_sided(normal_lccdf, ps.GT)),
    ("log_diff_normal_cdf", _log_diff),
)


def mark_smooth_switches(graph: Variable) -> Variable:
    """``graph`` with the conditions of the switches that are PyMC's ``normal_lcdf``,
    ``normal_lccdf`` or ``log_diff_normal_cdf`` marked by
    :func:`~pymc_subsample.bounds.smooth_switch.smooth_condition` (module docstring); the
    same graph if there is none."""
    replace: dict[Variable, Variable] = {}
    covered: set[Variable] = set()
    for node in io_toposort(list(graph_inputs([graph])), [graph]):
        out = node.outputs[0]
        if out in covered or _switch_parts(out) is None:
            continue
        for source, recognise in _RECOGNISERS:
            conditions = recognise(out)
            if conditions is None:
                continue
            marked = {c: smooth_condition(c, source) for c in conditions}
            # the marks only inside this switch: the same condition elsewhere stays as it is
            replace[out] = clone_replace(out, replace=marked)
            covered.update(_switches_within(out, conditions))
            break
    if not replace:
        return graph
    return graph_replace(graph, replace, strict=False)


def _switches_within(switch: Variable, conditions: list[Variable]) -> set[Variable]:
    """The switch and the inner switches on ``conditions`` (recognised with it)."""
    found = {switch}
    stack = [switch]
    while stack:
        var = stack.pop()
        parts = _switch_parts(var)
        if parts is None:
            continue
        for branch in parts[1:]:
            inner = _switch_parts(branch)
            if inner is not None and inner[0] in conditions:
                found.add(branch)
                stack.append(branch)
    return found
