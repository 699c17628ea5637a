"""Predictors read off any row log-density: the automatic bound's model layer.

For an observed variable no hand-derived family reads (:mod:`pymc_subsample.model.glm`), its
rebuilt row log-likelihood ``ℓ_i(θ)`` (:attr:`SubsampledLikelihood.block_terms`) is split into
``f(p_1, ..., p_K; data_i)`` and ``K`` predictors ``p_j``: the maximal sub-expressions of the
graph that depend on ``θ`` and are affine in it (``X @ b``, ``b[g]``, the log-transformed
value of a positive parameter, whose ``exp`` stays in ``f``), each one value per row or one
scalar for all rows. The row data ``f`` reads (observations, trials, flags, data-only
expressions) become its data inputs. The bound then comes from ``f``'s own graph
(:class:`~pymc_subsample.bounds.automatic.AutomaticFamily`). Hand-derived families stay the
fast path: :func:`detect_predictor_terms` is asked only when they do not read the model
(:func:`pymc_subsample.model.setup.glm_data_pass`).

Refused, naming the variable: a row term that reaches ``θ`` through something that is not a
row-shaped or scalar affine predictor (a cutpoint vector indexed by ``y``, ``X @ tanh(b)``),
a kink of a predictor (``abs``), or an op the interval evaluator has no rule for.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.rewriting.basic import in2out
from pytensor.graph.rewriting.utils import rewrite_graph
from pytensor.graph.traversal import graph_inputs, io_toposort
from pytensor.scalar import basic as ps
from pytensor.tensor.basic import Alloc, Join, MakeVector
from pytensor.tensor.elemwise import CAReduce, DimShuffle, Elemwise
from pytensor.tensor.math import Dot
from pytensor.tensor.shape import Reshape, Shape, Shape_i, SpecifyShape
from pytensor.tensor.subtensor import AdvancedSubtensor, AdvancedSubtensor1, Subtensor

from pymc_subsample.bounds.automatic import AutomaticFamily, NonSmoothRow
from pymc_subsample.bounds.dispersion_ops import LogRisingFactorial, NegativeBinomialZeroRate
from pymc_subsample.bounds.interval import NoIntervalRule
from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.model.columns import NotExpandable, expand_class_axis
from pymc_subsample.model.glm import rows_of_affine, simplify_log, unsupported
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.model.predictor_forms import (
    constant_value,
    drop_check,
    exp_forms,
    rising_factorial_forms,
    scalar_op,
)

__all__ = ["PredictorTerm", "check_finite_suprema", "detect_predictor_terms"]


@dataclass(frozen=True)
class PredictorTerm:
    """An observed variable read as ``f(p_1..p_K; data)`` with affine predictors ``p_j``.

    The location–scale pass and control variates use it as a
    :class:`~pymc_subsample.model.location_scale.LocationScaleTerm`: predictors, their rows
    ``∂p_j/∂θ``, ``y`` and the per-row inputs ``params`` of the family's ``f`` (here its row data).
    """

    name: str
    family: AutomaticFamily
    predictors: tuple[Variable, ...]
    predictor_rows: tuple[Variable, ...]
    y: Variable
    params: tuple[Variable, ...]
    #: every predictor is affine (:attr:`~pymc_subsample.model.glm.GLMTerm.curvature`)
    curvature: ClassVar[None] = None


def _simplify(f: Variable, predictors: Sequence[Variable] = (),
              data: Sequence[Variable] = ()) -> Variable:
    """``f`` with logs of products, powers and exponentials split (as the hand-derived
    families' predictors are read), powers and quotients of ``exp`` folded, and a
    ``log Γ(y + e^λ)`` of a count ``y`` among ``data`` and a predictor ``λ`` as
    :func:`~pymc_subsample.model.predictor_forms.rising_factorial_forms` writes it."""
    f = rewrite_graph(f, include=(), custom_rewrite=in2out(exp_forms, ignore_newtrees=False))
    # log(e^a + e^b) stays as written: its stabilised form max(a, b) + log1p(e^{−|a − b|})
    # is smooth, but through a kink of each piece (a mixture's or zero-inflated family's row)
    exclude = ("local_log_add_exp", "local_log_sum_exp")
    f = simplify_log(f, exclude=exclude)
    # once more, for the forms the split logs made: a − log(e^a + e^b) → −softplus(b − a)
    # (twice: a rewrite's output, once canonicalised, can be the input of another, as the
    # T = e^λ·softplus(η − λ) inside a hurdle's log1mexp(−T))
    rising = rising_factorial_forms(set(predictors), set(data))
    for _ in range(2):
        f = rewrite_graph(f, include=(), custom_rewrite=in2out(exp_forms, rising,
                                                               ignore_newtrees=False))
        f = rewrite_graph(f, include=("canonicalize",), exclude=exclude)
    return f


#: elementwise ops through which a predictor stays affine when every input is
_LINEAR = (ps.Add, ps.Sub, ps.Neg, ps.Identity)
#: ops that select, copy or rearrange an affine input
_SELECT = (Subtensor, AdvancedSubtensor, AdvancedSubtensor1, DimShuffle, Reshape, SpecifyShape,
           Alloc)


class _Reader:
    """Which variables of a row graph depend on ``θ`` (by value), and which are affine."""

    def __init__(self, theta: Variable, rows: set[Variable]) -> None:
        self.theta = theta
        self.rows = rows  # the row inputs: idx and the gathered pms.Data rows
        self._on: dict[tuple[Variable, str], bool] = {}
        self._affine: dict[Variable, bool] = {}

    def depends(self, var: Variable, on: str = "theta") -> bool:
        """Whether ``var``'s value depends on ``θ`` (``on="theta"``) or on the rows."""
        key = (var, on)
        if key not in self._on:
            if on == "theta" and var is self.theta or on == "rows" and var in self.rows:
                value = True
            elif var.owner is None or isinstance(var.owner.op, Shape | Shape_i):
                value = False
            else:
                inputs = var.owner.inputs
                if isinstance(var.owner.op, Alloc):
                    inputs = inputs[:1]
                elif isinstance(scalar_op(var), ps.Second):  # fill(x, v): v, x's shape
                    inputs = inputs[1:]
                value = any(self.depends(v, on) for v in inputs)
            self._on[key] = value
        return self._on[key]

    def affine(self, var: Variable) -> bool:
        """A conservative structural test: sums, differences, selections, reshapes and
        products with ``θ``-free factors of ``θ`` (confirmed later by
        :func:`~pymc_subsample.model.glm.rows_of_affine`)."""
        if not self.depends(var):
            return True
        if var is self.theta:
            return True
        if var not in self._affine:
            self._affine[var] = self._affine_node(var)
        return self._affine[var]

    def _affine_node(self, var: Variable) -> bool:
        node = var.owner
        if node is None or not var.type.dtype.startswith("float"):
            return False
        op, inputs = node.op, node.inputs
        if isinstance(op, _SELECT):
            return self.affine(inputs[0]) and not any(self.depends(v) for v in inputs[1:])
        if isinstance(op, Join | MakeVector):
            return all(self.affine(v) for v in inputs)
        if isinstance(op, CAReduce) and isinstance(op.scalar_op, ps.Add):
            return self.affine(inputs[0])
        if isinstance(op, Dot):
            return (sum(self.depends(v) for v in inputs) == 1
                    and all(self.affine(v) for v in inputs))
        if not isinstance(op, Elemwise):
            return False
        scalar = op.scalar_op
        if isinstance(scalar, _LINEAR) or isinstance(scalar, ps.Cast):
            return all(self.affine(v) for v in inputs)
        if isinstance(scalar, ps.Second):
            return self.affine(inputs[1])
        if isinstance(scalar, ps.Mul):
            return (sum(self.depends(v) for v in inputs) == 1
                    and all(self.affine(v) for v in inputs))
        if isinstance(scalar, ps.TrueDiv):
            return self.affine(inputs[0]) and not self.depends(inputs[1])
        return False


def _core(var: Variable) -> Variable:
    """A predictor without the broadcasts around it (one key for ``s`` and ``s[None]``)."""
    while var.owner is not None and (
        isinstance(var.owner.op, DimShuffle | SpecifyShape | Alloc)
        or isinstance(scalar_op(var), ps.Second)
    ):
        inputs = var.owner.inputs
        inner = inputs[1] if isinstance(scalar_op(var), ps.Second) else inputs[0]
        if inner.type.ndim != 0:  # only a scalar's broadcasts are stripped
            break
        var = inner
    return var


def _maximal(graph: Variable, accept, descend) -> list[Variable]:
    """The maximal sub-expressions ``v`` of ``graph`` with ``accept(v)``, looking inside
    those with ``descend(v)`` only."""
    found, seen, stack = [], set(), [graph]
    while stack:
        var = stack.pop()
        if var in seen:
            continue
        seen.add(var)
        if accept(var):
            found.append(var)
        elif descend(var) and var.owner is not None and not isinstance(var.owner.op,
                                                                          Shape | Shape_i):
            stack.extend(var.owner.inputs)
    return found


def _substitute(name: str, graph: Variable, replace: dict[Variable, Variable]) -> Variable:
    """``graph`` with the predictors replaced by row vectors: a scalar (or length-1)
    predictor becomes one value per row, carried through elementwise ops; the broadcast that
    made it a row (``s[None]``) then is the row vector itself."""
    new: dict[Variable, Variable] = dict(replace)
    for node in io_toposort(list(replace), [graph]):
        inputs = [new.get(v, v) for v in node.inputs]
        if all(a is b for a, b in zip(inputs, node.inputs, strict=True)):
            continue
        promoted = [v for v, w in zip(node.inputs, inputs, strict=True)
                    if w is not v and w.type.ndim != v.type.ndim]
        op = node.op
        if (isinstance(op, DimShuffle) and promoted and node.inputs[0].type.ndim == 0
                and node.outputs[0].type.ndim == 1):
            out = [inputs[0]]
        elif isinstance(op, Elemwise) or not promoted:
            try:
                out = op.make_node(*inputs).outputs
            except (TypeError, ValueError) as err:
                raise unsupported(name, f"its row term uses a predictor through "
                                  f"{type(op).__name__} in a way not read here ({err})") from None
        else:
            raise unsupported(
                name, f"its row term reaches a parameter shared by all rows through "
                f"{type(op).__name__}, not elementwise (MHSS bounds row terms whose parameters "
                "enter through affine predictors, one value per row or one for all rows)")
        for old, value in zip(node.outputs, out, strict=True):
            new[old] = value
    return new.get(graph, graph)


def _dist_name(block) -> str:
    return type(block.rv.owner.op).__name__.removesuffix("RV")


#: the refusal of a row term that is not a function of row-wise or scalar affine predictors
_NOT_PREDICTORS = (
    "its row term reaches the sampled parameters other than through predictors affine in "
    "them with one value per row or one for all rows (eta = X @ b, b[g], a log-transformed "
    "scale): through {what}. Write the likelihood in such predictors"
)


def _check_shapes(lik: SubsampledLikelihood, name: str, predictors: list[Variable]) -> None:
    """Each predictor is one value per row or a scalar: checked on 3 rows at the initial
    point (a static shape of ``N`` is not there after the rebuild on ``idx``)."""
    fn = lik.compile([lik.theta, lik.idx], [p.shape for p in predictors], once=True)
    theta = lik.ravel(lik.initial_point)
    n = min(lik.n_rows, 7)
    for var, shape in zip(predictors, fn(theta, np.arange(n, dtype=np.int64)), strict=True):
        shape = tuple(int(s) for s in shape)
        if shape not in ((), (1,), (n,)):
            raise unsupported(name, _NOT_PREDICTORS.format(
                what=f"{var} of shape {shape} on {n} rows (a vector of parameters, or one "
                     "indexed by the data such as cutpoints, is not read yet)"))


#: the refusal of a row term that switches between formulas on an inequality of its predictors
_SWITCHES = (
    "its row term (a {dist}) switches between formulas on an inequality of its predictors, "
    "through {where}: the automatic bound needs every such switch decided on each row's whole "
    "box around the reference point, which fails on the rows whose box reaches a switch "
    "point"
)

#: Most predictors of a row term read through a class axis (:mod:`.columns`): the zero-inflated
#: Poisson's two (η, ψ) build in seconds; the zero-inflated negative binomial's three (η,
#: log α, ψ) did not finish in ten minutes with its row term as PyMC writes it, and its whole
#: MHSS setup took 75 s at N = 20,000 (loaded) once the term is simplified
#: (:func:`_simplify`: PyMC's ``0·log 0`` guards on ``e^η`` dropped, the negative binomial's
#: ``log Γ(y + α) − log Γ(α)`` and ``α log(α/(α + μ))`` as single ops).
MAX_MIXTURE_PREDICTORS = 3
#: Parts per axis the boxes of a row term through the negative binomial's dispersion ops
#: (:class:`~pymc_subsample.bounds.dispersion_ops.LogRisingFactorial`,
#: :class:`~pymc_subsample.bounds.dispersion_ops.NegativeBinomialZeroRate`) are bisected into:
#: their enclosures are exact op by op, but the third derivatives combine several of them on
#: the box of log α, as wide as its posterior is uncertain. A hurdle negative binomial at
#: N = 20,000 read 531 rows per iteration with 1 piece, 13.3 with 4 (one run of 300 draws).
DISPERSION_PIECES = 4
#: Most predictors of a row term that picks its class by the data (through a class axis, with
#: the derivatives above the second order left unsimplified): an ordinal logit's η and
#: cutpoints, a multinomial logit's K − 1 linear predictors. Four (four ordered classes) build
#: in under a minute at N = 3,000 (more were not measured); the derivative graphs grow with the
#: number of multi-indices (126 of the fourth order in five predictors).
MAX_CLASS_PREDICTORS = 4


def detect_predictor_terms(lik: SubsampledLikelihood, order: int = 2) -> list[PredictorTerm]:
    """Every observed variable of ``lik`` as ``f(p_1..p_K; data)`` with affine predictors.

    Raises
    ------
    SubsamplingModelError
        Naming the variable and the reason: a part of the row term that reaches ``θ`` but is
        neither an affine predictor (one value per row, or one scalar) nor an elementwise
        function of such predictors, a kink of a predictor, or an op without an interval rule.
    """
    rows = {lik.idx, *(r for r, _ in lik.gathered.values())}
    n_rows = lik.idx.shape[0]
    terms = []
    for block, graph in zip(lik.blocks, lik.block_terms, strict=True):
        name = block.name
        graph = rewrite_graph(pt.cast(graph, "float64"), include=("canonicalize",),
                              custom_rewrite=in2out(drop_check))
        try:
            terms.append(_predictor_term(lik, block, graph, rows, order, expanded=False))
            continue
        except SubsamplingModelError as err:
            if block.value.type.ndim > 1:
                raise
            as_written = err
        # a small class axis (a mixture's weights, one observation per row) as columns: only
        # where the row term as written is not read, so that what was read stays as it was
        try:
            columns, mixture = expand_class_axis(graph, lik.theta, n_rows)
        except NotExpandable as err:
            raise unsupported(name, _NOT_PREDICTORS.format(what=str(err))) from None
        if columns is graph:
            raise as_written
        # the row's own class (a switch on y) and the ordinal interval probabilities in their
        # monotone forms before the predictors are read: c_k − η, c_{k−1} − c_k, ... cancel
        columns = rewrite_graph(
            rewrite_graph(columns, include=(),
                          custom_rewrite=in2out(exp_forms, ignore_newtrees=False)),
            include=("canonicalize",))
        terms.append(_predictor_term(lik, block, columns, rows, order, expanded=True,
                                     mixture=mixture))
    return terms


def _predictor_term(lik: SubsampledLikelihood, block, graph: Variable, rows: set,
                    order: int, *, expanded: bool, mixture: bool = False) -> PredictorTerm:
    """One observed variable's row term ``graph`` as ``f(p_1..p_K; data)``
    (:func:`detect_predictor_terms`); ``expanded``: ``graph`` went through
    :func:`~pymc_subsample.model.columns.expand_class_axis`, ``mixture``: it sums over the
    classes there."""
    name = block.name
    n_rows = lik.idx.shape[0]
    reader = _Reader(lik.theta, rows)
    found = _maximal(graph, lambda v, r=reader: r.depends(v) and r.affine(v),
                     lambda v, r=reader: r.depends(v))
    if not found:
        raise unsupported(name, "its row term does not depend on the sampled parameters")
    found = _unscaled(found, reader)
    for var in found:
        if var.type.ndim > 1:
            raise unsupported(name, _NOT_PREDICTORS.format(
                what=f"an array of {var.type.ndim} axes ({var})"))
    cores: list[Variable] = []
    for var in found:
        if _core(var) not in cores:
            cores.append(_core(var))
    _check_shapes(lik, name, cores)
    if expanded and not mixture and len(cores) > MAX_CLASS_PREDICTORS:
        raise unsupported(
            name, f"its row term picks its class by the data (a categorical or ordinal "
            f"likelihood) through {len(cores)} predictors; the automatic bound builds its "
            f"derivatives for at most {MAX_CLASS_PREDICTORS} (an ordinal model with at most "
            f"{MAX_CLASS_PREDICTORS - 1} cutpoints, a multinomial logit with at most "
            f"{MAX_CLASS_PREDICTORS + 1} classes)")
    if mixture and len(cores) > MAX_MIXTURE_PREDICTORS:
        # a zero-inflated negative binomial (η, α and ψ): PyTensor's simplification of
        # its third derivatives ran for over ten minutes at N = 3,000
        raise unsupported(
            name, f"its row term mixes classes (a zero-inflated or mixture likelihood) "
            f"through {len(cores)} predictors; the automatic bound builds its derivatives "
            f"for at most {MAX_MIXTURE_PREDICTORS} (their graphs grow too large to "
            "simplify in reasonable time)")
    # the predictors with one value per row first (the shared-scale bound's order)
    cores.sort(key=_is_shared)
    placeholders = [pt.vector(f"p{j}", dtype="float64") for j in range(len(cores))]
    by_core = dict(zip(cores, placeholders, strict=True))
    replace = {var: pt.cast(by_core[_core(var)], var.type.dtype) for var in found}
    f = _substitute(name, graph, replace)
    if reader.depends(f) and lik.theta in _all_inputs(f):
        raise unsupported(name, "its row term depends on the parameters beyond its "
                          "affine predictors in a way not read here")
    # the row data f reads: its maximal parameter-free sub-expressions that read rows
    placeholder_set = set(placeholders)
    leaves = _row_data(f, placeholder_set, _Reader(lik.theta, rows))
    for var in leaves:
        if var.type.ndim > 1:
            raise unsupported(
                name, f"its row term reads row data with {var.type.ndim} axes through "
                "its parameters (one value per row is needed)")
    data = [var.type(f"data{k}") for k, var in enumerate(leaves)]
    f = _substitute(name, f, dict(zip(leaves, data, strict=True)))
    # log(a^k) → k log a, log(e^a) → a, ...: fewer repeated variables, tighter enclosures
    f = _simplify(f, placeholders, data)
    stray = [v for v in _all_inputs(f) if not isinstance(v, Constant)
             and v not in placeholder_set and v not in set(data)]
    if stray:
        raise unsupported(name, f"its row term reads {stray[0]}, neither row data nor a "
                          "constant, beside its predictors")
    dispersion = any(isinstance(node.op, Elemwise)
                     and isinstance(node.op.scalar_op, _DISPERSION_OPS)
                     for node in io_toposort([*placeholders, *data], [f]))
    try:
        family = AutomaticFamily(
            f, placeholders, data, name=f"automatic_{_dist_name(block).lower()}",
            description=f"{_dist_name(block)} rows bounded from their graph in "
                        f"{len(placeholders)} affine predictor(s)",
            pieces=DISPERSION_PIECES if dispersion else 1)
        family.check_row_rules()
        if expanded and not mixture and family.inequality_switches:
            # a switch between formulas on an inequality of the class predictors: its
            # derivatives in all the classes' predictors take minutes to build, and every row
            # whose box reaches the switch point would have no bound anyway
            raise unsupported(name, _SWITCHES.format(
                dist=_dist_name(block), where="a class axis picked by the data"))
        family.check_rules(order)
    except NonSmoothRow as err:
        raise unsupported(name, f"its row term takes {err.op_name} of a parameter, which "
                          "has no Taylor bound (a kink)") from None
    except NoIntervalRule as err:
        raise unsupported(
            name, f"its row term (a {_dist_name(block)}) goes through the op "
            f"{err.op_name}, which the automatic bound has no interval rule for") from None
    predictors = tuple(pt.cast(pt.broadcast_to(c, (n_rows,)), "float64") for c in cores)
    # a predictor shared by all rows (ψ, log α, a scale) has one row ∂p/∂θ, not n copies of
    # it: the pass broadcasts it, and sums its products in O(n) (LocationScalePass._term_sums)
    derived = tuple(pt.cast(pt.reshape(c, (1,)), "float64") if _is_shared(c) else p
                    for c, p in zip(cores, predictors, strict=True))
    try:
        predictor_rows = tuple(rows_of_affine(name, p, lik.theta) for p in derived)
    except SubsamplingModelError:
        raise unsupported(name, "a part of its row term read as a predictor is not affine "
                          "in the sampled parameters") from None
    return PredictorTerm(name, family, predictors, predictor_rows, block.value,
                         tuple(leaves))


#: the negative binomial's dispersion ops (:data:`DISPERSION_PIECES`)
_DISPERSION_OPS = (LogRisingFactorial, NegativeBinomialZeroRate)


def _is_shared(core: Variable) -> bool:
    """Whether a predictor is one value for all rows (a scalar or a length-1 vector)."""
    return core.type.ndim == 0 or core.type.shape == (1,)


def _unscaled(found: list[Variable], reader: _Reader) -> list[Variable]:
    """``found`` with a product ``y·q`` of row data and another predictor ``q`` read as
    ``q`` (``y`` stays in the row term): a Poisson's ``y·log μ = y·η`` beside its ``e^η``
    is one predictor ``η``, not two. Likewise a sum or difference of predictors found on their
    own elsewhere is read as its parts: an ordinal row's ``c_k − η`` beside ``η`` and ``c_k``
    (``c_k`` a cutpoint), so that each cutpoint and ``η`` are one predictor each, not one per
    combination. A constant multiple ``c·q`` (``−q`` among them) is read as ``q``: a
    truncated Normal's ``(a − μ)/σ`` appears as ``−μ``, ``−μ/√2`` and ``μ/√2`` after
    PyTensor's rewrites, one predictor ``μ`` (then ``y − μ`` beside it is ``μ`` too). Two
    offsets ``c ± q`` of the same ``q`` by θ-free terms (a constant, row data) are read as
    ``q``: a truncated Normal's ``a − μ`` and ``y − μ``, one predictor ``μ``."""
    out = list(found)
    changed = True
    while changed:
        changed = False
        cores = {_core(v) for v in out}
        offsets = Counter(_core(q) for v in out if (q := _offset_of(v, reader)) is not None)
        new: list[Variable] = []
        for var in out:
            scalar = scalar_op(var)
            parts = [var]
            moving = ([v for v in var.owner.inputs if reader.depends(v)]
                      if isinstance(scalar, ps.Mul | ps.Add | ps.Sub | ps.Neg) else [])
            if isinstance(scalar, ps.Mul):
                # y·q with q found elsewhere, or c·q with a constant c (the same q scaled by
                # PyMC's 1/√2 in erfcx(−z/√2) beside z itself): q, one predictor
                others = [v for v in var.owner.inputs if v not in moving]
                if len(moving) == 1 and _core(moving[0]) is not var and (
                        _core(moving[0]) in cores
                        or all(constant_value(v) is not None for v in others)):
                    parts = moving
            elif isinstance(scalar, ps.Neg):
                parts = moving
            elif moving and any(_core(v) in cores and _core(v) is not var for v in moving):
                parts = moving
            elif (isinstance(scalar, ps.Add | ps.Sub) and len(moving) == 1
                  and offsets[_core(moving[0])] > 1):
                # a − μ and y − μ (a truncated Normal's normaliser and density), both
                # offsets of one μ: read as μ, so that the derivatives of the two parts are
                # taken in one variable and cancel where they do (for μ far below a, the
                # normaliser's (a − μ)²/2σ² against the density's (y − μ)²/2σ²), rather
                # than bounded apart as two predictors
                parts = moving
            elif (isinstance(scalar, ps.Add | ps.Sub) and len(moving) == 1
                  and _scaled_elsewhere(moving[0], cores, reader)):
                # y·q − log y! (a Poisson's terms once PyMC's guard on e^η = 0 is gone) with q
                # found elsewhere: y·q, then q; the row data stay in the row term
                parts = moving
            changed |= parts != [var]
            new.extend(v for v in parts if v not in new)
        out = new
    return out


def _offset_of(var: Variable, reader: _Reader) -> Variable | None:
    """``q`` when ``var`` is ``c ± q`` (or ``q ± c``) with ``c`` free of ``θ`` (a constant or
    row data) and ``q`` its one input that depends on ``θ``; else ``None``."""
    if not isinstance(scalar_op(var), ps.Add | ps.Sub):
        return None
    moving = [v for v in var.owner.inputs if reader.depends(v)]
    return moving[0] if len(moving) == 1 else None


def _scaled_elsewhere(var: Variable, cores: set[Variable], reader: _Reader) -> bool:
    """Whether ``var`` is ``y·q`` of row data ``y`` and a predictor ``q`` found elsewhere."""
    if not isinstance(scalar_op(var), ps.Mul):
        return False
    moving = [v for v in var.owner.inputs if reader.depends(v)]
    return len(moving) == 1 and _core(moving[0]) in cores


def _row_data(f: Variable, placeholders: set[Variable], reader: _Reader) -> list[Variable]:
    """The maximal sub-expressions of ``f`` free of the predictors that read the rows."""
    memo: dict[Variable, bool] = {}

    def has_predictor(v: Variable) -> bool:
        if v not in memo:
            memo[v] = v in placeholders or (
                v.owner is not None and any(has_predictor(w) for w in v.owner.inputs))
        return memo[v]

    return _maximal(f, lambda v: not has_predictor(v) and reader.depends(v, "rows"),
                    has_predictor)


def _all_inputs(graph: Variable) -> list[Variable]:
    return list(graph_inputs([graph]))


#: a derivative bound above this is refused (:func:`check_finite_suprema`)
HUGE_SUPREMUM = 1e30


def check_finite_suprema(term, suprema: dict, y: np.ndarray) -> None:
    """Refuse, naming the variable, a row whose derivative suprema are not finite on its box
    (an automatic bound whose box reaches a pole or an undecided switch of the row term)."""
    bad = ~np.isfinite(np.stack([np.broadcast_to(v, np.shape(y)) for v in suprema.values()]))
    if np.any(bad):
        row = int(np.argmax(bad.any(axis=0)))
        if term.family.inequality_switches:
            # rows whose box reaches a stabilised log-CDF's switch (a Tobit's normal_lcdf at
            # z = −1), the usual cause; a pole is possible too, and named with it
            raise unsupported(term.name, _SWITCHES.format(
                dist=term.family.name.removeprefix("automatic_"),
                where=f"its log-CDF or a similar stabilised function (on "
                      f"{int(bad.any(axis=0).sum())} row(s) of a block, the first with y = "
                      f"{np.asarray(y).ravel()[row]!r}, the box reaches a switch point or a "
                      "pole; the switches are checked on every row, also where the row's data "
                      "select another branch, such as a censored row's)"))
        raise unsupported(
            term.name, f"the derivatives of its row term have no finite bound on the region "
            f"around the reference point on {int(bad.any(axis=0).sum())} row(s) of a block "
            f"(the first with y = {np.asarray(y).ravel()[row]!r}): the row's predictors can "
            "reach a pole, the edge of the support or a switch of the row term there")
    huge = np.stack([np.broadcast_to(v, np.shape(y)) for v in suprema.values()]) > HUGE_SUPREMUM
    if np.any(huge):
        # finite but useless: the row constants (float32) would overflow, and every move
        # would read all rows anyway
        raise unsupported(
            term.name, f"the derivatives of its row term are bounded only by values above "
            f"{HUGE_SUPREMUM:.0e} on the region around the reference point, on "
            f"{int(huge.any(axis=0).sum())} row(s) of a block: the rows' predictor boxes "
            "are too wide for a useful bound (usually a posterior wide in some direction the "
            "likelihood does not identify: give it a reference level or a tighter prior)")
