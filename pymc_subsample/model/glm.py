"""Find generalised-linear-model structure in a PyMC model and compute the MHSS row constants.

MHSS needs ``|ξ_i(θ, θ')| ≤ c_i · M(θ, θ')`` (Prado, Nemeth & Sherlock 2024, eq. (3)). For a
GLM row ``ℓ_i(θ) = f(η_i(θ); y_i)`` with an affine linear predictor ``η_i(θ) = x_iᵀθ + o_i``
Corollary 2 gives ``c_i = L(y_i)·‖x_i‖^{k+1}`` for Taylor order ``k`` (see :mod:`bounds`).
This module reads the family, the link and ``η`` off each observed variable's graph, checks
that ``η`` is affine in the sampled vector ``θ`` and evaluates ``‖x_i‖`` for all rows once.

Supported (``docs/methods/mhss.md``, "The bound"): Bernoulli with a logistic link (``logit_p=η`` or
``p=pm.math.sigmoid(η)``), Bernoulli with a probit link (``p=pm.math.invprobit(η)``),
Poisson with mean ``softplus(η)`` (``pm.math.log1pexp`` / ``pt.softplus``), and Normal with
identity mean and a fixed ``σ`` (a constant or per-row data, not a sampled parameter).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import Rop, disconnected_grad
from pytensor.graph.basic import Variable
from pytensor.graph.replace import graph_replace, vectorize_graph
from pytensor.graph.rewriting.basic import in2out, node_rewriter
from pytensor.graph.rewriting.utils import rewrite_graph
from pytensor.graph.traversal import ancestors
from pytensor.ifelse import ifelse
from pytensor.scalar.basic import Exp, Log, Mul, Pow, Reciprocal, Second, TrueDiv
from pytensor.tensor.basic import Alloc
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.math import Dot
from pytensor.tensor.shape import Shape, Shape_i
from pytensor.tensor.variable import TensorConstant
from threadpoolctl import threadpool_limits

from pymc_subsample.bounds import (
    Family,
    LevelRows,
    LocationScaleFamily,
    SharedScaleRows,
    combine_predictor_partials,
    level_rows,
    location_scale_families,
    quadratic_row_constants,
    region_radius,
    registered,
    scalar_op,
    shared_scale_rows,
)
from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.kernels.indexing import round_up_float32
from pymc_subsample.model.frame import LaplaceFrame
from pymc_subsample.model.likelihood import SubsampledLikelihood

__all__ = [
    "GLMPass",
    "GLMTerm",
    "LocationScalePass",
    "LocationScaleTerm",
    "PassResult",
    "QUADRATIC_MAX_DIM",
    "detect_glm_terms",
    "detect_location_scale_terms",
    "family_terms",
    "glm_bound_constants",
    "location_scale_terms",
    "row_cosines",
    "upper_pairs",
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
    rows : Variable
        ``∂η_i/∂θ`` as an ``(n, d)`` graph, free of ``θ`` when ``η`` is affine
        (:func:`_rows_of_affine`).
    curvature : Variable or None
        ``∂²η_i/∂θ²`` as an ``(n, d, d)`` graph free of ``θ`` when ``η`` is quadratic in ``θ``
        (a product of two parameters); None when it is affine.
    """

    name: str
    family: Family
    eta: Variable
    y: Variable
    params: tuple[Variable, ...]
    rows: Variable
    curvature: Variable | None = None



def _unsupported(name: str, what: str) -> SubsamplingModelError:
    supported = "; ".join(f.description for f in (*registered(), *location_scale_families()))
    return SubsamplingModelError(
        f"MHSS has no automatic bound for observed variable '{name}': {what}. Supported, each "
        f"with eta affine in the parameters: {supported}. Pass your own bound with "
        "MHSS(bound=pms.UserBound(...)), or use AusterityMH or BarkerMinibatch, which need no "
        "bound."
    )


def _depends_on_parameters(var: Variable, lik: SubsampledLikelihood) -> bool:
    values = set(lik.value_vars)
    return any(v in values for v in ancestors([var]))


def _fixed_per_row(
    name: str, fam: Family | LocationScaleFamily, fixed: tuple[Variable, ...],
    lik: SubsampledLikelihood, refusal: str,
) -> tuple[Variable, ...]:
    """A family's fixed parameters, one float64 value per row of ``idx``; refused, naming the
    variable, when one depends on the sampled parameters (``refusal`` says why, with ``{param}``
    and ``{family}`` filled in)."""
    for param_name, value in zip(fam.params, fixed, strict=True):
        if _depends_on_parameters(value, lik):
            raise _unsupported(name, refusal.format(param=param_name, family=fam.description))
    n_rows = lik.idx.shape[0]
    return tuple(pt.cast(pt.broadcast_to(v, (n_rows,)), "float64") for v in fixed)


