r"""One grouping factor's levels: read off a predictor, and the arrow structure they give.

A predictor ``η_i = x_{F,i}ᵀθ_F + t_i θ_{a + k_i} + o_i`` (a random intercept ``u[g]``, ``u`` the
coordinates ``a … a + G − 1`` of ``θ``) touches the ``d_F`` *fixed* coordinates and one of the
``G`` *level* coordinates. Its row is stored as :class:`SplitRows` (``x_F``, ``k_i``, ``t_i``), not
as a dense row of length ``d = d_F + G``, and the sums of a data pass become

.. math::

    \sum_i f''_i x_i x_i^\top = \begin{pmatrix} D & C \\ C^\top & A \end{pmatrix},\quad
    D_{kk} = \sum_{i: k_i = k} f''_i t_i^2,\quad
    C_{k\cdot} = \sum_{i: k_i = k} f''_i t_i x_{F,i}^\top,\quad
    A = \sum_i f''_i x_{F,i} x_{F,i}^\top,

per-level sums (``np.bincount`` over ``k_i``) in O(N·d_F²) instead of a dense O(N·d²) product:
:class:`LevelHessian`, levels first, the level block diagonal. The priors of the levels
(``u ~ Normal(0, σ)``) couple each level to the fixed block (``σ``) but not to the other levels,
so the log posterior's Hessian keeps the structure, and its Cholesky factor is the arrow
:class:`~pymc_subsample.model.frame.LevelFrame` stores (``docs/methods/reference.md``,
"Many levels").
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pytensor
import pytensor.tensor as pt
from pymc.logprob.transforms import LogTransform
from pytensor.graph.basic import Variable
from pytensor.graph.traversal import ancestors, applys_between, io_toposort
from pytensor.raise_op import CheckAndRaise
from pytensor.tensor.basic import Alloc, get_underlying_scalar_constant_value
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.random.basic import NormalRV
from pytensor.tensor.shape import Reshape
from pytensor.tensor.subtensor import AdvancedSubtensor, AdvancedSubtensor1, Subtensor

from pymc_subsample.kernels.gram import weighted_gram, weighted_level_sums

__all__ = [
    "MIN_SPLIT_LEVELS",
    "LevelHessian",
    "LevelLayout",
    "LevelPrior",
    "SecondLevels",
    "SplitRows",
    "bilinear_form",
    "find_level_factor",
    "find_level_factors",
    "prior_derivatives",
    "reads_levels",
    "scale_coordinate",
]

#: Fewest levels for which a predictor's rows are split (a few levels: the dense rows are as
#: cheap, and the models of the stored behaviour draws keep their dense passes).
MIN_SPLIT_LEVELS = 64


@dataclass(frozen=True)
class LevelLayout:
    """Where the levels are in ``θ``: coordinates ``start … stop − 1``; the rest are fixed."""

    start: int
    stop: int
    dim: int

    @property
    def n_levels(self) -> int:
        return self.stop - self.start

    @cached_property
    def levels(self) -> np.ndarray:
        return np.arange(self.start, self.stop)

    @cached_property
    def fixed(self) -> np.ndarray:
        return np.concatenate([np.arange(self.start), np.arange(self.stop, self.dim)])


@dataclass(frozen=True)
class SecondLevels:
    """A second grouping factor's one-hot columns of split rows, kept as indices: the fixed
    block's columns ``columns`` (a slice of its positions, ``G₂`` of them) hold ``r_i`` at
    column ``l_i`` of row ``i`` and zeros elsewhere (crossed random intercepts,
    ``model/crossed.py``)."""

    columns: slice
    level: np.ndarray  # (n,) int, 0 … G₂ − 1
    value: np.ndarray  # (n,)

    @property
    def n_levels(self) -> int:
        return self.columns.stop - self.columns.start


@dataclass(frozen=True)
class SplitRows:
    """Rows ``x_i`` of one predictor with one level each: ``x_i = x_{F,i}`` on the fixed
    coordinates and ``t_i`` on level ``k_i``; in whitened coordinates the same shape
    (:meth:`~pymc_subsample.model.frame.LevelFrame.whiten_rows`).

    With ``second``, a second factor's columns of ``x_F`` are not in ``fixed`` (which holds
    the fixed block's other columns) but given by their level and value
    (:class:`SecondLevels`): :meth:`sums` then adds them up per level, O(n) instead of
    O(n·G₂²), and :meth:`fixed_block` gives the dense ``x_F``.
    """

    fixed: np.ndarray  # (n, d_F), or (n, d_F − G₂) with `second`
    level: np.ndarray  # (n,) int, 0 … G − 1
    value: np.ndarray  # (n,)
    layout: LevelLayout
    second: SecondLevels | None = None

    def fixed_block(self) -> np.ndarray:
        """``x_F``, ``(n, d_F)``, the second factor's one-hot columns filled in."""
        sec = self.second
        if sec is None:
            return self.fixed
        n, cols = self.level.size, sec.columns
        out = np.zeros((n, self.fixed.shape[1] + sec.n_levels))
        out[:, : cols.start] = self.fixed[:, : cols.start]
        out[:, cols.stop :] = self.fixed[:, cols.start :]
        out[np.arange(n), cols.start + sec.level] = sec.value
        return out

    def dense(self) -> np.ndarray:
        """The rows as an ``(n, d)`` matrix in ``θ``'s order."""
        lay = self.layout
        out = np.zeros((self.level.size, lay.dim))
        out[:, lay.fixed] = self.fixed_block()
        out[np.arange(self.level.size), lay.start + self.level] = self.value
        return out

    def norms(self) -> np.ndarray:
        extra = 0.0 if self.second is None else self.second.value**2
        return np.sqrt(np.einsum("ij,ij->i", self.fixed, self.fixed) + self.value**2 + extra)

    def sums(self, f1: np.ndarray, f2: np.ndarray) -> tuple[np.ndarray, LevelHessian]:
        """``Σ f'_i x_i`` (dense, length ``d``) and ``Σ f''_i x_i x_iᵀ`` by per-level sums."""
        lay, g = self.layout, self.layout.n_levels
        grad = np.zeros(lay.dim)
        wt = f2 * self.value
        diag = np.bincount(self.level, wt * self.value, minlength=g)
        if self.second is None:
            grad[lay.fixed] = self.fixed.T @ f1
            grad[lay.start : lay.stop] = np.bincount(self.level, f1 * self.value, minlength=g)
            return grad, LevelHessian(diag, weighted_level_sums(self.level, wt, self.fixed, g),
                                      weighted_gram(self.fixed, f2), lay)
        # the second factor's columns: a diagonal block, per-level sums of the other columns,
        # and the two factors' co-occurrence (G × G₂, Σ_{k_i = k, l_i = l} f''_i t_i r_i)
        sec = self.second
        g2, level2 = sec.n_levels, sec.level
        d_f = self.fixed.shape[1] + g2
        second = np.arange(sec.columns.start, sec.columns.stop)
        rest = np.setdiff1d(np.arange(d_f), second)
        wr = f2 * sec.value
        grad[lay.fixed[rest]] = self.fixed.T @ f1
        grad[lay.fixed[second]] = np.bincount(level2, f1 * sec.value, minlength=g2)
        grad[lay.start : lay.stop] = np.bincount(self.level, f1 * self.value, minlength=g)
        coupling = np.empty((g, d_f))
        coupling[:, rest] = weighted_level_sums(self.level, wt, self.fixed, g)
        coupling[:, second] = np.bincount(self.level * g2 + level2, wt * sec.value,
                                          minlength=g * g2).reshape(g, g2)
        block = np.zeros((d_f, d_f))
        block[np.ix_(rest, rest)] = weighted_gram(self.fixed, f2)
        cross = weighted_level_sums(level2, wr, self.fixed, g2)  # (G₂, d_F − G₂)
        block[np.ix_(second, rest)] = cross
        block[np.ix_(rest, second)] = cross.T
        block[second, second] = np.bincount(level2, wr * sec.value, minlength=g2)
        return grad, LevelHessian(diag, coupling, block, lay)


