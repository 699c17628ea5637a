r"""Interval evaluation of a PyTensor graph, row by row in NumPy (``docs/methods/mhss.md``,
"Automatic bounds").

Each graph variable is carried as a pair of arrays ``(lo, hi)`` with ``lo ≤ v ≤ hi`` for every
value ``v`` the variable takes when the graph's inputs range over their given intervals (an
*enclosure*). The graph is walked in topological order and each op maps its inputs'
enclosures to its output's by a rule:

- monotone scalar functions (``exp``, ``log``, ``log1p``, ``expm1``, ``softplus``,
  ``sigmoid``, ``tanh``, ``erf``, ``erfc``, ``erfcx``, ``sqrt``, ``digamma``, ``polygamma``)
  map the endpoints;
- ``x·y`` takes the least and largest of the four endpoint products, ``1/x`` is the whole line
  when ``0 ∈ x``, ``x^c`` with a constant ``c`` and ``|x|``, ``gammaln`` split at their turning
  points; the regularised incomplete gamma functions ``Q(k, x)``, ``P(k, x)`` are monotone in
  each argument and take the box's corners;
- comparisons give a boolean enclosure (``lo``: certainly true, ``hi``: possibly true), and
  ``switch`` takes its branch where the condition is decided, the union where it is not;
- structural ops (``DimShuffle``, ``Alloc``, ``Subtensor``, ``Reshape``, ...) are applied to
  both ends; shapes and integer arithmetic on exact values are evaluated exactly.

Every floating-point result is rounded outward (a relative widening of a few ulps for
arithmetic and elementary functions, more for special functions, then a step of at least two
ulps towards ``∓∞``), so the enclosure holds for the exact real values, not only for what
NumPy computes. An op with no rule raises :class:`NoIntervalRule` naming it: never a guess.
The scalar ops' rules are in :mod:`pymc_subsample.bounds.interval_rules`; this module walks a
graph with them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.traversal import io_toposort
from pytensor.scalar import basic as ps
from pytensor.tensor.basic import (
    Alloc,
    ExtractDiag,
    Join,
    MakeVector,
    ScalarFromTensor,
    TensorFromScalar,
)
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.math import Sum
from pytensor.tensor.shape import Reshape, Shape, Shape_i, SpecifyShape
from pytensor.tensor.subtensor import (
    AdvancedSubtensor,
    AdvancedSubtensor1,
    Subtensor,
)

from pymc_subsample.bounds.interval_rules import (
    REL_ARITH,
    RULES,
    Interval,
    NoIntervalRule,
    OwnRule,
    as_bool,
    magnitude,
    outward,
)

__all__ = ["Interval", "NoIntervalRule", "check_rules", "evaluate_intervals", "magnitude",
           "piece_boxes", "piece_counts", "undecided_comparisons"]

#: the widening of a piece's ends (:func:`piece_boxes`): a few ulps of ``|c| + 2w`` (each end
#: is a few roundings)
_PIECE_REL = 2.0**-48
_PIECE_ABS = 2.0**-1070


def _scalar_rule(op, inputs: list[Interval], out_dtype: str) -> Interval:
    """The enclosure of one scalar op applied elementwise."""
    if isinstance(op, ps.Composite):
        return _evaluate(op.fgraph.inputs, inputs, op.fgraph.outputs)[0]
    if isinstance(op, ps.Cast):
        return _cast(inputs[0], out_dtype)
    rule = op.interval_rule if isinstance(op, OwnRule) else RULES.get(type(op))
    if rule is None:
        raise NoIntervalRule(type(op).__name__)
    lo, hi = rule(*inputs)
    if out_dtype == "bool":
        return np.asarray(lo, dtype=bool), np.asarray(hi, dtype=bool)
    if out_dtype.startswith(("int", "uint")):
        if not (_exact((lo, hi))):
            raise NoIntervalRule(type(op).__name__, "an integer result of non-exact inputs")
        return lo.astype(out_dtype), hi.astype(out_dtype)
    return lo, hi


def _exact(x: Interval) -> bool:
    return x[0] is x[1] or bool(np.all(x[0] == x[1]))


def _cast(x: Interval, dtype: str) -> Interval:
    lo, hi = x
    if dtype == "bool":
        return as_bool(x)
    if dtype.startswith("float"):
        if dtype != "float64":
            raise NoIntervalRule(f"Cast{{{dtype}}}", "only float64 is evaluated")
        return np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    # to an integer: exact values only (floor/ceil of an interval is not taken here)
    if not _exact(x):
        raise NoIntervalRule(f"Cast{{{dtype}}}", "a cast of a varying value to an integer")
    return lo.astype(dtype), hi.astype(dtype)


#: ops applied to both ends alike: they select, copy or rearrange values
_STRUCTURAL = (DimShuffle, Alloc, Subtensor, AdvancedSubtensor, AdvancedSubtensor1, Reshape,
               SpecifyShape, Join, MakeVector, ExtractDiag, TensorFromScalar,
               ScalarFromTensor)
#: ops whose result depends on their inputs' shapes only
_SHAPE = (Shape, Shape_i)


def _perform(node, values: list) -> np.ndarray:
    storage = [[None] for _ in node.outputs]
    node.op.perform(node, values, storage)
    return storage[0][0]


def _sum(node, args: list[Interval]) -> Interval:
    """A sum over axes: the sums of the ends, widened by the summation's rounding error
    (at most ``(n − 1)·eps·Σ|x|`` for ``n`` terms)."""
    (lo, hi), = args
    lo_sum, hi_sum = (np.asarray(_perform(node, [v])) for v in (lo, hi))
    count = max(1, np.size(lo) // max(1, np.size(lo_sum)))
    size = np.asarray(_perform(node, [np.maximum(np.abs(lo), np.abs(hi))]))
    slack = count * np.finfo(np.float64).eps * size
    return outward(lo_sum - slack, hi_sum + slack, REL_ARITH)


def _evaluate(inputs: Sequence[Variable], enclosures: Sequence[Interval],
              outputs: Sequence[Variable],
              env: dict[Variable, Interval] | None = None) -> list[Interval]:
    """The enclosures of ``outputs``; ``env`` (if given) keeps every variable's."""
    env = {} if env is None else env
    env.update(zip(inputs, enclosures, strict=True))
    # the rules' NaN and ±inf are handled as values (the whole line, an overflow): no
    # warnings, set once for the walk rather than by each rule
    with np.errstate(all="ignore"):
        return _walk(inputs, outputs, env)


