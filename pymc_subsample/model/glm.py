"""Find generalised-linear-model structure in a PyMC model: the family, the link and the
linear predictors of each observed variable.

MHSS needs ``|ξ_i(θ, θ')| ≤ c_i · M(θ, θ')`` (Prado, Nemeth & Sherlock 2024, eq. (3)). For a
GLM row ``ℓ_i(θ) = f(η_i(θ); y_i)`` with an affine linear predictor ``η_i(θ) = x_iᵀθ + o_i``
Corollary 2 gives ``c_i = L(y_i)·‖x_i‖^{k+1}`` for Taylor order ``k``. This module asks each
family registered in :mod:`pymc_subsample.bounds` (the list is there, one object per family
and link; ``docs/methods/mhss.md``, "The bound") to read its observed variable, then checks
that ``η`` is affine in the sampled vector ``θ`` or a product of two parameters (quadratic):
:func:`detect_glm_terms`. Rows with a location, a log-scale and further predictors (a Normal or
Student-t with a sampled σ, a negative binomial with a sampled α) are read by
:mod:`pymc_subsample.model.location_scale`, with this module's affinity checks. The passes
over the data that use these terms are in :mod:`pymc_subsample.model.passes`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import Rop, disconnected_grad
from pytensor.graph.basic import Variable
from pytensor.graph.replace import graph_replace, vectorize_graph
from pytensor.graph.rewriting.basic import in2out, node_rewriter
from pytensor.graph.rewriting.utils import rewrite_graph
from pytensor.graph.traversal import ancestors, applys_between
from pytensor.scalar.basic import Exp, Log, Mul, Pow, Reciprocal, Second, TrueDiv
from pytensor.tensor.basic import Alloc
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.math import Dot
from pytensor.tensor.shape import Shape, Shape_i
from pytensor.tensor.variable import TensorConstant

from pymc_subsample.bounds import (
    Family,
    LocationScaleFamily,
    location_scale_families,
    registered,
    scalar_op,
)
from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.model.levels import (
    LevelLayout,
    find_level_factor,
    find_level_factors,
    reads_levels,
)
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.model.rebuild import distribution_name

__all__ = [
    "GLMTerm",
    "depends_on_parameters",
    "detect_glm_terms",
    "dist_name",
    "family_terms",
    "fixed_per_row",
    "not_affine",
    "rows_of_affine",
    "simplify_log",
    "unsupported",
    "weighted_curvature",
]


@dataclass(frozen=True)
class GLMTerm:
    """One observed variable recognised as a GLM on the rows ``idx``.

    Attributes
    ----------
    name : str
        The observed variable.
    family : Family
        Its family and link (:mod:`pymc_subsample.bounds`); ``family.name`` is one of
        :data:`pymc_subsample.bounds.FAMILIES`.
    eta : Variable
        Linear predictor on the rows ``idx`` as a graph of ``θ``.
    y : Variable
        Observed values on the rows ``idx``.
    params : tuple of Variable
        The family's fixed parameters (:attr:`Family.params`) on the rows ``idx``, broadcast.
    rows : Variable or None
        ``∂η_i/∂θ`` as an ``(n, d)`` graph, free of ``θ`` when ``η`` is affine
        (:func:`rows_of_affine`); None when the rows are split by levels (:attr:`split`).
    curvature : Variable or None
        ``∂²η_i/∂θ²`` as an ``(n, d, d)`` graph free of ``θ`` when ``η`` is quadratic in ``θ``
        (a product of two parameters); None when it is affine.
    """

    name: str
    family: Family
    eta: Variable
    y: Variable
    params: tuple[Variable, ...]
    rows: Variable | None
    curvature: Variable | None = None
    #: the rows split by one grouping factor's levels (:func:`_split_rows`), or None
    split: LevelSplit | None = None


@dataclass(frozen=True)
class LevelSplit:
    """An affine predictor ``η_i = x_{F,i}ᵀθ_F + t_i u_{k_i} + o_i`` as graphs on the rows
    ``idx``: ``fixed_rows`` ``(n, d_F)``, ``level`` (``k_i``) and ``value`` (``t_i``), with the
    layout of the levels in ``θ`` (:mod:`pymc_subsample.model.levels`).

    With a second grouping factor read as ``v[h]`` (crossed random intercepts,
    ``+ r_i v_{l_i}``), its levels stay in the fixed block but not in ``fixed_rows``:
    ``second_columns`` are their positions among the fixed coordinates, ``level2`` and
    ``value2`` give ``l_i`` and ``r_i`` (:class:`~pymc_subsample.model.levels.SecondLevels`).
    """

    layout: LevelLayout
    fixed_rows: Variable
    level: Variable
    value: Variable
    second_columns: slice | None = None
    level2: Variable | None = None
    value2: Variable | None = None


def unsupported(name: str, what: str) -> SubsamplingModelError:
    supported = "; ".join(f.description for f in (*registered(), *location_scale_families()))
    return SubsamplingModelError(
        f"MHSS has no automatic bound for observed variable '{name}': {what}. Bounded by hand, "
        f"each with eta affine in the parameters: {supported}; and, from the model's graph, "
        "any row term whose parameters enter through predictors affine in them (one value per "
        "row or one for all rows) and whose ops have interval rules (docs/methods/mhss.md, "
        "'Automatic bounds'). Pass your own bound with MHSS(bound=pms.UserBound(...)), or use "
        "AusterityMH or BarkerMinibatch, which need no bound."
    )


def depends_on_parameters(var: Variable, lik: SubsampledLikelihood) -> bool:
    values = set(lik.value_vars)
    return any(v in values for v in ancestors([var]))


def fixed_per_row(
    name: str, fam: Family | LocationScaleFamily, fixed: tuple[Variable, ...],
    lik: SubsampledLikelihood, refusal: str,
) -> tuple[Variable, ...]:
    """A family's fixed parameters, one float64 value per row of ``idx``; refused, naming the
    variable, when one depends on the sampled parameters (``refusal`` says why, with ``{param}``
    and ``{family}`` filled in)."""
    for param_name, value in zip(fam.params, fixed, strict=True):
        if depends_on_parameters(value, lik):
            raise unsupported(name, refusal.format(param=param_name, family=fam.description))
    n_rows = lik.idx.shape[0]
    return tuple(pt.cast(pt.broadcast_to(v, (n_rows,)), "float64") for v in fixed)


def dist_name(op) -> str:
    return type(op).__name__.removesuffix("RV")


def detect_glm_terms(lik: SubsampledLikelihood) -> list[GLMTerm]:
    """Recognise every observed variable of ``lik`` as a supported GLM, or raise.

    Each registered family of the variable's distribution is asked in turn to read its
    predictor and fixed parameters (:meth:`Family.read`); the first that does is checked:
    its fixed parameters must not depend on the sampled ones, and its predictor (after
    simplifying ``log`` of products and exponentials) must be affine in them, or quadratic
    (a product of two: :mod:`pymc_subsample.bounds.quadratic`).

    Raises
    ------
    SubsamplingModelError
        Naming the variable, when its family or link has no bound here.
    """
    n_rows = lik.idx.shape[0]
    terms = []
    for block in lik.blocks:
        if block.value.type.ndim != 1:
            raise unsupported(
                block.name,
                f"its observations have {block.value.type.ndim - 1} trailing axes (one linear "
                "predictor per row is needed); reshape it into one observed variable per column",
            )
        op = block.rv.owner.op
        candidates = [f for f in registered() if isinstance(op, f.rv_op)]
        if not candidates:
            raise unsupported(block.name, f"its family is {distribution_name(block.rv)}")
        dist_params = op.dist_params(block.rv.owner)
        for fam in candidates:
            read = fam.read(dist_params)
            if read is not None:
                break
        else:
            links = " or ".join(f.description for f in candidates)
            raise unsupported(block.name, f"its {dist_name(op)} is not {links}")
        eta, fixed = read
        params = fixed_per_row(
            block.name, fam, fixed, lik,
            "its Normal sigma is a sampled parameter and another observed variable is not such "
            "a Normal (MHSS bounds a sampled sigma when every observed variable is one)"
            if fam.name == "normal_identity" else
            "its {param} depends on the sampled parameters (MHSS bounds {family})",
        )
        (eta_theta,) = lik.in_theta([simplify_log(pt.broadcast_to(eta, (n_rows,)))])
        # one variable on many levels: its split rows are checked affine themselves, and the
        # dense rows' basis (a d × d identity, 800 MB at 10⁴ levels) is never built
        split = _split_rows(eta_theta, lik.theta) if len(lik.blocks) == 1 else None
        if split is not None:
            terms.append(GLMTerm(block.name, fam, eta_theta, block.value, params, None,
                                 split=split))
            continue
        try:
            rows, curvature = _predictor_derivatives(block.name, eta_theta, lik.theta)
        except SubsamplingModelError:
            if fam.link_hint is None:
                raise
            raise unsupported(block.name, fam.link_hint) from None
        terms.append(GLMTerm(block.name, fam, eta_theta, block.value, params, rows, curvature))
    return terms


def _split_rows(eta: Variable, theta: Variable) -> LevelSplit | None:
    """The affine ``eta``'s rows split by one grouping factor (:class:`LevelSplit`), or None
    when it has none (:func:`~pymc_subsample.model.levels.find_level_factor`); by two when a
    second factor (the next most levels, two or more:
    :func:`~pymc_subsample.model.levels.find_level_factors`) is read the same way, else by
    the first alone."""
    first = find_level_factor(eta, theta)
    if first is None:
        return None
    factors = find_level_factors(eta, theta)
    lay = first[0]
    second = next((f for f in factors[1:]
                   if f[0].stop <= lay.start or lay.stop <= f[0].start), None)
    split = _split_by(eta, theta, first, second) if second is not None else None
    return split if split is not None else _split_by(eta, theta, first, None)


def _split_by(eta: Variable, theta: Variable, first: tuple, second: tuple | None
              ) -> LevelSplit | None:
    """The split by the factors ``first`` (and ``second``), as found by
    :func:`~pymc_subsample.model.levels.find_level_factors`; None when ``η`` does not read
    them as the split needs.

    Each selection ``u[g]`` is replaced by a free vector ``v``; ``η`` must then read no level
    coordinate of either, and depend on each ``v`` row by row (elementwise ops only), so
    ``t_i = ∂η_i/∂v_i`` (free of ``θ`` and ``v``: ``η`` is affine) and ``x_F`` the
    derivatives along the other fixed coordinates.
    """
    factors = [first] if second is None else [first, second]
    free = [selected.type(f"level_effect{j}") for j, (_, selected, _) in enumerate(factors)]
    (eta_v,) = graph_replace([eta], {f[1]: v for f, v in zip(factors, free, strict=True)},
                             strict=False)
    for (lay, _, _), v in zip(factors, free, strict=True):
        if reads_levels(eta_v, theta, lay) or not all(
                isinstance(node.op, Elemwise) for node in applys_between([v], [eta_v])
                if v in ancestors(node.inputs)):
            return None
    values = [Rop(eta_v, v, pt.ones_like(v), use_op_rop_implementation=False) for v in free]
    layout = first[0]
    fixed = layout.fixed
    columns = None
    if second is not None:
        lay2 = second[0]
        in_second = (fixed >= lay2.start) & (fixed < lay2.stop)
        start = int(np.argmax(in_second))
        columns = slice(start, start + lay2.n_levels)
        fixed = fixed[~in_second]
    direction = theta.type("direction")
    along = Rop(eta_v, theta, direction, use_op_rop_implementation=False)
    basis = pt.constant(np.eye(layout.dim)[fixed])
    fixed_rows = rewrite_graph(vectorize_graph(along, {direction: basis}).T,
                               include=("canonicalize",),
                               custom_rewrite=in2out(_product_with_selection))
    if any({theta, *free} & _value_ancestors(g) for g in (*values, fixed_rows)):
        return None
    # each v may remain for its shape only: the selection's shape it is
    *values, fixed_rows = graph_replace(
        [*values, fixed_rows], {v: f[1] for f, v in zip(factors, free, strict=True)},
        strict=False)
    n_rows = eta.shape[0]
    values = [pt.cast(pt.broadcast_to(v, (n_rows,)), "float64") for v in values]
    if second is None:
        return LevelSplit(layout, pt.cast(fixed_rows, "float64"), first[2], values[0])
    return LevelSplit(layout, pt.cast(fixed_rows, "float64"), first[2], values[0],
                      columns, second[2], values[1])


@node_rewriter([Elemwise])
def _split_log_node(fgraph, node):
    """``log`` of a product, quotient, power or exponential as a sum of simpler terms.

    ``log(a·b) → log a + log b``, ``log(a/b) → log a − log b``, ``log(1/a) → −log a``,
    ``log(a^k) → k log a``, ``log(e^a) → a``: so that a mean ``t·exp(Xβ)`` or a scale
    ``exp(Xβ)/α`` gives a predictor whose affinity the rewrites can see. Where a factor is
    negative the new graph is NaN, and the family check of every pass refuses it.
    """
    if not isinstance(node.op.scalar_op, Log):
        return None
    (x,) = node.inputs
    op = scalar_op(x)
    if isinstance(op, Exp):
        out = x.owner.inputs[0]
    elif isinstance(op, Mul):
        out = pt.add(*(pt.log(v) for v in x.owner.inputs))
    elif isinstance(op, TrueDiv):
        a, b = x.owner.inputs
        out = pt.log(a) - pt.log(b)
    elif isinstance(op, Reciprocal):
        out = -pt.log(x.owner.inputs[0])
    elif isinstance(op, Pow):
        a, k = x.owner.inputs
        out = k * pt.log(a)
    else:
        return None
    return [pt.cast(pt.broadcast_to(out, node.outputs[0].shape), node.outputs[0].dtype)]


def simplify_log(graph: Variable, exclude: tuple[str, ...] = ()) -> Variable:
    graph = rewrite_graph(graph, include=(),
                          custom_rewrite=in2out(_split_log_node, ignore_newtrees=False))
    return rewrite_graph(graph, include=("canonicalize", "stabilize"), exclude=exclude)


def family_terms(term: GLMTerm, eta: Variable) -> tuple[Variable, Variable, Variable]:
    """``f(η_i; y_i)``, ``f'(η_i; y_i)`` and ``f''(η_i; y_i)`` per row, as graphs of a given ``η``.

    The family's closed forms (:meth:`pymc_subsample.bounds.Family.terms`): small graphs that
    compile in a fraction of the time of their autodiff, in the data pass and in the control
    variates. ``f'_i`` depends on ``η_i`` alone, so the gradient of ``Σ f'_i`` is ``f''``.
    :class:`GLMPass` checks that ``Σ f`` equals the model's own log-likelihood.
    """
    y = pt.cast(term.y, "float64")
    f, f1, f2 = term.family.terms(pt.cast(eta, "float64"), y, *term.params)
    return tuple(pt.cast(pt.broadcast_to(v, eta.shape), "float64") for v in (f, f1, f2))


def rows_of_affine(name: str, eta: Variable, theta: Variable) -> Variable:
    """``∂η_i/∂θ`` as an (n, d) matrix: forward-mode derivatives along the d unit vectors.

    (Reverse mode would build an n×n identity; forward mode batched over the basis is one
    product with the data, and a copy when that product is with the identity or a slice of it:
    :func:`_product_with_selection`.)

    Raises
    ------
    SubsamplingModelError
        If ``η`` is not affine in ``θ``: its derivative still depends on ``θ`` once the graph
        is simplified (a conservative test: it cannot pass a predictor that is not affine).
    """
    rows = _rows_graph(eta, theta)
    if theta in _value_ancestors(rows):
        raise not_affine(name)
    return rows


def _predictor_derivatives(
    name: str, eta: Variable, theta: Variable
) -> tuple[Variable, Variable | None]:
    """``(∂η_i/∂θ, None)`` for an affine predictor, ``(∂η_i/∂θ, ∂²η_i/∂θ²)`` for a quadratic
    one (the rows then depend on ``θ``, the ``(n, d, d)`` curvature does not).

    Raises
    ------
    SubsamplingModelError
        If ``η`` is neither: its second derivatives still depend on ``θ``.
    """
    rows = _rows_graph(eta, theta)
    if theta not in _value_ancestors(rows):
        return rows, None
    curvature = _curvature_graph(eta, theta)
    if theta in _value_ancestors(curvature):
        raise not_affine(name)
    return rows, curvature


def not_affine(name: str) -> SubsamplingModelError:
    return unsupported(
        name, "its linear predictor is not affine in the sampled parameters, nor quadratic (a "
        "product of two parameters on the whole line, with Normal priors say, is read, with "
        "bounds on a region; a positive parameter is sampled as its log, so a product with one "
        "is not quadratic, nor is a product of three or a nonlinear function). A non-centred "
        "group effect s * z[g], with z ~ Normal of constant parameters and s a scalar with a "
        "positive prior such as HalfNormal, is sampled as u = s * z; or write the effect "
        "centred, u = pm.Normal('u', 0, s, shape=G) and eta = X @ b + u[g], which is affine"
    )


def _over_basis(graph: Variable, direction: Variable) -> Variable:
    """``graph`` at each unit vector in place of ``direction``, along a new leading axis of
    length ``d``: a forward-mode derivative batched over the basis."""
    basis = pt.eye(direction.type.shape[0], dtype="float64")
    return vectorize_graph(graph, {direction: basis})


def _rows_graph(eta: Variable, theta: Variable) -> Variable:
    """``∂η_i/∂θ`` as an (n, d) graph (:func:`rows_of_affine`), not checked."""
    if theta not in ancestors([eta]):  # a predictor free of θ (a constant): no rows
        return pt.zeros((eta.shape[0], theta.type.shape[0]), dtype="float64")
    direction = theta.type("direction")
    along = Rop(eta, theta, direction, use_op_rop_implementation=False)
    return rewrite_graph(
        _over_basis(along, direction).T,
        include=("canonicalize",),
        custom_rewrite=in2out(_product_with_selection),
    )


def _curvature_graph(eta: Variable, theta: Variable) -> Variable:
    """``∂²η_i/∂θ_j∂θ_k`` as an (n, d, d) graph: forward mode twice, each batched over the
    basis."""
    u, v = theta.type("u"), theta.type("v")
    along = Rop(eta, theta, u, use_op_rop_implementation=False)
    twice = Rop(along, theta, v, use_op_rop_implementation=False)
    curvature = _over_basis(_over_basis(twice, v), u)  # (d, d, n)
    return rewrite_graph(curvature.dimshuffle(2, 0, 1), include=("canonicalize",))


def weighted_curvature(eta: Variable, theta: Variable, weights: Variable) -> Variable:
    """``Σ_i w_i ∂²η_i/∂θ²`` (d, d) with ``w`` held constant: the Hessian of ``Σ w_i η_i``."""
    grad = pt.grad((disconnected_grad(weights) * eta).sum(), theta)
    direction = theta.type("direction")
    return _over_basis(Rop(grad, theta, direction, use_op_rop_implementation=False), direction)


def _value_ancestors(var: Variable) -> set[Variable]:
    """The variables ``var``'s *values* depend on: as ``ancestors``, but not through inputs
    that only give a shape (of ``Shape``, ``Alloc``'s sizes, ``fill``'s first argument)."""
    seen, stack = set(), [var]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        node = v.owner
        if node is None or isinstance(node.op, Shape | Shape_i):
            continue
        if isinstance(node.op, Alloc):
            stack.append(node.inputs[0])
        elif isinstance(scalar_op(v), Second):
            stack.append(node.inputs[1])
        else:
            stack.extend(node.inputs)
    return seen


@node_rewriter([Dot])
def _product_with_selection(fgraph, node):
    """``A @ S`` for a constant selection matrix ``S`` (each row a distinct unit row vector):
    ``A`` itself for the identity, else ``A``'s columns placed in a zero matrix.

    The basis product of ``rows_of_affine`` is such a product wherever a coefficient vector is
    a slice of ``θ`` (``X @ b`` with ``b = θ[:k]``): ``X`` times a ``k × d`` slice of the
    identity. Without a linked BLAS, PyTensor's own ``Gemm`` did that product at about 2 µs a
    row for ``d = 111``, most of a data pass; placing the columns is a copy.
    """
    a, b = node.inputs
    if not (isinstance(b, TensorConstant) and b.ndim == 2 and a.ndim == 2):
        return None
    value = b.data
    ones = value == 1
    if not (np.all(ones | (value == 0)) and np.all(ones.sum(axis=1) == 1)
            and np.all(ones.sum(axis=0) <= 1)):
        return None
    dtype = node.outputs[0].dtype
    columns = np.argmax(ones, axis=1)
    if value.shape[0] == value.shape[1] and np.array_equal(columns, np.arange(len(columns))):
        return [pt.cast(a, dtype)]
    out = pt.zeros((a.shape[0], value.shape[1]), dtype=dtype)
    start = int(columns[0])
    if np.array_equal(columns, np.arange(start, start + len(columns))):
        return [pt.set_subtensor(out[:, start : start + len(columns)], pt.cast(a, dtype))]
    return [pt.set_subtensor(out[:, columns], pt.cast(a, dtype))]