def _dist_name(op) -> str:
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
            raise _unsupported(
                block.name,
                f"its observations have {block.value.type.ndim - 1} trailing axes (one linear "
                "predictor per row is needed); reshape it into one observed variable per column",
            )
        op = block.rv.owner.op
        candidates = [f for f in registered() if isinstance(op, f.rv_op)]
        if not candidates:
            raise _unsupported(block.name, f"its family is {_dist_name(op)}")
        dist_params = op.dist_params(block.rv.owner)
        for fam in candidates:
            read = fam.read(dist_params)
            if read is not None:
                break
        else:
            links = " or ".join(f.description for f in candidates)
            raise _unsupported(block.name, f"its {_dist_name(op)} is not {links}")
        eta, fixed = read
        params = _fixed_per_row(
            block.name, fam, fixed, lik,
            "its Normal sigma is a sampled parameter and another observed variable is not such "
            "a Normal (MHSS bounds a sampled sigma when every observed variable is one)"
            if fam.name == "normal_identity" else
            "its {param} depends on the sampled parameters (MHSS bounds {family})",
        )
        (eta_theta,) = lik.in_theta([_simplify_log(pt.broadcast_to(eta, (n_rows,)))])
        try:
            rows, curvature = _predictor_derivatives(block.name, eta_theta, lik.theta)
        except SubsamplingModelError:
            if fam.link_hint is None:
                raise
            raise _unsupported(block.name, fam.link_hint) from None
        terms.append(GLMTerm(block.name, fam, eta_theta, block.value, params, rows, curvature))
    return terms


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


def _simplify_log(graph: Variable) -> Variable:
    graph = rewrite_graph(graph, include=(),
                          custom_rewrite=in2out(_split_log_node, ignore_newtrees=False))
    return rewrite_graph(graph, include=("canonicalize", "stabilize"))


@dataclass(frozen=True)
class PassResult:
    """What one pass over the data returns (everything divided by the temperature).

    Attributes
    ----------
    loglik : float
        ``Σ_i ℓ_i(θ)``.
    grad : ndarray, shape (d,)
        ``Σ_i ∇ℓ_i(θ) = Σ_i f'_i x_i``.
    hess : ndarray, shape (d, d)
        ``Σ_i ∇²ℓ_i(θ) = Σ_i f''_i x_i x_iᵀ``.
    row_constants : ndarray, shape (N,), LevelRows, SharedScaleRows or None
        MHSS constants ``c_i`` when asked for, or a rate bound's pieces (see
        :meth:`GLMPass.full`).
    """

    loglik: float
    grad: np.ndarray
    hess: np.ndarray
    row_constants: np.ndarray | LevelRows | SharedScaleRows | None = None


#: Most parameters beside which MHSS reads a quadratic predictor: its constants pass evaluates
#: each row's ``d × d`` second derivatives (:meth:`GLMPass.check_curvature_size`).
QUADRATIC_MAX_DIM = 256


