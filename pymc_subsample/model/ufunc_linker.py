"""A PyTensor linker that runs a graph as NumPy calls, compiling nothing: for small functions
called at every iteration, where C code would cost more to compile than it saves.

PyTensor's Python linker (``"py"``, the ``FAST_COMPILE`` mode) runs each node's ``perform``;
an elementwise node's ``perform`` checks its inputs' broadcasting, enters ``np.errstate`` and
copies its output, about 10 µs a node on a few numbers where the ufunc itself takes well under
one. :class:`UfuncLinker` calls the ufunc that PyTensor declares for the op
(``Elemwise.nfunc_spec``) directly, in the output dtype PyTensor infers, and leaves every other
node to its ``perform``; one ``np.errstate`` covers the whole call. A prior's ``log p0`` (a
handful of nodes) then costs a few µs a call, where its C code costs a few tenths of a second
to compile with a warm PyTensor cache and about a second with an empty one (two C modules).

The likelihood's ``_UFUNC_MODE`` (:mod:`pymc_subsample.model.likelihood`) pairs it with
PyTensor's ``FAST_RUN`` rewrites except those that make C code (fusion of elementwise loops,
in-place variants, BLAS) and with the package's rewrites of ops NumPy has no ufunc for. The
mode is named (a registered linker and a rewrite query), so functions compiled in it pickle.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from pytensor.compile.mode import register_linker
from pytensor.graph.basic import Apply
from pytensor.link.basic import Container, PerformLinker
from pytensor.link.utils import map_storage, streamline
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.utils import import_func_from_string

__all__ = ["UFUNC_LINKER", "UfuncLinker", "ufunc_thunk"]

#: The name :class:`UfuncLinker` is registered under (``Mode(linker=UFUNC_LINKER)``).
UFUNC_LINKER = "pymc_subsample_ufunc"


def ufunc_thunk(node: Apply, inputs: list, outputs: list) -> Callable[[], None] | None:
    """A thunk calling the NumPy ufunc of an elementwise ``node`` on its storage cells, or
    None when the node has none (or one of another arity, or runs in place).

    The ufunc computes in the node's output dtype (``dtype=``) when NumPy would pick another
    for these input dtypes (an int8 ``y`` times a float64: NumPy agrees; ``log`` of an int8:
    NumPy would compute in float16), as PyTensor's own ``perform`` does; a 0-d result is an
    array, as PyTensor stores it.
    """
    op = node.op
    spec = op.nfunc_spec
    if (spec is None or spec[1] != len(node.inputs) or spec[2] != 1
            or len(node.outputs) != 1 or op.inplace_pattern):
        return None
    ufunc = import_func_from_string(spec[0])
    if not isinstance(ufunc, np.ufunc):
        return None
    out_dtype = np.dtype(node.outputs[0].type.dtype)
    try:
        numpy_dtype = ufunc.resolve_dtypes(
            (*(np.dtype(i.type.dtype) for i in node.inputs), None))[-1]
    except (TypeError, ValueError):  # no loop for these dtypes
        return None
    (out,) = outputs
    if numpy_dtype != out_dtype or node.outputs[0].type.ndim == 0:
        def thunk():
            out[0] = np.asarray(ufunc(*[c[0] for c in inputs], dtype=out_dtype))
    elif len(inputs) == 1:
        (a,) = inputs

        def thunk():
            out[0] = ufunc(a[0])
    elif len(inputs) == 2:
        a, b = inputs

        def thunk():
            out[0] = ufunc(a[0], b[0])
    else:
        def thunk():
            out[0] = ufunc(*[c[0] for c in inputs])
    return thunk


class UfuncLinker(PerformLinker):
    """:class:`~pytensor.link.basic.PerformLinker` with each elementwise node that has a NumPy
    ufunc run as a direct call of it (:func:`ufunc_thunk`); no garbage collection of
    intermediate values between calls (they are a few numbers)."""

    def __init__(self) -> None:
        super().__init__(allow_gc=False)

    def accept(self, fgraph, no_recycling=None, profile=None) -> UfuncLinker:
        if self.fgraph is not None and self.fgraph is not fgraph:
            return type(self)().accept(fgraph, no_recycling, profile)
        return super().accept(fgraph, no_recycling, profile)

    def make_all(self, input_storage=None, output_storage=None, storage_map=None):
        fgraph = self.fgraph
        order = self.schedule(fgraph)
        input_storage, output_storage, storage_map = map_storage(
            fgraph, order, input_storage, output_storage, storage_map)
        compute_map = {v: [v.owner is None] for v in storage_map}
        thunks = []
        for node in order:
            ins = [storage_map[v] for v in node.inputs]
            outs = [storage_map[v] for v in node.outputs]
            thunk = ufunc_thunk(node, ins, outs) if isinstance(node.op, Elemwise) else None
            if thunk is None:
                thunk = node.op.make_thunk(node, storage_map, compute_map, [], "py")
            thunk.inputs, thunk.outputs = ins, outs
            thunks.append(thunk)
        no_recycling = [storage_map[v] for v in self.no_recycling if v not in fgraph.inputs]
        run_thunks = streamline(fgraph, thunks, order, None, no_recycling=no_recycling)

        def run():
            with np.errstate(all="ignore"):  # as C code: inf and NaN, never warnings
                run_thunks()

        run.allow_gc = False
        run.storage_map = storage_map
        return (
            run,
            [Container(v, s) for v, s in zip(fgraph.inputs, input_storage, strict=True)],
            [Container(v, s, readonly=True)
             for v, s in zip(fgraph.outputs, output_storage, strict=True)],
            thunks,
            order,
        )


register_linker(UFUNC_LINKER, UfuncLinker())