def _walk(inputs: Sequence[Variable], outputs: Sequence[Variable],
          env: dict[Variable, Interval]) -> list[Interval]:
    """:func:`_evaluate`'s walk through the graph, ``env`` holding the inputs' enclosures."""
    for node in io_toposort(list(inputs), list(outputs)):
        for var in node.inputs:
            if var not in env:
                if isinstance(var, Constant):
                    value = np.asarray(var.data)
                    env[var] = (value, value)
                else:
                    raise ValueError(f"the graph input {var} has no interval")
        args = [env[v] for v in node.inputs]
        op = node.op
        if len(node.outputs) != 1:
            raise NoIntervalRule(type(op).__name__, "an op with several outputs")
        out = node.outputs[0]
        if (not out.type.dtype.startswith("float") and all(_exact(a) for a in args)
                and isinstance(op, (Elemwise, ps.ScalarOp, *_SHAPE, *_STRUCTURAL))):
            # integer or boolean values of exact inputs (shapes, data flags): exact
            value = np.asarray(_perform(node, [a[0] for a in args]))
            result = (value, value)
        elif isinstance(op, Elemwise):
            lo, hi = _scalar_rule(op.scalar_op, args, out.type.dtype)
            shape = np.broadcast_shapes(*(np.shape(a[0]) for a in args))
            if np.shape(lo) != shape or np.shape(hi) != shape:
                lo_b = np.broadcast_to(lo, shape)
                lo, hi = lo_b, lo_b if hi is lo else np.broadcast_to(hi, shape)
            result = (lo, hi)
        elif isinstance(op, ps.ScalarOp):
            result = _scalar_rule(op, args, out.type.dtype)
        elif isinstance(op, _SHAPE):
            value = np.asarray(_perform(node, [a[0] for a in args]))
            result = (value, value)
        elif isinstance(op, Sum):
            result = _sum(node, args)
        elif isinstance(op, _STRUCTURAL):
            # the non-value inputs (indices, shapes) must be exact
            lo = _perform(node, [a[0] for a in args])
            if all(_exact(a) for a in args):
                hi = lo
            else:
                hi = _perform(node, [a[1] for a in args])
            result = (np.asarray(lo), np.asarray(hi))
        else:
            raise NoIntervalRule(type(op).__name__)
        env[out] = result
    return [env[o] for o in outputs]


def evaluate_intervals(
    outputs: Sequence[Variable],
    inputs: dict[Variable, Interval | np.ndarray],
    env: dict[Variable, Interval] | None = None,
) -> list[Interval]:
    """Enclosures of ``outputs`` when each input ranges over its interval.

    Parameters
    ----------
    outputs : sequence of Variable
        Graphs of ``inputs`` (and constants) only.
    inputs : dict
        Each input's ``(lo, hi)`` arrays, or one array for an exact value (data).

    env : dict, optional
        Filled with every graph variable's enclosure (for :func:`undecided_comparisons`).

    Returns
    -------
    list of (lo, hi)
        ``lo ≤ v ≤ hi`` for every value ``v`` of each output over the input box, elementwise
        (valid in exact arithmetic: every float result is rounded outward).

    Raises
    ------
    NoIntervalRule
        Naming the first op on the way that has no rule.
    """
    names, enclosures = [], []
    for var, value in inputs.items():
        names.append(var)
        if isinstance(value, tuple):
            lo, hi = (np.asarray(v) for v in value)
        else:
            lo = hi = np.asarray(value)
        enclosures.append((lo, hi))
    return _evaluate(names, enclosures, outputs, env)