class GLMPass:
    """Passes over the data of a GLM model: sums for the MAP and control variates, and ``c_i``.

    One compiled function of ``(θ, idx)`` returns, per chunk of rows and per observed variable,
    the covariate rows ``x_i = ∂η_i/∂θ`` (autodiff of the affine predictor, checked to be free
    of ``θ``) and the first and second derivatives of the row log-likelihood ``f(η; y_i)`` in
    ``η``. NumPy's BLAS then forms ``Σ f'_i x_i``,
    ``Σ f''_i x_i x_iᵀ`` and the whitened norms ``‖Lᵀx_i‖`` of the bound constants
    (``docs/methods/mhss.md``): O(N·d²) in BLAS products, several times faster than the generic
    Hessian of :func:`pymc_subsample.model.control_variates.loglik_sums`, and one pass gives
    both the sums and the constants. Nothing of size N×d is kept.

    Parameters
    ----------
    lik : SubsampledLikelihood
    terms : list of GLMTerm, optional
        From :func:`detect_glm_terms` (detected when not given).

    Attributes
    ----------
    n_passes : int
        Passes over all N rows made so far (subsample passes do not count).
    """

    #: Lemma 1's angle factors apply to ``M`` with these constants (one predictor per row)
    sharp_angles = True
    #: Compare the family's likelihood with the model's on the subsample passes too (the first
    #: full pass always does)
    check_subsamples = True

    def __init__(self, lik: SubsampledLikelihood, terms: list[GLMTerm] | None = None) -> None:
        self.lik = lik
        self.terms = detect_glm_terms(lik) if terms is None else terms
        self._compile_pass()
        quadratic = any(t.curvature is not None for t in self.terms)
        #: ``r`` of the region ``‖φ‖ ≤ r`` on which the row constants hold (``inf``: globally);
        #: a quadratic predictor's gradient grows with ``‖φ‖``, so it needs one too
        self.region_radius = (
            region_radius(lik.dim)
            if quadratic or any(t.family.region_only for t in self.terms) else math.inf
        )
        # a quadratic predictor's derivative tensor is not of rank one along one row
        self.sharp_angles = not quadratic
        self._curvature_fns: dict[str, Callable] = {}

    def _compile_pass(self) -> None:
        """One function of ``(θ, idx, check)``: per observed variable the model's own ``Σ ℓ_i``
        (only when ``check``, a lazy branch), then :meth:`_term_outputs` (the family's sum
        first)."""
        lik = self.lik
        check, zero = pt.scalar("check", dtype="bool"), pt.constant(0.0, dtype="float64")
        outputs, self._widths = [], []
        for term, model_terms in zip(self.terms, lik.block_terms, strict=True):
            term_outputs = [ifelse(check, pt.cast(model_terms, "float64").sum(), zero),
                            *self._term_outputs(term)]
            outputs += term_outputs
            self._widths.append(len(term_outputs))
        self._fn = lik.compile([lik.theta, lik.idx, check], outputs)
        # the model's terms and the family's f round differently, more so in float32 models
        float64 = all(v.dtype == "float64" for v in lik.value_vars)
        self._family_rtol = 1e-8 if float64 else 1e-4
        self.n_passes = 0

    def _term_outputs(self, term: GLMTerm) -> list[Variable]:
        """``Σ f``, then the rows ``x``, ``f'``, ``f''``, ``y``, ``η``, the fixed parameters
        and, for a quadratic predictor, ``Σ f'_i ∂²η_i/∂θ²``."""
        f, f1, f2 = family_terms(term, term.eta)
        out = [f.sum(), term.rows, f1, f2, pt.cast(term.y, "float64"),
               pt.cast(term.eta, "float64"), *term.params]
        if term.curvature is not None:
            out.append(_weighted_curvature(term.eta, self.lik.theta, f1))
        return out

    def _term_pieces(self, term: GLMTerm, outputs: list, n: int) -> tuple:
        """One variable's :meth:`_term_outputs` after ``Σ f`` as :meth:`rows` returns them:
        ``(x, f', f'', y, η, κ, Σ f'∂²η or None)``."""
        x, f1, f2, y, eta, *params = outputs
        curvature_sum = params.pop() if term.curvature is not None else None
        return np.asarray(x).reshape(n, -1), f1, f2, y, eta, tuple(params), curvature_sum

    def rows(
        self, theta: np.ndarray, idx: np.ndarray, *, check: bool = True
    ) -> tuple[float, list[tuple]]:
        """Per-row pieces on the rows ``idx``: ``(Σ ℓ_i, [pieces per variable])``, the pieces
        ``(x, f', f'', y, η, κ, Σ f'∂²η or None)`` here (:meth:`_term_pieces`).

        ``check=True`` also evaluates the model's own log-likelihood on these rows and
        compares its sum with the family's (:meth:`_check_family`).

        Raises
        ------
        SubsamplingModelError
            If the family's log-likelihood is not the model's on these rows.
        """
        out = self._fn(theta, idx, np.bool_(check))
        total, pieces, start = 0.0, [], 0
        for term, width in zip(self.terms, self._widths, strict=True):
            model_sum, family_sum, *rest = out[start : start + width]
            start += width
            if check:
                self._check_family(term, float(model_sum), float(family_sum), len(idx))
            total += float(family_sum)
            pieces.append(self._term_pieces(term, rest, len(idx)))
        return total / self.lik.temperature, pieces

    def _check_family(self, term: GLMTerm, model_sum: float, family_sum: float, n: int) -> None:
        """The control variates use the family's ``f``: it must be the model's likelihood.

        For probit the model's rows are the likelihood layer's stable ``log Φ(±η)`` (PyMC's own
        ``log1p(−Φ(η))`` cancels: wrong beyond ``η ≈ 5``, ``-inf`` beyond 8.3).
        """
        if model_sum == family_sum or not (math.isfinite(model_sum) or math.isfinite(family_sum)):
            # both -inf or NaN: a point outside the support (or where a scale overflows), not a
            # misread
            return
        if not abs(model_sum - family_sum) <= self._family_rtol * (abs(model_sum) + n):
            raise SubsamplingModelError(
                f"Observed variable '{term.name}' was read as a GLM ({term.family.name}), but its "
                f"log-likelihood on {n} rows is {model_sum:.10g} where the family gives "
                f"{family_sum:.10g}. Use AusterityMH or BarkerMinibatch, or MHSS with "
                "bound=pms.UserBound(...), and report the model."
            )

    def full(
        self,
        theta: np.ndarray,
        *,
        idx_chunks: Iterable[np.ndarray] | None = None,
        weight: float = 1.0,
        whiten_rows: Callable[[np.ndarray], np.ndarray] | None = None,
        order: int | None = None,
        levels: int = 0,
    ) -> PassResult:
        """Sums of the log-likelihood and its derivatives at ``θ``, and optionally the ``c_i``.

        Parameters
        ----------
        theta : ndarray, shape (d,)
        idx_chunks : iterable of int64 arrays, optional
            Rows to pass over: all N rows in chunks by default, or a subsample.
        weight : float
            Multiplies every sum (``N/n`` for a subsample of ``n`` rows).
        whiten_rows : callable, optional
            ``x ↦ Lᵀx`` row-wise (:meth:`pymc_subsample.model.frame.LaplaceFrame.whiten_rows`): the
            constants are then the whitened ``c_i = L_k(y_i)‖Lᵀx_i‖^{k+1}``. Euclidean
            (``‖x_i‖``, Corollary 2 of Prado et al. 2024) when not given.
        order : {1, 2}, optional
            Taylor order of the constants; none are computed when not given.
        levels : int
            The frame's level coordinates (:attr:`pymc_subsample.model.frame.LaplaceFrame.n_levels`,
            with whitened rows): the constants are then the level bound's
            :class:`~pymc_subsample.bounds.LevelRows`, with Corollary 2's beside them, for a
            model with one observed variable of one predictor.
        """
        lik = self.lik
        theta = np.asarray(theta, dtype=np.float64)
        full_data = idx_chunks is None
        total, g, h = 0.0, np.zeros(lik.dim), np.zeros((lik.dim, lik.dim))
        # a rate bound's pieces need one observed variable (each row has one rate) of one
        # affine predictor
        affine = all(t.curvature is None for t in self.terms)
        levels = levels if len(self.terms) == 1 and order and affine else 0
        consts = None if order is None else self._constants_store(order, levels)
        # the family's f is compared with the model's likelihood on every row once: on the
        # subsample passes (unless check_subsamples is off) and the first full pass; f is a
        # function of (η_i, y_i) alone, so later passes only change η
        check = self.n_passes == 0 and (full_data or self.check_subsamples)
        # one BLAS thread: the products are thin (chunk × d), and a threaded BLAS on a busy or
        # multi-process machine (pm.sample with cores > 1) is up to 50× slower here
        with threadpool_limits(limits=1, user_api="blas"):
            results = lik.map_row_blocks(self, "_block", theta, check, order, whiten_rows,
                                         levels, chunks=idx_chunks)
            for chunk, (s, gb, hb, cb) in results:
                total, g, h = total + s, g + gb, h + hb
                if isinstance(consts, np.ndarray):
                    consts[chunk] = cb
                elif consts is not None:
                    consts.fill(chunk, cb)
        if full_data:
            self.n_passes += 1
        # lik.terms is tempered already; f' and f'' come from the untempered family logp
        k = weight / lik.temperature
        return PassResult(total * weight, g * k, 0.5 * (h + h.T) * k, consts)

    def _constants_store(self, order: int, levels: int):
        """Where :meth:`full` puts the constants of all N rows: the level bound's
        :class:`~pymc_subsample.bounds.LevelRows` when the frame has levels, else ``c_i`` as
        float32 rounded up (4 bytes a row, still bounds: :mod:`pymc_subsample.kernels.indexing`)."""
        n_rows = self.lik.n_rows
        if levels:
            return LevelRows.empty(n_rows, levels, order)
        return np.zeros(n_rows, dtype=np.float32)

    def _block(self, chunk: np.ndarray, theta: np.ndarray, check: bool, order: int | None,
               whiten_rows: Callable | None, levels: int = 0):
        """One block of :meth:`full`: ``(Σ ℓ_i, Σ ∇ℓ_i, Σ ∇²ℓ_i, constants or None)`` on
        ``chunk``; the constants are ``c_i``, or a tuple of a bound's pieces
        (:meth:`_row_constants`)."""
        s, pieces = self.rows(theta, chunk, check=check)
        gb, hb, cb = 0.0, 0.0, 0.0
        # a Newton step that overshoots (a log link) may overflow: its -inf value is enough
        with np.errstate(over="ignore", invalid="ignore"):
            for term, piece in zip(self.terms, pieces, strict=True):
                g, h = self._term_sums(piece)
                gb, hb = gb + g, hb + h
                if order is not None and term.curvature is not None:
                    cb = cb + self._quadratic_constants(term, order, piece, whiten_rows, theta,
                                                        chunk)
                elif order is not None:
                    c = self._row_constants(term, order, piece, whiten_rows, levels)
                    if isinstance(c, tuple):  # a bound's pieces: one observed variable
                        return s, gb, hb, c
                    cb = cb + c
        cb = round_up_float32(cb / self.lik.temperature) if order is not None else None
        return s, gb, hb, cb

    def _term_sums(self, piece: tuple) -> tuple[np.ndarray, np.ndarray]:
        """One variable's ``Σ f'x`` and ``Σ f''xxᵀ`` (plus ``Σ f'∂²η`` for a quadratic
        predictor) on a block (:meth:`_term_pieces`)."""
        x, f1, f2, *_, curvature_sum = piece
        hess = x.T @ (f2[:, None] * x)
        return x.T @ f1, hess if curvature_sum is None else hess + curvature_sum

    def _quadratic_constants(self, term, order, piece, whiten_rows, theta, chunk) -> np.ndarray:
        """``c_i`` of rows with a quadratic predictor
        (:func:`~pymc_subsample.bounds.quadratic_row_constants`), at ``θ̂``."""
        if whiten_rows is None:
            raise ValueError("constants for a quadratic predictor hold on a region of the "
                             "Laplace frame only: pass whiten_rows")
        x, f1, _, y, eta_hat, params, _ = piece
        sd = _row_norms(whiten_rows(np.eye(self.lik.dim)))  # σ_j = ‖Lᵀe_j‖
        q = self._curvature_norms(term, theta, chunk, sd)
        return quadratic_row_constants(term.family, order, _row_norms(whiten_rows(x)), q, f1,
                                       y, params, eta_hat, self.region_radius)

    def check_curvature_size(self) -> None:
        """Refuse, naming the variable, a quadratic predictor among more than
        :data:`QUADRATIC_MAX_DIM` parameters: its constants need each row's ``d × d`` second
        derivatives (:meth:`_curvature_norms`), whose cost grows like ``N d²``."""
        for term in self.terms:
            if term.curvature is not None and self.lik.dim > QUADRATIC_MAX_DIM:
                raise _unsupported(
                    term.name, f"its predictor is a product of two parameters among d = "
                    f"{self.lik.dim} parameters, and its bound needs each row's d x d second "
                    f"derivatives (MHSS reads them for d <= {QUADRATIC_MAX_DIM}). Write the "
                    "product with fewer parameters (a non-centred group effect s * z[g] with a "
                    "positive scalar s is sampled as u = s * z)"
                )

    def _curvature_norms(self, term: GLMTerm, theta: np.ndarray, chunk: np.ndarray,
                         sd: np.ndarray) -> np.ndarray:
        """``q_i = Σ_jk |∂²η_i/∂θ_j∂θ_k| σ_j σ_k ≥ ‖LᵀQ_iL‖₂`` on the rows ``chunk``, in pieces
        of at most 2²² numbers of the ``(n, d, d)`` curvature (compiled on first use)."""
        key = term.name
        if key not in self._curvature_fns:
            weights = pt.vector("sd", dtype="float64")
            q = (pt.abs(term.curvature) * pt.outer(weights, weights)).sum(axis=(1, 2))
            self._curvature_fns[key] = self.lik.compile([self.lik.theta, self.lik.idx, weights],
                                                        pt.cast(q, "float64"))
        step = max(1, (1 << 22) // self.lik.dim**2)
        fn = self._curvature_fns[key]
        return np.concatenate([fn(theta, chunk[i : i + step], sd)
                               for i in range(0, len(chunk), step)])

    def _row_constants(self, term, order, piece, whiten_rows, levels=0) -> np.ndarray | tuple:
        """``c_i`` of one variable's rows in a chunk (:meth:`Family.row_constants`), or with
        ``levels`` the level bound's pieces (:meth:`_level_rows`).

        A region family's constants hold on ``‖φ‖ ≤ r`` of the Laplace frame, so only with
        whitened rows: with Euclidean ones the family itself refuses (no global bound). The
        pass runs at ``θ̂`` itself, so ``η`` is ``η̂_i``.
        """
        if levels:
            return self._level_rows(term, order, piece, whiten_rows, levels)
        x, _, _, y, eta_hat, params, _ = piece
        whitened = whiten_rows is not None
        xt = whiten_rows(x) if whitened else x
        radius = self.region_radius if term.family.region_only and whitened else math.inf
        return term.family.row_constants(order, _row_norms(xt), y, params, eta_hat=eta_hat,
                                         radius=radius)

    def _level_rows(self, term, order, piece, whiten_rows, levels) -> tuple[np.ndarray, ...]:
        """The level bound's pieces of one chunk (:func:`level_rows`): the supremum on the
        same interval as :meth:`_row_constants`, the whitened rows split by level."""
        x, _, _, y, eta_hat, params, _ = piece
        xt = whiten_rows(x)
        norms = _row_norms(xt)
        radius = self.region_radius if term.family.region_only else math.inf
        sup = term.family.row_sup(order, norms, y, params, eta_hat=eta_hat,
                                  radius=radius) / self.lik.temperature
        return level_rows(order, sup, xt, levels, norms)


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


def _rows_of_affine(name: str, eta: Variable, theta: Variable) -> Variable:
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
        raise _not_affine(name)
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
        raise _not_affine(name)
    return rows, curvature


def _not_affine(name: str) -> SubsamplingModelError:
    return _unsupported(
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
    """``∂η_i/∂θ`` as an (n, d) graph (:func:`_rows_of_affine`), not checked."""
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


def _weighted_curvature(eta: Variable, theta: Variable, weights: Variable) -> Variable:
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

    The basis product of ``_rows_of_affine`` is such a product wherever a coefficient vector is
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


def glm_bound_constants(
    lik: SubsampledLikelihood,
    theta_hat: np.ndarray,
    order: int,
    terms: list[GLMTerm] | None = None,
    frame: LaplaceFrame | None = None,
) -> np.ndarray:
    """Row constants ``c_i`` (already divided by the temperature) for all N rows.

    ``c_i = L_k(y_i)·‖x_i‖^{k+1}`` (Corollary 2 of Prado et al. 2024), or, given a Laplace
    frame, the whitened ``L_k(y_i)·‖Lᵀx_i‖^{k+1}``, to be used with ``M`` computed from
    whitened points (``docs/methods/mhss.md``). One chunked pass over the data. Affine
    predictors only: a quadratic one's constants hold on a region and without Lemma 1's
    angle factors, which :class:`GLMPass` (``region_radius``, ``sharp_angles``) carries.

    Raises
    ------
    SubsamplingModelError
        If a linear predictor is not affine in ``θ``, or the family has no bound.
    """
    glm_pass = GLMPass(lik, terms)
    for term in glm_pass.terms:
        if term.curvature is not None:
            raise _not_affine(term.name)
    whiten = frame.whiten_rows if frame is not None else None
    return glm_pass.full(theta_hat, whiten_rows=whiten, order=order).row_constants


# ------------------------------------------------- location and scale: Normal, Student-t with σ
@dataclass(frozen=True)
class LocationScaleTerm:
    """An observed variable whose location and ``log σ`` (and the logs of the family's
    :attr:`~pymc_subsample.bounds.LocationScaleFamily.log_params`) are affine in ``θ``.

    Attributes
    ----------
    name : str
    family : LocationScaleFamily
        :mod:`pymc_subsample.bounds` (``normal_scale``, ``student_t_scale``, ...).
    mu, log_sigma : Variable
        The first two predictors on the rows ``idx``, as graphs of ``θ`` (broadcast to the
        rows): the location and ``log σ`` (``log σ + log ν / 2`` for a Student-t with a
        sampled ν: :meth:`LocationScaleFamily.log_scale`).
    y : Variable
        Observed values on the rows ``idx``.
    mu_rows, log_sigma_rows : Variable
        Their derivatives ``∂μ_i/∂θ`` and ``∂λ_i/∂θ`` (:func:`_rows_of_affine`), free of ``θ``.
    params : tuple of Variable
        The family's fixed parameters on the rows ``idx`` (a Student-t's ν when fixed).
    extra, extra_rows : tuple of Variable
        Further predictors (a Student-t's ``log ν`` when sampled) and their derivatives.
    """

    name: str
    family: LocationScaleFamily
    mu: Variable
    log_sigma: Variable
    y: Variable
    mu_rows: Variable
    log_sigma_rows: Variable
    params: tuple[Variable, ...] = ()
    extra: tuple[Variable, ...] = ()
    extra_rows: tuple[Variable, ...] = ()
    #: every predictor is affine (:attr:`GLMTerm.curvature`)
    curvature: ClassVar[None] = None

    @property
    def predictors(self) -> tuple[Variable, ...]:
        """``(μ, λ, *extra)``."""
        return (self.mu, self.log_sigma, *self.extra)

    @property
    def predictor_rows(self) -> tuple[Variable, ...]:
        """Their derivatives in ``θ``, in the same order."""
        return (self.mu_rows, self.log_sigma_rows, *self.extra_rows)


def _location_scale_family(
    block, lik: SubsampledLikelihood
) -> tuple[LocationScaleFamily, tuple] | None:
    """The location–scale family of one observed variable and what it reads, or None.

    A family with further predictors (:attr:`LocationScaleFamily.log_params`) is taken when one
    of them is sampled; one without when its σ is sampled.
    """
    op = block.rv.owner.op
    # families with further predictors first: a Student-t with ν and σ sampled is theirs
    for fam in sorted(location_scale_families(), key=lambda f: not f.log_params):
        if not isinstance(op, fam.rv_op) or block.value.type.ndim != 1:
            continue
        read = fam.read(op.dist_params(block.rv.owner))
        if read is None:
            continue
        _, sd, values = read
        logged = values[len(fam.params):]
        if fam.log_params:
            if any(_depends_on_parameters(v, lik) for v in logged):
                return fam, read
        elif _depends_on_parameters(sd, lik):
            return fam, read
    return None


def detect_location_scale_terms(lik: SubsampledLikelihood) -> list[LocationScaleTerm] | None:
    """Every observed variable as a location–scale family with a sampled σ (or a sampled
    further parameter, a Student-t's ν), or None.

    None when any observed variable is something else (the GLM path then reads the model).

    Raises
    ------
    SubsamplingModelError
        Naming the variable, when it is such a family with a sampled σ but its location or
        ``log σ`` is not affine in the sampled parameters (``σ = exp(λ)`` or a positive prior
        on σ, whose log transform is the sampled value, are), or another parameter is sampled
        that no family takes as a predictor.
    """
    n_rows = lik.idx.shape[0]
    found = []
    for block in lik.blocks:
        detected = _location_scale_family(block, lik)
        if detected is None:
            return None
        fam, (mu, sd, values) = detected
        op = block.rv.owner.op
        n_fixed = len(fam.params)
        params = _fixed_per_row(
            block.name, fam, values[:n_fixed], lik,
            "its sigma and its {param} are both sampled (MHSS bounds {family})",
        )
        named = (("mean", mu, False), ("log(sigma)", fam.log_scale(sd, values[n_fixed:]), False),
                 *((f"log({p})", v, True) for p, v in zip(fam.log_params, values[n_fixed:],
                                                          strict=True)))
        # log(exp(λ)) → λ before the affinity check
        graphs = [_simplify_log(v) for v in lik.in_theta(
            [pt.broadcast_to(pt.log(v) if logged else v, (n_rows,)) for _, v, logged in named])]
        rows_of = []
        # the further predictors first: a Student-t's second predictor is log(σ√ν), and a
        # log ν that is not affine is named as such
        for (what, _, _), graph in reversed(list(zip(named, graphs, strict=True))):
            try:
                rows_of.insert(0, _rows_of_affine(block.name, graph, lik.theta))
            except SubsamplingModelError:
                raise _unsupported(
                    block.name, f"it is a {_dist_name(op)} with a sampled "
                    f"{'nu' if fam.log_params else 'sigma'}, but its {what} is not affine in the "
                    "sampled parameters (exp(affine) or a positive prior on the parameter are)"
                ) from None
        found.append(LocationScaleTerm(block.name, fam, graphs[0], graphs[1], block.value,
                                       rows_of[0], rows_of[1], params, tuple(graphs[2:]),
                                       tuple(rows_of[2:])))
    return found


def location_scale_terms(
    term: LocationScaleTerm, *predictors: Variable
) -> tuple[Variable, tuple[Variable, ...], tuple[Variable, ...]]:
    """``f``, its gradient ``(f_1, ..., f_K)`` and Hessian ``(f_11, f_12, ..., f_1K, f_22,
    ..., f_KK)`` (upper triangle, row by row) in the predictors, per row, as float64 graphs of
    given predictor values.

    The family's row log-density (:meth:`~pymc_subsample.bounds.LocationScaleFamily.logp`)
    differentiated elementwise: each row's ``f`` depends on its own predictors only, so the
    gradient of ``Σ f`` in the vector of first predictors is the per-row ``f_1``, and so on.
    """
    ps = [pt.vector(f"predictor_{j}", dtype="float64") for j in range(len(predictors))]
    f = term.family.logp(ps[0], ps[1], pt.cast(term.y, "float64"), *term.params, *ps[2:])
    f = pt.cast(pt.broadcast_to(f, ps[0].shape), "float64")
    grad = pt.grad(f.sum(), ps, disconnected_inputs="ignore")
    hess = [pt.grad(grad[j].sum(), ps[k], disconnected_inputs="ignore")
            for j, k in upper_pairs(len(ps))]
    out = graph_replace([f, *grad, *hess],
                        {p: pt.cast(v, "float64") for p, v in zip(ps, predictors, strict=True)},
                        strict=False)
    return out[0], tuple(out[1 : 1 + len(ps)]), tuple(out[1 + len(ps) :])


def upper_pairs(n_predictors: int) -> list[tuple[int, int]]:
    """``(j, k)``, ``j ≤ k``, in the order of :func:`location_scale_terms`'s Hessian."""
    return [(j, k) for j in range(n_predictors) for k in range(j, n_predictors)]


class LocationScalePass(GLMPass):
    """:class:`GLMPass` for rows with several predictors: a location, a log-scale and any
    further ones (a Student-t's ``log ν``).

    One compiled function of ``(θ, idx)`` gives, per chunk, each row's predictor rows
    ``a_j = ∂p_j/∂θ`` (autodiff, checked free of ``θ``) and the family's gradient and Hessian
    in the predictors (:func:`location_scale_terms`); NumPy's BLAS then forms
    ``Σ ∇ℓ_i = Σ_j f_j a_j`` and ``Σ ∇²ℓ_i = Σ_{j,k} f_jk a_ja_kᵀ``, and, given a whitening and
    an order, the region constants: :func:`~pymc_subsample.bounds.combine_partials` with the
    angle between the two whitened rows (which scales the mixed terms) for two predictors,
    :func:`~pymc_subsample.bounds.combine_multi_partials` for more. The same pass thus gives
    the reference fit's sums and the constants, several times faster to compile and run than
    the generic autodiff Hessian. The constants hold on ``‖φ‖ ≤ r`` only, for ``M`` without
    Lemma 1's angle factors (:attr:`sharp_angles` is ``False``).
    """

    sharp_angles = False
    # the subsample Newton steps may send a scale to where both likelihoods lose all precision
    # (values near -1e223, or NaN): the check waits for the first full pass, near the mode
    check_subsamples = False

    def __init__(self, lik: SubsampledLikelihood, terms: list[LocationScaleTerm]) -> None:
        self.lik, self.terms = lik, terms
        self._compile_pass()
        self.region_radius = region_radius(lik.dim)

    def _term_outputs(self, term: LocationScaleTerm) -> list[Variable]:
        """``Σ f``, the predictor rows, the gradient and Hessian in the predictors, the
        predictors, ``y`` and the fixed parameters."""
        f, grad, hess = location_scale_terms(term, *term.predictors)
        total = f.sum()
        # a scale that under- or overflows (a Newton step that overshoots) makes the family's
        # f NaN where the model's is -inf: zero density either way
        total = pt.switch(pt.isnan(total), -np.inf, total)
        return [total, *term.predictor_rows, *grad, *hess,
                *(pt.cast(p, "float64") for p in term.predictors),
                pt.cast(term.y, "float64"), *term.params]

    def _term_pieces(self, term: LocationScaleTerm, outputs: list, n: int) -> tuple:
        """``(rows, grad, hess, predictors, y, κ)``, each of the first four a tuple over the
        predictors (:meth:`GLMPass.rows` returns these per variable); a predictor the same on
        every row (one σ for all) comes out as a single row, broadcast."""
        k = term.family.n_predictors
        dim = self.lik.dim
        rows = tuple(np.broadcast_to(np.asarray(x).reshape(-1, dim), (n, dim))
                     for x in outputs[:k])
        grad = tuple(outputs[k : 2 * k])
        n_hess = k * (k + 1) // 2
        hess = tuple(outputs[2 * k : 2 * k + n_hess])
        preds = tuple(outputs[2 * k + n_hess : 3 * k + n_hess])
        y, *params = outputs[3 * k + n_hess :]
        return rows, grad, hess, preds, y, tuple(params)

    def _term_sums(self, piece: tuple) -> tuple[np.ndarray, np.ndarray]:
        """``Σ_j f_j a_j`` and ``Σ_{j,k} f_jk a_ja_kᵀ`` of one variable on a block."""
        rows, grad, hess, *_ = piece
        g = sum(x.T @ f for x, f in zip(rows, grad, strict=True))
        h = 0.0
        for (j, k), f in zip(upper_pairs(len(rows)), hess, strict=True):
            block = rows[j].T @ (f[:, None] * rows[k])
            h = h + (block if j == k else block + block.T)
        return g, h

    def _constants_store(self, order: int, levels: int):
        """The shared-scale bound's :class:`~pymc_subsample.bounds.SharedScaleRows` for one
        observed variable (Corollary 2's constants among them), else ``c_i``."""
        if len(self.terms) == 1:
            return SharedScaleRows.empty(self.lik.n_rows, order,
                                         self.terms[0].family.n_predictors)
        return super()._constants_store(order, 0)

    def _row_constants(self, term, order, piece, whiten_rows, levels=0) -> np.ndarray | tuple:
        """The region constants of one variable's rows (with the angle between the two
        whitened predictor rows when there are two); for a model of one observed variable,
        with the shared-scale bound's pieces ``(weights, c_i, ℓ or None)``
        (:func:`~pymc_subsample.bounds.shared_scale_rows`)."""
        if whiten_rows is None:
            raise ValueError("two-predictor constants hold on a region of the Laplace frame "
                             "only: pass whiten_rows")
        rows, _, _, preds, y, params = piece
        # one σ (ν) for all rows: one whitened row ℓ, exactly the same on every row
        shared = all(bool(np.all(x == x[:1])) for x in rows[1:])
        whitened = [whiten_rows(rows[0])]
        for x in rows[1:]:
            whitened.append(np.broadcast_to(whiten_rows(x[:1]), x.shape) if shared
                            else whiten_rows(x))
        norms = tuple(_row_norms(x) for x in whitened)
        sup = term.family.all_suprema(order, norms, y, preds, self.region_radius, params)
        cos = (row_cosines(whitened[0], whitened[1], norms[0], norms[1]) if len(rows) == 2
               else None)
        plain = combine_predictor_partials(order, sup, norms, cos)
        if len(self.terms) != 1:
            return plain
        temperature = self.lik.temperature
        weights = shared_scale_rows(order, {k: v / temperature for k, v in sup.items()},
                                    norms[0])
        shared_rows = np.array([x[0] for x in whitened[1:]])
        return (weights, round_up_float32(plain / temperature),
                (shared_rows[0] if len(rows) == 2 else shared_rows) if shared else None)


def _row_norms(rows: np.ndarray) -> np.ndarray:
    return np.sqrt(np.einsum("ij,ij->i", rows, rows))


def row_cosines(first: np.ndarray, second: np.ndarray, s_first: np.ndarray,
                s_second: np.ndarray) -> np.ndarray:
    """Cosine of the angle between two whitened predictor rows, row by row (1 where a row is
    zero: its terms vanish whatever the factor)."""
    dots = np.einsum("ij,ij->i", first, second)
    norms = s_first * s_second
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norms > 0.0, dots / norms, 1.0)
