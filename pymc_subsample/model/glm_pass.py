"""The pass over the data of a GLM: one affine or quadratic predictor a row, the family's
closed-form derivatives and NumPy's BLAS (:class:`GLMPass`); the sums the reference point and
the control variates need, and the MHSS row constants ``c_i`` in the same pass.

Which families there are, and how a predictor is read off the graph:
:mod:`pymc_subsample.model.glm`; the interface every pass implements:
:class:`~pymc_subsample.model.data_pass.DataPass`.
"""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Callable, Iterable

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Variable
from threadpoolctl import threadpool_limits

from pymc_subsample.bounds import (
    LevelRows,
    level_rows,
    quadratic_row_constants,
    region_radius,
    row_norms,
    split_level_rows,
)
from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.kernels.gram import weighted_gram
from pymc_subsample.kernels.indexing import round_up_float32
from pymc_subsample.model.data_pass import PassResult
from pymc_subsample.model.frame import LaplaceFrame
from pymc_subsample.model.glm import (
    GLMTerm,
    detect_glm_terms,
    family_terms,
    not_affine,
    unsupported,
    weighted_curvature,
)
from pymc_subsample.model.levels import LevelHessian, SecondLevels, SplitRows
from pymc_subsample.model.likelihood import SubsampledLikelihood

__all__ = ["GLMPass", "QUADRATIC_MAX_DIM", "glm_bound_constants"]

