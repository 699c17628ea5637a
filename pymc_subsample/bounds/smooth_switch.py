r"""A marker on the condition of a switch between two formulas of one smooth function.

PyMC computes a Normal's log-CDF (``normal_lcdf``) as
``switch(z < −1, log(erfcx(−z/√2)/2) − z²/2, log1p(−erfc(z/√2)/2))``: both branches are
``log Φ(z)`` exactly, on the whole line, and the switch only picks the one that is accurate in
floating point. The row term is then analytic across ``z = −1``; a switch between two
*different* functions is not (a kink or a jump), and the Taylor remainder bound of MHSS does
not hold across it. The automatic bound (:mod:`~pymc_subsample.bounds.automatic`) must tell the
two apart, and a graph rewrite would lose any mark put on the switch node itself (rewrites
rebuild switches, push ``log`` into them, and take their gradients as new switches). So the
mark is on the *condition*: ``switch(smooth_condition(z < −1), a, b)``.
:class:`SmoothCondition` is the identity on booleans, which no rewrite knows, so it stays on
the condition through PyTensor's rewrites and derivatives; the model layer puts it only on the
switches it has recognised as one of PyMC's stabilised functions
(:mod:`pymc_subsample.model.smooth_switches`), by rebuilding that function with PyMC's own
code and comparing the graphs.

What the mark asserts is a property of the row term ``f`` as a function: it is analytic
across the condition's surface. Value-preserving rewrites keep that true, even where they split
the switch into pieces (its derivative ``switch(c, a′, 0) + switch(c, 0, b′)``), so the
interval enclosure of any derivative graph of ``f`` may take a switch on a marked condition
that is undecided on a box as the union of its two branches' enclosures
(:func:`~pymc_subsample.bounds.interval_rules.RULES`' switch rule). That union is valid when
each branch is enclosed on the *whole* box, not only on the part where it is selected: the
natural interval extension is inclusion-isotone, so a branch's enclosure on the box contains
its values on any part of it, in particular on the part where it is the function's.
"""

from __future__ import annotations

from pytensor import config
from pytensor.scalar import basic as ps
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.variable import TensorVariable

__all__ = ["SmoothCondition", "is_smooth_condition", "smooth_condition"]


class SmoothCondition(ps.UnaryScalarOp):
    """The identity on a switch's boolean condition, marking the switch as one between two
    formulas of the same analytic function (module docstring). ``source`` names the PyMC
    function the switch was recognised as (``normal_lcdf``, ...)."""

    __props__ = ("source",)
    #: evaluated as one NumPy call (``np.copy``) outside C: the setup's NumPy-mode passes
    #: (:data:`pymc_subsample.model.likelihood.NUMPY_PASS_ROWS`) need a ufunc-like function
    nfunc_spec = ("copy", 1, 1)

    def __init__(self, source: str) -> None:
        super().__init__(ps.same_out, name=f"smooth_condition[{source}]")
        self.source = source

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self.source == other.source

    def __hash__(self) -> int:
        return hash((type(self), self.source))

    def impl(self, x):
        return x

    def c_code(self, node, name, inputs, outputs, sub) -> str:
        (x,) = inputs
        (z,) = outputs
        return f"{z} = {x};"

    def c_code_cache_version(self) -> tuple[int, ...]:
        return (1,)

    def grad(self, inputs, output_gradients):
        (x,) = inputs
        return [x.zeros_like(dtype=config.floatX)]


def smooth_condition(cond: TensorVariable, source: str) -> TensorVariable:
    """``cond`` marked as the condition of a switch between two formulas of one function."""
    return Elemwise(SmoothCondition(source))(cond)


def is_smooth_condition(var) -> bool:
    """Whether ``var`` is a condition marked by :func:`smooth_condition`."""
    owner = getattr(var, "owner", None)
    return owner is not None and isinstance(getattr(owner.op, "scalar_op", None),
                                            SmoothCondition)