def undecided_comparisons(output: Variable, inputs: dict[Variable, Interval | np.ndarray],
                          comparisons: Sequence[Variable]) -> np.ndarray:
    """Where ``output``'s value depends on one of ``comparisons`` left undecided by the box.

    ``comparisons`` are boolean variables of the graph (a switch's condition, an inequality of
    a predictor cast to a number) across which ``output`` may jump or have a kink. A
    comparison is *live* on an element when it is undecided there (possibly true and possibly
    false over the box) and the output reads it: a ``switch`` whose condition the box decides
    (a condition on the row's data, such as a censored row's ``y = c``) passes on its
    selected branch's state only, the other branch's comparisons do not matter on that row;
    every other op passes on the state of any of its inputs (elementwise, or through the op
    itself for selections and sums).

    Returns
    -------
    numpy.ndarray of bool
        Shaped like ``output``'s enclosure: ``True`` where the output's value on the box
        depends on an undecided comparison.
    """
    env: dict[Variable, Interval] = {}
    evaluate_intervals([output], inputs, env)
    watched = set(comparisons)
    live: dict[Variable, np.ndarray] = {}

    def state(var: Variable) -> np.ndarray | bool:
        return live.get(var, False)

    for node in io_toposort(list(inputs), [output]):
        out = node.outputs[0]
        states = [state(v) for v in node.inputs]
        op = node.op
        if isinstance(op, Elemwise) and isinstance(op.scalar_op, ps.Switch):
            certain, possible = as_bool(env[node.inputs[0]])
            s_cond, s_a, s_b = states
            value = np.where(certain, s_a, np.where(~possible, s_b, s_a | s_b)) | s_cond
        elif isinstance(op, Elemwise | ps.ScalarOp):
            value = False
            for s in states:
                value = value | s
        elif not any(np.any(s) for s in states):
            value = False
        elif isinstance(op, _SHAPE):
            value = False
        else:
            # a selection, broadcast or sum: the op applied to the states (as the values'
            # dtypes), an element live where any element it reads is
            args = [np.broadcast_to(s, np.shape(env[v][0])).astype(v.type.dtype)
                    if v.type.dtype.startswith(("float", "bool")) else env[v][0]
                    for v, s in zip(node.inputs, states, strict=True)]
            value = np.asarray(_perform(node, args)) != 0
        if out in watched:
            certain, possible = as_bool(env[out])
            value = value | (certain != possible)
        if np.any(value):
            live[out] = np.asarray(value)
    return np.broadcast_to(state(output), np.shape(env[output][0]))



def _check_scalar(op) -> None:
    if isinstance(op, ps.Composite):
        for node in io_toposort(op.fgraph.inputs, op.fgraph.outputs):
            _check_scalar(node.op)
    elif not isinstance(op, ps.Cast | OwnRule) and type(op) not in RULES:
        raise NoIntervalRule(type(op).__name__)


def check_rules(outputs: Sequence[Variable], inputs: Sequence[Variable]) -> None:
    """Raise :class:`NoIntervalRule` naming the first op of the graph (from ``inputs`` to
    ``outputs``) with no rule, before any evaluation: a model is refused at construction."""
    for node in io_toposort(list(inputs), list(outputs)):
        op = node.op
        if isinstance(op, Elemwise):
            _check_scalar(op.scalar_op)
        elif isinstance(op, ps.ScalarOp):
            _check_scalar(op)
        elif not isinstance(op, (Sum, *_SHAPE, *_STRUCTURAL)):
            raise NoIntervalRule(type(op).__name__)


def piece_counts(pieces: int | Sequence[int], axes: int) -> tuple[int, ...]:
    """Parts per axis of :func:`piece_boxes`: ``pieces`` along each of ``axes`` axes, or
    ``pieces[j]`` along axis ``j``."""
    return (pieces,) * axes if isinstance(pieces, int | np.integer) else tuple(pieces)


def piece_boxes(centres: Sequence[np.ndarray], halves: Sequence[np.ndarray],
                pieces: int | Sequence[int]) -> list[Interval]:
    """The boxes ``[c_j − w_j, c_j + w_j]`` (arrays of ``n`` boxes, one centre and half-width
    per axis) bisected into ``pieces`` parts per axis (or ``pieces[j]`` along axis ``j``): per
    axis, the ends of the ``Π pieces · n`` parts, part by part (the ``m``-th part of every box
    at ``m n … (m+1) n``).

    Each end is widened outward past its few roundings, relative to ``|c| + 2w`` rather than
    to the end itself (which may cancel to about 0): the parts' union covers the box."""
    counts = piece_counts(pieces, len(centres))
    parts = list(np.ndindex(*counts))
    out = []
    for j, (c, w) in enumerate(zip(centres, halves, strict=True)):
        t = np.array([part[j] for part in parts], dtype=np.float64)[:, None]
        lo = c - w + 2.0 * w * (t / counts[j])
        hi = c - w + 2.0 * w * ((t + 1.0) / counts[j])
        slack = (np.abs(c) + 2.0 * np.abs(w)) * _PIECE_REL + _PIECE_ABS
        out.append(((lo - slack).ravel(), (hi + slack).ravel()))
    return out