#: Serialises compiling a function that a block needs on first use (PyTensor's compiler
#: keeps process-wide state).
_COMPILE_LOCK = threading.Lock()

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
    #: the closed-form constants cost little beside the pass
    #: (:class:`~pymc_subsample.model.data_pass.DataPass`); costly ones (an automatic bound's)
    #: are made through a cell grid from the pass's first block, which the constants pass
    #: then computes before the others (:meth:`full`)
    speculative_constants = True
    #: compile the pass as NumPy calls whatever ``N`` where every elementwise op has a ufunc
    #: (:meth:`SubsampledLikelihood.compile` with ``gil_free``): a GLM's pass then costs the
    #: CPU time of its C code on one thread (0.79 CPU s both at 10⁷ logistic rows, d = 10,
    #: ``docs/benchmarks.md``) and releases Python's GIL, which the C code holds, so its
    #: threads overlap
    gil_free_pass = True

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

    def _compile_pass(self) -> None:
        """The pass function of ``(θ, idx)``: per observed variable :meth:`_term_outputs` (the
        family's sum first); and the check's, per observed variable the model's own ``Σ ℓ_i``
        on the rows ``idx`` (:meth:`rows` with ``check``).

        The pass function is NumPy calls where :attr:`gil_free_pass` allows it, else compiled
        as a setup function (NumPy calls up to
        :data:`~pymc_subsample.model.likelihood.NUMPY_PASS_ROWS` rows, C code above). The
        check's function is compiled apart, as NumPy calls where every elementwise op has
        a ufunc (``gil_free``): those release Python's GIL, so on the pass's threads it runs
        beside the compiled pass of another block, where in the pass's C code (a lazy branch)
        it held the GIL, about half of the first full pass's time in the compiled function
        (``docs/benchmarks.md``, "Setup before the first draw").
        """
        lik = self.lik
        outputs, self._widths = [], []
        for term in self.terms:
            term_outputs = self._term_outputs(term)
            outputs += term_outputs
            self._widths.append(len(term_outputs))
        self._fn = lik.compile([lik.theta, lik.idx], outputs, setup=True,
                               gil_free=self.gil_free_pass)
        self._check_fn = lik.compile(
            [lik.theta, lik.idx],
            [pt.cast(model_terms, "float64").sum() for model_terms in lik.block_terms],
            gil_free=True)
        # the model's terms and the family's f round differently, more so in float32 models
        float64 = all(v.dtype == "float64" for v in lik.value_vars)
        self._family_rtol = 1e-8 if float64 else 1e-4
        self.n_passes = 0
        #: the lists of subsample rows checked so far (:meth:`full`)
        self._checked_subsamples: list = []
        # a quadratic predictor's curvature functions, compiled on first use (_curvature_fn)
        # into the dict this pass shares with its thread copies; each calls its own
        self._curvature_fns: dict[str, Callable] = {}
        self._shared_curvature_fns = self._curvature_fns

    def thread_copy(self) -> GLMPass:
        """:meth:`DataPass.thread_copy <pymc_subsample.model.data_pass.DataPass.thread_copy>`:
        the pass function copied (``Function.copy``: the compiled code shared, the storage its
        own), and each curvature function when the copy first uses it."""
        twin = copy.copy(self)
        twin._fn = self._fn.copy()
        twin._check_fn = self._check_fn.copy()
        twin._curvature_fns = {}
        return twin

    def _term_outputs(self, term: GLMTerm) -> list[Variable]:
        """``Σ f``, then the rows ``x``, ``f'``, ``f''``, ``y``, ``η``, the fixed parameters
        and, for a quadratic predictor, ``Σ f'_i ∂²η_i/∂θ²``."""
        f, f1, f2 = family_terms(term, term.eta)
        split = term.split
        rows = [term.rows] if self.levels is None else (
            [split.fixed_rows, split.level, split.value]
            + ([split.level2, split.value2] if split.second_columns is not None else []))
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
            fixed, level, value, *outputs = outputs
            # u[g] with a negative g counts from the end, as NumPy's (and PyTensor's) indexing
            level = np.where(level < 0, level + self.levels.n_levels, level)
            second = None
            if (columns := term.split.second_columns) is not None:
                level2, value2, *outputs = outputs
                n2 = columns.stop - columns.start
                second = SecondLevels(columns, np.where(level2 < 0, level2 + n2, level2),
                                      value2)
            f1, f2, y, eta, *params = outputs
            x = SplitRows(np.asarray(fixed).reshape(n, -1), level, value, self.levels, second)
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
        out = self._fn(theta, idx)
        model_sums = self._check_fn(theta, idx) if check else None
        total, pieces, start = 0.0, [], 0
        for k, (term, width) in enumerate(zip(self.terms, self._widths, strict=True)):
            family_sum, *rest = out[start : start + width]
            start += width
            if check:
                self._check_family(term, float(model_sums[k]), float(family_sum), len(idx))
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
        # function of (η_i, y_i) alone, so later passes only change η. The reference fit's
        # Newton steps hand over the same list of subsample rows again: checked the first time
        seen = not full_data and any(rows is idx_chunks for rows in self._checked_subsamples)
        check = self.n_passes == 0 and (full_data or (self.check_subsamples and not seen))
        if check and not full_data:
            self._checked_subsamples.append(idx_chunks)
        if order is not None:
            for term in self.terms:
                if term.curvature is not None:
                    self._curvature_fn(term)  # compiled here, before the pass's threads
        # one BLAS thread: the products are thin (chunk × d), and a threaded BLAS on a busy or
        # multi-process machine (pm.sample with cores > 1) is up to 50× slower here
        with threadpool_limits(limits=1, user_api="blas"):
            results = lik.map_row_blocks(
                self, theta, check, order, whiten_rows, levels, chunks=idx_chunks,
                first_alone=order is not None and not self.speculative_constants)
            for chunk, (s, gb, hb, cb) in results:
                total, g, h = total + s, g + gb, h + hb
                if isinstance(consts, np.ndarray):
                    consts[chunk] = cb
                elif consts is not None:
                    consts.fill(chunk, cb)
        if full_data:
            self.n_passes += 1
            self._checked_subsamples.clear()  # no pass checks any more
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
        hess = weighted_gram(x, f2)
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
        step = max(1, (1 << 22) // self.lik.dim**2)
        fn = self._curvature_fn(term)
        return np.concatenate([fn(theta, chunk[i : i + step], sd)
                               for i in range(0, len(chunk), step)])

    def _curvature_fn(self, term: GLMTerm) -> Callable:
        """The compiled ``q_i`` of :meth:`_curvature_norms` for ``term``, of this pass or of
        this thread copy. :meth:`full` compiles it before its blocks run on other threads;
        compilation is serialised anyway (PyTensor's compiler is not thread-safe)."""
        fn = self._curvature_fns.get(term.name)
        if fn is None:
            with _COMPILE_LOCK:
                shared = self._shared_curvature_fns
                if term.name not in shared:
                    weights = pt.vector("sd", dtype="float64")
                    q = (pt.abs(term.curvature) * pt.outer(weights, weights)).sum(axis=(1, 2))
                    shared[term.name] = self.lik.compile(
                        [self.lik.theta, self.lik.idx, weights], pt.cast(q, "float64"))
                fn = shared[term.name]
                fn = fn if shared is self._curvature_fns else fn.copy()
            self._curvature_fns[term.name] = fn
        return fn

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

