"""Two ops for graphs run as NumPy calls (the setup's NumPy mode): a block's rows gathered as
one copy of a slice when they are consecutive, and a matrix–vector product as one.

A data pass hands its compiled function consecutive row blocks (``idx = start..stop-1``).
PyTensor gathers ``X[idx]`` by fancy indexing, which reads the index and the rows element by
element (2.0 ms for 65,536 rows of ten float64, against 0.4 ms for copying the slice), and
computes ``X[idx] @ θ`` as ``Dot22`` of an ``(n, 1)`` column, a general matrix product (2.3 ms
against 1.2 ms for NumPy's matrix–vector product on the same rows). :class:`TakeRows` and
:class:`MatVec` are those faster forms; the rewrites :func:`take_rows` and :func:`matrix_vector`
put them in the setup's NumPy mode (:data:`pymc_subsample.model.likelihood._NUMPY_MODE`).
Both release Python's GIL in NumPy, as the ops they replace do, so a pass's threads overlap.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.graph.rewriting.basic import node_rewriter
from pytensor.tensor.blas import Dot22
from pytensor.tensor.elemwise import DimShuffle
from pytensor.tensor.math import Dot
from pytensor.tensor.subtensor import AdvancedSubtensor

__all__ = ["MatVec", "TakeRows", "matrix_vector", "take_rows"]


class TakeRows(Op):
    """``x[idx]`` along the first axis for an int vector ``idx``: a copy of the slice
    ``x[idx[0]:idx[-1] + 1]`` when ``idx`` counts up by one from a row inside ``x``, else
    ``np.take`` (negative indices count from the end; out of range raises ``IndexError``,
    as PyTensor's own indexing). Always a new array, never a view of ``x``."""

    __props__ = ()

    def make_node(self, x, idx):
        x, idx = pt.as_tensor_variable(x), pt.as_tensor_variable(idx)
        out = x.type.clone(shape=(idx.type.shape[0], *x.type.shape[1:]))()
        return Apply(self, [x, idx], [out])

    def perform(self, node, inputs, output_storage):
        x, idx = inputs
        n = idx.shape[0]
        start = int(idx[0]) if n else 0
        consecutive = (n > 0 and 0 <= start and start + n <= x.shape[0]
                       and int(idx[-1]) == start + n - 1
                       and (n < 3 or bool(np.all(np.diff(idx) == 1))))
        output_storage[0][0] = (x[start : start + n].copy() if consecutive
                                else np.take(x, idx, axis=0))

    def infer_shape(self, fgraph, node, shapes):
        return [(shapes[1][0], *shapes[0][1:])]


class MatVec(Op):
    """``a @ v`` for a matrix ``a`` and a vector ``v`` of one float dtype: NumPy's
    matrix–vector product."""

    __props__ = ()

    def make_node(self, a, v):
        a, v = pt.as_tensor_variable(a), pt.as_tensor_variable(v)
        return Apply(self, [a, v], [pt.vector(dtype=a.type.dtype, shape=(a.type.shape[0],))])

    def perform(self, node, inputs, output_storage):
        a, v = inputs
        output_storage[0][0] = np.asarray(np.dot(a, v), dtype=node.outputs[0].type.dtype)

    def infer_shape(self, fgraph, node, shapes):
        return [(shapes[0][0],)]


@node_rewriter([AdvancedSubtensor])
def take_rows(fgraph, node):
    """``x[idx]`` with one int vector ``idx`` (the first axis) as :class:`TakeRows`."""
    if type(node.op) is not AdvancedSubtensor or len(node.inputs) != 2:
        return None
    x, idx = node.inputs
    if idx.type.ndim != 1 or idx.type.dtype not in ("int64", "int32") or x.type.ndim < 1:
        return None
    out = TakeRows()(x, idx)
    return [out] if out.type.dtype == node.outputs[0].type.dtype else None


@node_rewriter([DimShuffle])
def matrix_vector(fgraph, node):
    """``squeeze(a @ expand_dims(v, 1), 1)`` (how PyTensor writes a matrix times a vector) as
    :class:`MatVec`."""
    op = node.op
    if op.input_ndim != 2 or tuple(op.new_order) != (0,):
        return None
    product = node.inputs[0].owner
    if product is None or not isinstance(product.op, Dot22 | Dot):
        return None
    a, column = product.inputs
    expand = column.owner
    if (expand is None or not isinstance(expand.op, DimShuffle)
            or expand.op.input_ndim != 1 or tuple(expand.op.new_order) != (0, "x")):
        return None
    v = expand.inputs[0]
    dtype = node.outputs[0].type.dtype
    if a.type.ndim != 2 or a.type.dtype != dtype or v.type.dtype != dtype:
        return None
    return [MatVec()(a, v)]
