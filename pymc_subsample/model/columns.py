"""A row term with a small class axis, rewritten as one elementwise graph per row.

Several PyMC likelihoods compute a row's log density through an ``(n, K)`` array with a small,
static ``K``: a zero-inflated or mixture family's ``log Σ_k exp(log w_k + log p_k)`` (the
weights a ``MakeVector`` of a shared ``ψ``), a categorical's ``log softmax(logits)[y]``, an
ordinal model's ``log(σ(c_y − η) − σ(c_{y−1} − η))`` read off a vector of cutpoints. The
automatic bound (:mod:`pymc_subsample.model.predictors`) reads predictors that are one value
per row or one for all rows, so :func:`expand_class_axis` rewrites such a graph into ``K``
column vectors and the reductions over them into elementwise ops:

- an elementwise op of arrays is the op of their columns; a ``Join`` along the class axis
  concatenates columns; ``X @ B`` has the columns ``X @ B[:, k]``; a vector of ``K``
  parameters broadcast along the class axis (weights, cutpoints) has one scalar per column,
  read through ``MakeVector``, ``cumsum``, set-subtensors and elementwise ops;
- a sum over the class axis is the sum of the columns; ``log Σ_k exp(a_k)`` (a mixture) is
  written with ``L = log Σ_j exp(c_j)`` pivoted on one column (:func:`_log_sum_exp`: smooth,
  no ``max``), ``softmax`` and ``log_softmax`` with ``L`` as one op
  (:class:`~pymc_subsample.bounds.special_ops.LogSumExp`, whose derivatives are enclosed
  tightly);
- the row's own class ``a[i, y_i]`` (``take_along_axis`` by the data) is a ``switch`` on
  ``y_i = k``, decided exactly on every row since ``y`` is data;
- the shapes of the arrays are their static class counts and the number of rows.

The rewrite is exact (the same values, the same derivatives: a switch on data picks one
branch). Anything else with two axes that depends on the parameters is left alone, and the
predictor reader refuses it as before, naming the op.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Constant, Variable
from pytensor.scalar import basic as ps
from pytensor.tensor.basic import AllocEmpty, ARange, Join, MakeVector
from pytensor.tensor.elemwise import CAReduce, DimShuffle, Elemwise
from pytensor.tensor.extra_ops import CumOp
from pytensor.tensor.math import Dot
from pytensor.tensor.shape import Shape, Shape_i, SpecifyShape
from pytensor.tensor.special import LogSoftmax, Softmax
from pytensor.tensor.subtensor import (
    AdvancedSubtensor,
    IncSubtensor,
    Subtensor,
    indices_from_subtensor,
)

from pymc_subsample.bounds.special_ops import log_sum_exp

__all__ = ["NotExpandable", "expand_class_axis"]

#: class axes longer than this are not unrolled (a graph per class)
MAX_CLASSES = 32


class NotExpandable(ValueError):
    """A two-axis part of the row term this rewrite does not read (:attr:`op_name`)."""

    def __init__(self, op_name: str) -> None:
        self.op_name = op_name
        super().__init__(f"a two-axis array through {op_name}")


def _constant_int(var) -> int | None:
    if var is None:
        return None
    if isinstance(var, int | np.integer):
        return int(var)
    if isinstance(var, Constant) and np.ndim(var.data) == 0:
        return int(var.data)
    return None


class _Expander:
    """Memoised rewrite of one row graph (module docstring)."""

    def __init__(self, theta: Variable, n_rows: Variable) -> None:
        self.theta = theta
        self.n_rows = n_rows
        self._touch: dict[Variable, bool] = {}
        self._value: dict[Variable, bool] = {}
        self._vec: dict[Variable, Variable] = {}
        self._cols: dict[Variable, list[Variable]] = {}
        self._elems: dict[Variable, list[Variable]] = {}
        #: whether the row term sums over its classes (a mixture), not only picks one by y
        self.mixture = False

    def touches(self, var: Variable) -> bool:
        """Whether ``θ`` is an ancestor of ``var`` (through shapes too)."""
        if var not in self._touch:
            self._touch[var] = var is self.theta or (
                var.owner is not None and any(self.touches(v) for v in var.owner.inputs))
        return self._touch[var]

    def _classes(self, var: Variable) -> int:
        k = var.type.shape[-1]
        if k is None or k > MAX_CLASSES:
            raise NotExpandable(f"{var.owner.op if var.owner else var} (class axis of length "
                                f"{k}, not a static length ≤ {MAX_CLASSES})")
        return int(k)

    # ------------------------------------------------------------------ vectors and scalars
    def vec(self, var: Variable) -> Variable:
        """``var`` (at most one axis) rebuilt on expanded inputs."""
        if not self.touches(var) or var.owner is None:
            return var
        if var not in self._vec:
            self._vec[var] = self._vec_node(var)
        return self._vec[var]

    def _vec_node(self, var: Variable) -> Variable:
        node = var.owner
        op = node.op
        wide = [v for v in node.inputs if v.type.ndim >= 2 and self._depends_by_value(v)]
        if isinstance(op, Shape | Shape_i) and node.inputs[0].type.ndim >= 2:
            return self._shape(node)
        summed = _sum_of_exp(node.inputs[0])
        if isinstance(getattr(op, "scalar_op", None), ps.Log) and summed is not None \
                and self._depends_by_value(summed):
            # log Σ_k exp(a_k) over the class axis (a mixture's row density)
            self.mixture = True
            return self._as(var, _log_sum_exp(self.cols(summed)))
        if not wide:
            inputs = [self.vec_matrix(v) if v.type.ndim >= 2 else self.vec(v)
                      for v in node.inputs]
            if all(a is b for a, b in zip(inputs, node.inputs, strict=True)):
                return var
            return node.op.make_node(*inputs).outputs[node.outputs.index(var)]
        (x, *rest) = node.inputs
        if isinstance(op, CAReduce) and isinstance(op.scalar_op, ps.Add) \
                and x.type.ndim == 2 and tuple(op.axis or ()) in ((1,), (-1,)):
            cols = self.cols(x)
            out = cols[0]
            for c in cols[1:]:
                out = out + c
            return self._as(var, out)
        if isinstance(op, DimShuffle) and x.type.ndim == 2 and op.drop == [1] \
                and tuple(op.new_order) == (0,):
            return self._as(var, self.cols(x)[0])
        if isinstance(op, Subtensor) and x.type.ndim == 2:
            (first, second) = _indices(node)
            k = _constant_int(second)
            if first == slice(None) and k is not None:
                return self._as(var, self.cols(x)[k])
        raise NotExpandable(type(op).__name__)

    def _shape(self, node) -> Variable:
        x = node.inputs[0]
        dims = []
        for s in x.type.shape:
            dims.append(pt.constant(s, dtype="int64") if s is not None else self.n_rows)
        shape = pt.stack([pt.cast(d, "int64") for d in dims])
        if isinstance(node.op, Shape_i):
            return shape[node.op.i]
        return shape

    def _as(self, var: Variable, out: Variable) -> Variable:
        """``out`` broadcast to the row vector ``var`` stands for."""
        out = pt.cast(out, var.type.dtype)
        if out.type.ndim < var.type.ndim:
            out = pt.broadcast_to(out, (self.n_rows,))
        return out

    # ------------------------------------------------------------------ class columns
    def cols(self, var: Variable) -> list[Variable]:
        """The ``K`` columns of a two-axis ``var`` (rows × classes), each a row vector, a
        length-1 vector or a scalar."""
        if var.type.ndim != 2:
            raise NotExpandable(f"{var} of {var.type.ndim} axes")
        if var not in self._cols:
            self._cols[var] = self._cols_node(var)
        return self._cols[var]

    def _data_cols(self, var: Variable) -> list[Variable]:
        k = self._classes(var)
        v = self.vec_matrix(var)
        return [v[:, j] for j in range(k)]

    def vec_matrix(self, var: Variable) -> Variable:
        """A two-axis ``var`` that does not depend on ``θ`` by value (data, constants, an
        index built from the data and shapes), rebuilt with its shapes read statically."""
        if not self.touches(var) or var.owner is None:
            return var
        node = var.owner
        inputs = [self.vec_matrix(v) if v.type.ndim >= 2 else self.vec(v) for v in node.inputs]
        return node.op.make_node(*inputs).outputs[node.outputs.index(var)]

    def _depends_by_value(self, var: Variable) -> bool:
        if var not in self._value:
            self._value[var] = var is self.theta or (
                var.owner is not None and not isinstance(var.owner.op, Shape | Shape_i)
                and any(self._depends_by_value(v) for v in var.owner.inputs))
        return self._value[var]

    def _cols_node(self, var: Variable) -> list[Variable]:
        if not self._depends_by_value(var):
            return self._data_cols(var)
        node = var.owner
        op = node.op
        k_out = self._classes(var)
        if isinstance(op, Elemwise):
            per_input = [self._broadcast_cols(v, k_out) for v in node.inputs]
            return [op(*ins) for ins in zip(*per_input, strict=True)]
        if isinstance(op, SpecifyShape):
            return self.cols(node.inputs[0])
        if isinstance(op, Join):
            axis = _constant_int(node.inputs[0])
            if axis not in (1, -1):
                raise NotExpandable("Join (not along the class axis)")
            return [c for part in node.inputs[1:] for c in self.cols(part)]
        if isinstance(op, DimShuffle):
            (x,) = node.inputs
            order = tuple(op.new_order)
            if x.type.ndim == 1 and order == (0, "x"):
                return [self.vec(x)]
            if x.type.ndim == 1 and order == ("x", 0):
                return self.elems(x)
            if order == ("x", "x") and all(x.type.broadcastable):
                # a scalar, or a length-one vector whose axis the DimShuffle drops
                return [self.vec(x if x.type.ndim == 0 else x.squeeze())]
            raise NotExpandable(f"DimShuffle{order}")
        if isinstance(op, Subtensor):
            first, second = _indices(node)
            if first == slice(None) and isinstance(second, slice):
                bounds = [_constant_int(b) if b is not None else None
                          for b in (second.start, second.stop, second.step)]
                if all(b is not None or s is None for b, s in
                       zip(bounds, (second.start, second.stop, second.step), strict=True)):
                    return self.cols(node.inputs[0])[slice(*bounds)]
            raise NotExpandable("Subtensor (not a constant slice of classes)")
        if isinstance(op, Dot):
            x, b = node.inputs
            if self._depends_by_value(x) or b.type.ndim != 2:
                raise NotExpandable("Dot (parameters on the left)")
            return [pt.dot(self.vec_matrix(x), b[:, j]) for j in range(k_out)]
        if isinstance(op, Softmax | LogSoftmax) and op.axis in (1, -1):
            cols = self.cols(node.inputs[0])
            # one op for log Σ_k e^{c_k}: its derivatives are the softmax weights, each enclosed
            # on its exact range (bounds/special_ops.py), where the weights written as
            # quotients of the same exponentials are enclosed loosely. The logits are finite
            # (no −∞ column to guard, unlike a mixture's)
            log_total = log_sum_exp(*cols)
            if isinstance(op, LogSoftmax):
                return [c - log_total for c in cols]
            return [pt.exp(c - log_total) for c in cols]
        if isinstance(op, AdvancedSubtensor):
            return [self._take_along_classes(node)]
        raise NotExpandable(type(op).__name__)

    def _broadcast_cols(self, var: Variable, k_out: int) -> list[Variable]:
        """Columns of an elementwise input: a matrix's, a vector's elements (it broadcasts
        along the class axis), a scalar repeated."""
        if var.type.ndim == 2:
            cols = self.cols(var)
        elif var.type.ndim == 1:
            cols = self.elems(var)
        else:
            cols = [self.vec(var)]
        if len(cols) == 1 and k_out != 1:
            cols = cols * k_out
        if len(cols) != k_out:
            raise NotExpandable(f"an elementwise op of {len(cols)} and {k_out} classes")
        return cols

    def _take_along_classes(self, node) -> Variable:
        """``a[arange(n)[:, None], j]`` with ``j`` (rows × 1) data: the class ``j_i`` of each
        row as a switch on ``j_i = k`` (decided on every row: ``j`` is exact)."""
        a, rows, which = node.inputs
        if not (isinstance(rows.owner and rows.owner.op, DimShuffle)
                and tuple(rows.owner.op.new_order) == (0, "x")
                and isinstance(rows.owner.inputs[0].owner and rows.owner.inputs[0].owner.op,
                               ARange)):
            raise NotExpandable("AdvancedSubtensor (not one class per row)")
        start, _stop, step = rows.owner.inputs[0].owner.inputs
        if _constant_int(start) != 0 or _constant_int(step) != 1 or which.type.ndim != 2 \
                or which.type.shape[1] != 1 or self._depends_by_value(which):
            raise NotExpandable("AdvancedSubtensor (not one class per row)")
        cols = self.cols(a)
        j = self.vec_matrix(which)[:, 0]
        out = cols[-1]
        for k in range(len(cols) - 2, -1, -1):
            out = pt.switch(pt.eq(j, k), cols[k], out)
        return out

    # ------------------------------------------------------------------ parameter vectors
    def elems(self, var: Variable, partial: bool = False) -> list[Variable]:
        """The scalars of a vector of static length that runs along the class axis (None
        for an element of an empty array not yet set, only if ``partial``)."""
        if var not in self._elems:
            self._elems[var] = self._elems_node(var)
        if not partial and any(e is None for e in self._elems[var]):
            raise NotExpandable("IncSubtensor (an element left unset)")
        return self._elems[var]

    def _elems_node(self, var: Variable) -> list[Variable]:
        k = self._classes(var)
        node = var.owner
        op = node.op if node is not None else None
        if isinstance(op, MakeVector):
            return [self.vec(v) for v in node.inputs]
        if isinstance(op, SpecifyShape) and node.inputs[0].type.shape[-1] is not None:
            return self.elems(node.inputs[0])
        if isinstance(op, Elemwise) and self._depends_by_value(var):
            per_input = []
            for v in node.inputs:
                e = self.elems(v) if v.type.ndim == 1 else [self.vec(v)]
                per_input.append(e * k if len(e) == 1 else e)
            return [op(*ins) for ins in zip(*per_input, strict=True)]
        if isinstance(op, CumOp) and op.mode == "add" and op.axis in (0, -1, None):
            out, total = [], None
            for e in self.elems(node.inputs[0]):
                total = e if total is None else total + e
                out.append(total)
            return out
        if isinstance(op, IncSubtensor) and op.set_instead_of_inc:
            x, y, *idx = node.inputs
            (where,) = indices_from_subtensor(idx, op.idx_list)
            base = [None] * k if isinstance(x.owner and x.owner.op, AllocEmpty) \
                else list(self.elems(x, partial=True))
            positions = list(range(k))
            if isinstance(where, slice):
                bounds = [_constant_int(b) if b is not None else None
                          for b in (where.start, where.stop, where.step)]
                chosen = positions[slice(*bounds)]
                values = self.elems(y) if y.type.ndim == 1 else [self.vec(y)] * len(chosen)
            else:
                at = _constant_int(where)
                if at is None:
                    raise NotExpandable("IncSubtensor (not a constant index)")
                chosen, values = [positions[at]], [self.vec(y)]
            if len(values) != len(chosen):
                raise NotExpandable("IncSubtensor")
            for p, v in zip(chosen, values, strict=True):
                base[p] = v
            return base  # an element still unset is None: refused where it is read
        if isinstance(op, Join) and _constant_int(node.inputs[0]) in (0, -1):
            return [e for part in node.inputs[1:] for e in self.elems(part)]
        # any other vector of the parameters: its elements, read by index
        rebuilt = self.vec(var)
        return [rebuilt[j] for j in range(k)]


def _sum_of_exp(x: Variable) -> Variable | None:
    """``a`` when ``x`` is ``Σ_k exp(a_k)`` over the class axis of a two-axis ``a``."""
    node = x.owner
    if not (node is not None and isinstance(node.op, CAReduce)
            and isinstance(node.op.scalar_op, ps.Add) and tuple(node.op.axis or ()) in ((1,),)):
        return None
    inner = node.inputs[0]
    if inner.type.ndim == 2 and isinstance(getattr(inner.owner and inner.owner.op,
                                                   "scalar_op", None), ps.Exp):
        return inner.owner.inputs[0]
    return None


def _log_sum_exp(cols: list[Variable]) -> Variable:
    r"""``log Σ_k exp(c_k)`` pivoted on the last column,
    :math:`c_K + \log(1 + \sum_{k<K} e^{c_k - c_K})` (``c_K + softplus(c_1 − c_K)`` for two),
    whose derivatives carry the weights :math:`e^{c_k - c_K}` once: a column that is
    ``−∞`` on a row (a zero-inflated family's point mass at a positive count) then adds
    exactly nothing, where ``Σ e^{c_k}/Σ e^{c_k}`` would be enclosed loosely. A row whose
    last column is ``−∞`` takes the other columns' (a switch on data, decided exactly)."""
    if len(cols) == 1:
        return cols[0]
    *rest, last = cols
    if len(rest) == 1:
        pivoted = last + pt.softplus(rest[0] - last)
    else:
        total = pt.exp(rest[0] - last)
        for c in rest[1:]:
            total = total + pt.exp(c - last)
        pivoted = last + pt.log1p(total)
    return pt.switch(pt.isinf(last), _log_sum_exp(rest), pivoted)


def _indices(node) -> tuple:
    indices = indices_from_subtensor(node.inputs[1:], node.op.idx_list)
    return tuple(indices) + (slice(None),) * (2 - len(indices))


def expand_class_axis(graph: Variable, theta: Variable,
                      n_rows: Variable) -> tuple[Variable, bool]:
    """``graph`` (one value per row) with its two-axis parts that depend on ``theta``
    rewritten as class columns (module docstring), ``graph`` itself if it has none; and
    whether the row term sums over its classes (a mixture's ``log Σ_k exp``), where picking
    one class per row by the data (a categorical or ordinal row) is not a mixture.

    Raises
    ------
    NotExpandable
        Naming the op of a two-axis part that depends on ``theta`` and is not read here.
    """
    expander = _Expander(theta, n_rows)
    if not any(v.type.ndim >= 2 and expander.touches(v) and expander._depends_by_value(v)
               for v in _ancestors(graph)):
        return graph, False
    out = expander.vec(graph)
    return out, expander.mixture


def _ancestors(graph: Variable) -> list[Variable]:
    seen, stack = set(), [graph]
    while stack:
        var = stack.pop()
        if var in seen:
            continue
        seen.add(var)
        if var.owner is not None:
            stack.extend(var.owner.inputs)
    return list(seen)