class LevelHessian:
    """A symmetric ``d × d`` matrix with a diagonal level block: ``diag`` (``G``),
    ``coupling`` (``G × d_F``, levels by fixed coordinates) and ``block`` (``d_F × d_F``).

    Arithmetic with another of the same layout keeps the structure; with a dense matrix whose
    level block is diagonal too (a prior's Hessian) as well, else it gives the dense sum.
    """

    __array_ufunc__ = None  # ndarray + LevelHessian defers to __radd__

    def __init__(self, diag: np.ndarray, coupling: np.ndarray, block: np.ndarray,
                 layout: LevelLayout) -> None:
        self.diag, self.coupling, self.block, self.layout = diag, coupling, block, layout

    @property
    def shape(self) -> tuple[int, int]:
        return (self.layout.dim, self.layout.dim)

    @classmethod
    def from_dense(cls, h: np.ndarray, layout: LevelLayout) -> LevelHessian | None:
        """The structure of a dense ``h``, or None if two levels are coupled in it."""
        lv, fx = slice(layout.start, layout.stop), layout.fixed
        level_block = h[lv, lv]
        diag = np.diag(level_block).copy()
        if np.count_nonzero(level_block) > np.count_nonzero(diag):
            return None
        return cls(diag, h[lv][:, fx], h[np.ix_(fx, fx)], layout)

    def dense(self) -> np.ndarray:
        lay = self.layout
        lv, fx = np.arange(lay.start, lay.stop), lay.fixed
        h = np.zeros(self.shape)
        h[lv, lv] = self.diag
        h[np.ix_(lv, fx)] = self.coupling
        h[np.ix_(fx, lv)] = self.coupling.T
        h[np.ix_(fx, fx)] = self.block
        return h

    def symmetrised(self) -> LevelHessian:
        return LevelHessian(self.diag, self.coupling, 0.5 * (self.block + self.block.T),
                            self.layout)

    def shifted(self, shift: float) -> LevelHessian:
        """``H + shift·I``."""
        return LevelHessian(self.diag + shift, self.coupling,
                            self.block + shift * np.eye(self.block.shape[0]), self.layout)

    def holding(self, held: np.ndarray) -> LevelHessian:
        """The matrix with the fixed coordinates of the mask ``held`` (over ``θ``) made
        identity rows and columns (held in a Newton step)."""
        cols = held[self.layout.fixed]
        block, coupling = self.block.copy(), self.coupling.copy()
        block[cols, :], block[:, cols], coupling[:, cols] = 0.0, 0.0, 0.0
        block[cols, cols] = 1.0
        return LevelHessian(self.diag, coupling, block, self.layout)

    def is_finite(self) -> bool:
        return bool(np.all(np.isfinite(self.diag)) and np.all(np.isfinite(self.coupling))
                    and np.all(np.isfinite(self.block)))

    def max_abs(self) -> float:
        return float(max(np.abs(self.diag).max(initial=0.0), np.abs(self.block).max(initial=0.0),
                         np.abs(self.coupling).max(initial=0.0)))

    def __add__(self, other):
        if isinstance(other, (int, float)) and other == 0:
            return self
        if isinstance(other, np.ndarray):
            structured = LevelHessian.from_dense(other, self.layout)
            if structured is None:
                return self.dense() + other
            other = structured
        if not isinstance(other, LevelHessian) or other.layout != self.layout:
            return NotImplemented
        return LevelHessian(self.diag + other.diag, self.coupling + other.coupling,
                            self.block + other.block, self.layout)

    __radd__ = __add__

    def __neg__(self) -> LevelHessian:
        return LevelHessian(-self.diag, -self.coupling, -self.block, self.layout)

    def __mul__(self, k: float) -> LevelHessian:
        return LevelHessian(k * self.diag, k * self.coupling, k * self.block, self.layout)

    __rmul__ = __mul__

    def __matmul__(self, v: np.ndarray) -> np.ndarray:
        """``H v`` for a vector: O(G·d_F)."""
        lay = self.layout
        v = np.asarray(v, dtype=np.float64)
        v_level, v_fixed = v[lay.start : lay.stop], v[lay.fixed]
        out = np.empty(lay.dim)
        out[lay.start : lay.stop] = self.diag * v_level + self.coupling @ v_fixed
        out[lay.fixed] = self.coupling.T @ v_level + self.block @ v_fixed
        return out


