"""The passes over the data: the sums the reference point and the control variates need
(``Σ ℓ_i``, ``Σ ∇ℓ_i``, ``Σ ∇²ℓ_i`` at ``θ``) and, for the families MHSS bounds, the row
constants ``c_i`` in the same pass.

Three passes share one interface, :class:`DataPass`: :class:`GLMPass` (one affine or quadratic
predictor a row, the family's closed-form derivatives and NumPy's BLAS), its subclass
:class:`LocationScalePass` (a location, a log-scale and further predictors a row) and
:class:`GenericPass` (any model, by autodiff). Each runs its :meth:`DataPass.block` over the
rows through :meth:`~pymc_subsample.model.likelihood.SubsampledLikelihood.map_row_blocks`,
locally or as tasks on a ``dask.distributed`` cluster (:mod:`pymc_subsample.model.cluster`).
Which families there are, and how a predictor is read off the graph:
:mod:`pymc_subsample.model.glm`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import grad, jacobian
from pytensor.graph.basic import Variable
from pytensor.ifelse import ifelse
from threadpoolctl import threadpool_limits

from pymc_subsample.bounds import (
    LevelRows,
    SharedScaleRows,
    combine_predictor_partials,
    level_rows,
    quadratic_row_constants,
    region_radius,
    row_cosines,
    row_norms,
    shared_scale_rows,
    split_level_rows,
)
from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.kernels.indexing import round_up_float32
from pymc_subsample.model.frame import LaplaceFrame, hessian_by_differences
from pymc_subsample.model.glm import (
    GLMTerm,
    LocationScaleTerm,
    detect_glm_terms,
    family_terms,
    location_scale_terms,
    not_affine,
    unsupported,
    upper_pairs,
    weighted_curvature,
)
from pymc_subsample.model.levels import LevelHessian, LevelLayout, SplitRows
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.model.predictors import PredictorTerm, check_finite_suprema

__all__ = [
    "DataPass",
    "GLMPass",
    "GenericPass",
    "LocationScalePass",
    "PassResult",
    "QUADRATIC_MAX_DIM",
    "glm_bound_constants",
]


class DataPass(Protocol):
    """What a pass over the data provides (:class:`GLMPass`, :class:`LocationScalePass`,
    :class:`GenericPass`); the reference fit and the steps' setup read nothing else."""

    #: the likelihood whose rows the pass reads
    lik: SubsampledLikelihood
    #: the families read off the observed variables (the control variates then use their
    #: closed forms), or ``None`` for a pass by autodiff
    terms: list[GLMTerm] | list[LocationScaleTerm] | None
    #: passes over all N rows made so far (subsample passes do not count)
    n_passes: int
    #: one grouping factor's levels when the pass splits rows by them (its Hessian sums are
    #: then a :class:`~pymc_subsample.model.levels.LevelHessian`), else None
    levels: LevelLayout | None
    #: the row constants cost little beside the pass, so the reference fit asks for them on
    #: every pass that may be the last; ``False`` (an automatic bound's interval enclosures):
    #: only on a pass at a point already found to be the mode
    speculative_constants: bool

    def block(self, chunk: np.ndarray, theta: np.ndarray, *args) -> tuple:
        """The sums (and the pass's row constants, if any) on the rows ``chunk``: what
        :meth:`full` adds up, one block of rows at a time, locally or on a worker."""
        ...

    def full(self, theta: np.ndarray, *, idx_chunks: Iterable[np.ndarray] | None = None,
             weight: float = 1.0, whiten_rows: Callable | None = None, order: int | None = None,
             levels: int = 0) -> PassResult:
        """Sums at ``θ`` over all rows (or ``idx_chunks``, times ``weight``), with the row
        constants of Taylor order ``order`` where the pass computes them."""
        ...