def bilinear_form(h, u: np.ndarray, v: np.ndarray) -> float:
    """``uᵀHv`` of a dense matrix or a :class:`LevelHessian` (one product with ``H``)."""
    return float(np.asarray(u, dtype=np.float64) @ (h @ np.asarray(v, dtype=np.float64)))


def _theta_slice(var: Variable, theta: Variable) -> tuple[int, int] | None:
    """``(a, b)`` if ``var`` is ``θ[a:b]`` (possibly reshaped to a vector), else None."""
    node = var.owner
    if node is not None and isinstance(node.op, Reshape) and var.ndim == 1:
        var = node.inputs[0]
        node = var.owner
    if node is None or not isinstance(node.op, Subtensor) or node.inputs[0] is not theta:
        return None
    (sl,) = node.op.idx_list if len(node.op.idx_list) == 1 else (None,)
    if not isinstance(sl, slice) or sl.step is not None:
        return None
    try:
        bounds = [int(get_underlying_scalar_constant_value(i)) for i in node.inputs[1:]]
    except NotScalarConstantError:
        return None
    if len(bounds) != 2 or sl.start is None or sl.stop is None:
        return None
    return bounds[0], bounds[1]


def find_level_factors(eta: Variable, theta: Variable
                       ) -> list[tuple[LevelLayout, Variable, Variable]]:
    """The grouping factors in the predictor ``eta``: ``(layout, u[g], g)`` for each selection
    ``u[g]`` of a vector slice ``u = θ[a:b]`` of two or more coordinates (``g`` an integer
    vector free of ``θ``), the most levels first; the first is split when it has
    :data:`MIN_SPLIT_LEVELS` or more (:func:`find_level_factor`). The caller
    checks that ``eta`` reads ``u`` nowhere else (:func:`reads_levels`): a slice selected
    twice, or read some other way, keeps the dense rows.
    """
    dim = theta.type.shape[0]
    found = []
    for node in applys_between([theta], [eta]):
        if isinstance(node.op, AdvancedSubtensor | AdvancedSubtensor1) and len(node.inputs) == 2:
            span = _theta_slice(node.inputs[0], theta)
            index = node.inputs[1]
            if (span is not None and span[1] - span[0] >= 2
                    and index.ndim == 1 and index.dtype.startswith(("int", "uint"))
                    and theta not in ancestors([index]) and node.outputs[0].ndim == 1):
                found.append((span, node.outputs[0], index))
    found.sort(key=lambda f: f[0][0] - f[0][1])  # stable: the most levels first
    return [(LevelLayout(start, stop, dim), selected, pt.cast(index, "int64"))
            for (start, stop), selected, index in found]


def find_level_factor(eta: Variable, theta: Variable
                      ) -> tuple[LevelLayout, Variable, Variable] | None:
    """The grouping factor with the most levels in ``eta`` (:func:`find_level_factors`), or
    None. With crossed factors it is the one split; the others' coordinates are in the fixed
    block (the level block stays diagonal: a row touches one level of a factor)."""
    found = find_level_factors(eta, theta)
    return found[0] if found and found[0][0].n_levels >= MIN_SPLIT_LEVELS else None


def reads_levels(graph: Variable, theta: Variable, layout: LevelLayout) -> bool:
    """Whether ``graph`` reads a level coordinate of ``θ``, or ``θ`` other than through
    constant slices (conservative: True unless every read is a slice disjoint from them)."""
    for node in applys_between([theta], [graph]):
        if theta in node.inputs:
            span = _theta_slice(node.outputs[0], theta)
            if span is None or (span[0] < layout.stop and layout.start < span[1]):
                return True
    return False


def _elementwise_in(graph: Variable, vector: Variable) -> bool:
    """Whether element ``k`` of the vector ``graph`` depends on ``vector`` through its element
    ``k`` only: every node that reads ``vector`` (or what it feeds) is elementwise with
    vector outputs, a check that passes its first input through, or an ``Alloc`` of a vector
    to a vector (conservative: any other op reading it, a reduction, an index, answers no)."""
    if graph.ndim != 1:
        return False
    dependent = {vector}
    for node in io_toposort([vector], [graph]):
        read = [i for i, v in enumerate(node.inputs) if v in dependent]
        if not read:
            continue
        one_d = all(o.ndim == 1 for o in node.outputs)
        ok = ((isinstance(node.op, Elemwise) and one_d
               and all(node.inputs[i].ndim == 1 for i in read))
              or (isinstance(node.op, CheckAndRaise) and read == [0])
              or (isinstance(node.op, Alloc) and read == [0] and node.inputs[0].ndim == 1
                  and one_d))
        if not ok:
            return False
        dependent.update(node.outputs)
    return graph in dependent