@dataclass(frozen=True)
class PassResult:
    """What one pass over the data returns (everything divided by the temperature).

    Attributes
    ----------
    loglik : float
        ``Σ_i ℓ_i(θ)``.
    grad : ndarray, shape (d,)
        ``Σ_i ∇ℓ_i(θ) = Σ_i f'_i x_i``.
    hess : ndarray, shape (d, d), or LevelHessian
        ``Σ_i ∇²ℓ_i(θ) = Σ_i f''_i x_i x_iᵀ``; by per-level sums when the pass splits rows by
        a grouping factor's levels.
    row_constants : ndarray, shape (N,), LevelRows, SharedScaleRows or None
        MHSS constants ``c_i`` when asked for, or a rate bound's pieces (see
        :meth:`GLMPass.full`).
    """

    loglik: float
    grad: np.ndarray
    hess: np.ndarray | LevelHessian
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
    #: the closed-form constants cost little beside the pass (:class:`DataPass`)
    speculative_constants = True

    def __init__(self, lik: SubsampledLikelihood, terms: list[GLMTerm] | None = None) -> None:
        self.lik = lik
        self.terms = detect_glm_terms(lik) if terms is None else terms
        # one observed variable of one affine predictor on one factor's many levels: its rows
        # are read split (x_F, k_i, t_i) and the Hessian summed per level, O(N·d_F²) a pass
        split = self.terms[0].split if len(self.terms) == 1 else None
        self.levels = None if split is None else split.layout
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
        self._fn = lik.compile([lik.theta, lik.idx, check], outputs, setup=True)
        # the model's terms and the family's f round differently, more so in float32 models
        float64 = all(v.dtype == "float64" for v in lik.value_vars)
        self._family_rtol = 1e-8 if float64 else 1e-4
        self.n_passes = 0

    def _term_outputs(self, term: GLMTerm) -> list[Variable]:
        """``Σ f``, then the rows ``x``, ``f'``, ``f''``, ``y``, ``η``, the fixed parameters
        and, for a quadratic predictor, ``Σ f'_i ∂²η_i/∂θ²``."""
        f, f1, f2 = family_terms(term, term.eta)
        rows = ([term.split.fixed_rows, term.split.level, term.split.value]
                if self.levels is not None else [term.rows])
        out = [f.sum(), *rows, f1, f2, pt.cast(term.y, "float64"),
               pt.cast(term.eta, "float64"), *term.params]
        if term.curvature is not None:
            out.append(weighted_curvature(term.eta, self.lik.theta, f1))
        return out

    def _term_pieces(self, term: GLMTerm, outputs: list, n: int) -> tuple:
        """One variable's :meth:`_term_outputs` after ``Σ f`` as :meth:`rows` returns them:
        ``(x, f', f'', y, η, κ, Σ f'∂²η or None)``, ``x`` as :class:`SplitRows` when the pass
        splits rows by level."""
        if self.levels is not None:
            fixed, level, value, f1, f2, y, eta, *params = outputs
            # u[g] with a negative g counts from the end, as NumPy's (and PyTensor's) indexing
            level = np.where(level < 0, level + self.levels.n_levels, level)
            x = SplitRows(np.asarray(fixed).reshape(n, -1), level, value, self.levels)
            return x, f1, f2, y, eta, tuple(params), None
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

    def full(self, theta: np.ndarray, *, idx_chunks: Iterable[np.ndarray] | None = None,
             weight: float = 1.0, whiten_rows: Callable | None = None, order: int | None = None,
             levels: int = 0) -> PassResult:
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
        total, g = 0.0, np.zeros(lik.dim)
        h = 0.0 if self.levels is not None else np.zeros((lik.dim, lik.dim))
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
            results = lik.map_row_blocks(self, theta, check, order, whiten_rows, levels,
                                         chunks=idx_chunks)
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
        hess = h.symmetrised() if isinstance(h, LevelHessian) else 0.5 * (h + h.T)
        return PassResult(total * weight, g * k, hess * k, consts)

    def _constants_store(self, order: int, levels: int):
        """Where :meth:`full` puts the constants of all N rows: the level bound's
        :class:`~pymc_subsample.bounds.LevelRows` when the frame has levels, else ``c_i`` as
        float32 rounded up (4 bytes a row, still bounds: :mod:`pymc_subsample.kernels.indexing`)."""
        n_rows = self.lik.n_rows
        if levels:
            return LevelRows.empty(n_rows, levels, order)
        return np.zeros(n_rows, dtype=np.float32)

    def block(self, chunk: np.ndarray, theta: np.ndarray, check: bool, order: int | None,
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
        if isinstance(x, SplitRows):
            return x.sums(f1, f2)
        hess = x.T @ (f2[:, None] * x)
        return x.T @ f1, hess if curvature_sum is None else hess + curvature_sum

    def _quadratic_constants(self, term, order, piece, whiten_rows, theta, chunk) -> np.ndarray:
        """``c_i`` of rows with a quadratic predictor
        (:func:`~pymc_subsample.bounds.quadratic_row_constants`), at ``θ̂``."""
        if whiten_rows is None:
            raise ValueError("constants for a quadratic predictor hold on a region of the "
                             "Laplace frame only: pass whiten_rows")
        x, f1, _, y, eta_hat, params, _ = piece
        sd = row_norms(whiten_rows(np.eye(self.lik.dim)))  # σ_j = ‖Lᵀe_j‖
        q = self._curvature_norms(term, theta, chunk, sd)
        return quadratic_row_constants(term.family, order, row_norms(whiten_rows(x)), q, f1,
                                       y, params, eta_hat, self.region_radius)

    def check_curvature_size(self) -> None:
        """Refuse, naming the variable, a quadratic predictor among more than
        :data:`QUADRATIC_MAX_DIM` parameters: its constants need each row's ``d × d`` second
        derivatives (:meth:`_curvature_norms`), whose cost grows like ``N d²``."""
        for term in self.terms:
            if term.curvature is not None and self.lik.dim > QUADRATIC_MAX_DIM:
                raise unsupported(
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
        if isinstance(x, SplitRows):
            x = x.dense()  # Corollary 2's constants alone: not on the level-bound path
        whitened = whiten_rows is not None
        xt = whiten_rows(x) if whitened else x
        radius = self.region_radius if term.family.region_only and whitened else math.inf
        return term.family.row_constants(order, row_norms(xt), y, params, eta_hat=eta_hat,
                                         radius=radius)

    def _level_rows(self, term, order, piece, whiten_rows, levels) -> tuple[np.ndarray, ...]:
        """The level bound's pieces of one chunk (:func:`level_rows`): the supremum on the
        same interval as :meth:`_row_constants`, the whitened rows split by level."""
        x, _, _, y, eta_hat, params, _ = piece
        xt = whiten_rows(x)
        split = isinstance(xt, SplitRows)
        norms = xt.norms() if split else row_norms(xt)
        radius = self.region_radius if term.family.region_only else math.inf
        sup = term.family.row_sup(order, norms, y, params, eta_hat=eta_hat,
                                  radius=radius) / self.lik.temperature
        if split:
            return split_level_rows(order, sup, xt.fixed, xt.level, xt.value, levels)
        return level_rows(order, sup, xt, levels, norms)


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
            raise not_affine(term.name)
    whiten = frame.whiten_rows if frame is not None else None
    return glm_pass.full(theta_hat, whiten_rows=whiten, order=order).row_constants


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
    levels = None
    # the subsample Newton steps may send a scale to where both likelihoods lose all precision
    # (values near -1e223, or NaN): the check waits for the first full pass, near the mode
    check_subsamples = False

    def __init__(self, lik: SubsampledLikelihood,
                 terms: list[LocationScaleTerm] | list[PredictorTerm]) -> None:
        self.lik, self.terms = lik, terms
        self._compile_pass()
        self.region_radius = region_radius(lik.dim)
        # one predictor a row (an automatic bound's): the derivative tensor is of rank one
        self.sharp_angles = all(t.family.n_predictors == 1 for t in terms)
        # an automatic bound's enclosures cost several passes: computed once, at the mode
        self.speculative_constants = not any(t.family.costly_suprema for t in terms)

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
        if len(self.terms) == 1 and self.terms[0].family.n_predictors > 1:
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
        norms = tuple(row_norms(x) for x in whitened)
        sup = term.family.all_suprema(order, norms, y, preds, self.region_radius, params)
        check_finite_suprema(term, sup, y)
        cos = (row_cosines(whitened[0], whitened[1], norms[0], norms[1]) if len(rows) == 2
               else None)
        plain = combine_predictor_partials(order, sup, norms, cos)
        if len(self.terms) != 1 or len(rows) == 1:
            return plain
        temperature = self.lik.temperature
        weights = shared_scale_rows(order, {k: v / temperature for k, v in sup.items()},
                                    norms[0])
        shared_rows = np.array([x[0] for x in whitened[1:]])
        return (weights, round_up_float32(plain / temperature),
                (shared_rows[0] if len(rows) == 2 else shared_rows) if shared else None)


class GenericPass:
    """Passes over the data for any model: ``Σ ℓ_i``, ``Σ ∇ℓ_i`` and ``Σ ∇²ℓ_i`` at ``θ``.

    GLMs have a faster pass that also yields the MHSS constants, :class:`GLMPass`; both are
    :class:`DataPass` es. This one has no family terms and computes no row constants.

    Parameters
    ----------
    lik : SubsampledLikelihood
    exact_hessian : bool
        ``True``: the Hessian is the vectorised Jacobian of the gradient (autodiff, no scan),
        exact to rounding, as the order-2 control variates need (their ``H`` must be the sum
        of the per-row Hessians their remainders use). ``False``: central differences of the
        autodiff gradient (:func:`hessian_by_differences`), far more accurate than the Laplace
        frame and Newton's method need. The gradient alone compiles several times
        faster than its Jacobian on a large graph (a mixture: about 25 s against 80 s of C
        compilation on a cold cache), at ``2d`` gradient evaluations per chunk.

    Attributes
    ----------
    n_passes : int
        Passes over all N rows made so far.
    """

    #: no family read off the graph: the control variates use autodiff
    terms = None
    levels = None
    #: no row constants here
    speculative_constants = True

    def __init__(self, lik: SubsampledLikelihood, *, exact_hessian: bool = True) -> None:
        self.lik = lik
        self.exact_hessian = exact_hessian
        total = lik.terms.sum()
        g = grad(total, lik.theta)
        outputs = [total, g, jacobian(g, lik.theta, vectorize=True)] if exact_hessian else [
            total, g]
        self._fn = lik.compile([lik.theta, lik.idx], outputs, setup=True)
        self.n_passes = 0

    def block(self, chunk: np.ndarray, theta: np.ndarray):
        """``(Σ ℓ_i, Σ ∇ℓ_i, Σ ∇²ℓ_i)`` on the rows ``chunk``."""
        if self.exact_hessian:
            return self._fn(theta, chunk)
        value, g = self._fn(theta, chunk)
        return value, g, hessian_by_differences(lambda t: self._fn(t, chunk)[1], theta)

    def full(self, theta, *, idx_chunks=None, weight=1.0, whiten_rows=None, order=None,
             levels=0):
        """Sums at ``θ`` over all rows (or ``idx_chunks``, times ``weight``).

        ``whiten_rows``, ``order`` and ``levels`` belong to :class:`DataPass`; here the result
        has no row constants (they come from a bound, not from this pass).
        """
        lik = self.lik
        theta = np.asarray(theta, dtype=np.float64)
        full_data = idx_chunks is None
        s, gs, hs = 0.0, np.zeros(lik.dim), np.zeros((lik.dim, lik.dim))
        for _, (ci, gi, hi) in lik.map_row_blocks(self, theta, chunks=idx_chunks):
            s, gs, hs = s + float(ci), gs + gi, hs + hi
        if full_data:
            self.n_passes += 1
        return PassResult(s * weight, gs * weight, 0.5 * (hs + hs.T) * weight)