class LevelPrior:
    r"""The prior of a grouping factor's levels, level by level.

    When ``log p0(θ) = Σ_k p_k(u_k, θ_F) + r(θ_F)`` (the levels' own prior terms elementwise in
    ``u``, e.g. ``u ~ Normal(μ, s)``, and no other prior term or potential reading them), the
    levels are independent given the fixed coordinates in the prior, and with rows that touch
    one level each, in the posterior: the premise of the level moves
    (``docs/methods/mhss.md``, "Moves of the levels"). :meth:`build` reads that structure off
    the graph (None when it is not there) and compiles ``θ ↦ (p_k)_k`` and the first two
    derivatives of each ``p_k`` in ``u_k``.
    """

    def __init__(self, layout: LevelLayout, terms_fn, derivatives_fn) -> None:
        self.layout = layout
        self._terms_fn, self._derivatives_fn = terms_fn, derivatives_fn

    @classmethod
    def build(cls, lik, layout: LevelLayout) -> LevelPrior | None:
        """The level prior of ``lik`` (a :class:`~pymc_subsample.model.likelihood.
        SubsampledLikelihood`) when its levels ``layout`` are one whole vector variable whose
        prior factorises as above; else None."""
        model, offset, level_value = lik.model, 0, None
        for value, (_, shape) in zip(lik.value_vars, lik._ravel_info, strict=True):
            size = int(np.prod(shape, dtype=int))
            if offset == layout.start and size == layout.n_levels and len(shape) == 1:
                level_value = value
            offset += size
        if level_value is None:
            return None
        level_rv = model.values_to_rvs[level_value]
        others = [rv for rv in model.free_RVs if rv is not level_rv] + list(model.potentials)
        (term,) = model.logp(vars=[level_rv], sum=False)
        rest = model.logp(vars=others, sum=True) if others else pt.constant(0.0)
        term = pt.cast(term, "float64")
        # derivatives in the levels' own value variable, not in all of θ: PyTensor's rewrites
        # of a gradient over every coordinate cost seconds a compile with thousands of levels
        first = pytensor.grad(term.sum(), level_value)
        second = pytensor.grad(first.sum(), level_value)
        term, rest, first, second = lik.in_theta(
            [term, pt.cast(rest, "float64"), pt.cast(first, "float64"),
             pt.cast(second, "float64")])
        if reads_levels(rest, lik.theta, layout):
            return None
        if not _elementwise_in(term, lik._value_to_theta[level_value]):
            return None
        prior = cls(layout, lik.compile([lik.theta], term),
                    lik.compile([lik.theta], [first, second]))
        # the split must add up to the prior the step uses
        theta = lik.ravel(lik.initial_point)
        terms = prior.terms(theta)
        total = float(np.sum(terms)) + float(lik.compile([lik.theta], rest, once=True)(theta))
        if terms.shape != (layout.n_levels,) or not np.isclose(total, lik.logp0(theta),
                                                                 rtol=1e-9, atol=1e-9):
            return None
        return prior

    def terms(self, theta: np.ndarray) -> np.ndarray:
        """``(p_k(u_k, θ_F))_k``, shape ``(G,)``."""
        return np.asarray(self._terms_fn(theta), dtype=np.float64)

    def derivatives(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(∂p_k/∂u_k, ∂²p_k/∂u_k²)`` at ``θ``, each shape ``(G,)``."""
        first, second = self._derivatives_fn(theta)
        return np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)


def prior_derivatives(lik, coordinates: np.ndarray):
    """``θ ↦ (log p0(θ), ∇_H log p0(θ), ∇²_H log p0(θ))`` for the coordinates ``H`` of
    ``θ``, compiled (to C: the level moves call it every iteration).

    When ``H`` is made of whole variables (the group scales) the derivatives are taken in
    their value variables, so the graph holds only the prior terms that read them; a gradient
    over all of ``θ`` (thousands of levels) cost PyTensor's rewrites 20 s to compile on the
    crossed flights model."""
    idx = [int(j) for j in coordinates]
    wrt, order = _whole_variables(lik, idx)
    if wrt is None:
        grad = pytensor.grad(lik.logp0_graph, lik.theta, disconnected_inputs="ignore")
        rows = [pytensor.grad(grad[j], lik.theta, disconnected_inputs="ignore")[idx]
                for j in idx]
        return lik.compile([lik.theta], [lik.logp0_graph, grad[idx], pt.stack(rows)])

    def flat(graph) -> Variable:
        """The gradient of ``graph`` in ``wrt``, raveled in ``H``'s order."""
        parts = pytensor.grad(graph, wrt, disconnected_inputs="ignore")
        return pt.concatenate([pt.cast(p, "float64").ravel() for p in parts])[order]

    grad = flat(lik.logp0_values)
    hess = pt.stack([flat(grad[j]) for j in range(len(idx))])
    grad, hess = lik.in_theta([grad, hess])
    return lik.compile([lik.theta], [lik.logp0_graph, grad, hess])


def _whole_variables(lik, idx: list[int]) -> tuple[list[Variable] | None, np.ndarray]:
    """The value variables whose coordinates are exactly ``idx`` (in ``θ``'s order), and the
    positions of ``idx``'s coordinates in their raveled concatenation; None when ``idx``
    splits a variable."""
    wanted, wrt, covered, offset = set(idx), [], [], 0
    for value, (_, shape) in zip(lik.value_vars, lik._ravel_info, strict=True):
        span = range(offset, offset + int(np.prod(shape, dtype=int)))
        offset = span.stop
        inside = [j for j in span if j in wanted]
        if inside and len(inside) < len(span):
            return None, np.empty(0, dtype=np.int64)
        if inside:
            wrt.append(value)
            covered.extend(span)
    position = {j: p for p, j in enumerate(covered)}
    return (wrt or None), np.array([position[j] for j in idx], dtype=np.int64)


def scale_coordinate(lik, layout: LevelLayout, hyper: np.ndarray) -> int | str:
    """For the scale move (:class:`~pymc_subsample.steps.hyper_moves.ScaleMove`): the index in
    ``θ`` of ``log s`` when the levels are ``u ~ Normal(0, s)`` with ``s`` one scalar variable
    sampled on the log scale that no row reads, or why the move does not apply (for the log).
    The move is exact for any prior; this is where its prior terms cancel, so where it helps.
    """
    model, offset, values = lik.model, 0, {}
    for value, (_, shape) in zip(lik.value_vars, lik._ravel_info, strict=True):
        values[value] = (offset, int(np.prod(shape, dtype=int)))
        offset += values[value][1]
    level_value = next((v for v, (start, _) in values.items() if start == layout.start), None)
    if level_value is None:
        return "the levels are not one variable"
    node = model.values_to_rvs[level_value].owner
    if not isinstance(node.op, NormalRV):
        return "the levels' prior is not Normal"
    mu, sigma = node.op.dist_params(node)
    try:
        zero_mean = float(get_underlying_scalar_constant_value(mu)) == 0.0
    except NotScalarConstantError:
        zero_mean = False
    if not zero_mean:
        return "the levels' prior mean is not the constant 0"
    while sigma.owner is not None and isinstance(sigma.owner.op, DimShuffle):
        sigma = sigma.owner.inputs[0]
    scale_value = model.rvs_to_values.get(sigma)
    if scale_value is None or scale_value not in values or values[scale_value][1] != 1:
        return "the levels' prior scale is not one scalar variable"
    if not isinstance(model.rvs_to_transforms.get(sigma), LogTransform):
        return "the levels' scale is not sampled on the log scale"
    index = values[scale_value][0]
    if index not in set(int(j) for j in hyper):
        return "rows read the levels' scale"
    return index
