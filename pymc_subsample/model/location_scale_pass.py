"""The pass over the data of rows with several predictors (a location, a log-scale, a
Student-t's ``log ν``, or an automatic bound's): :class:`LocationScalePass`, a
:class:`~pymc_subsample.model.glm_pass.GLMPass` whose per-row pieces are the family's
gradient and Hessian in the predictors."""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Variable

from pymc_subsample.bounds import (
    SharedScaleRows,
    combine_predictor_partials,
    region_radius,
    row_cosines,
    row_norms,
    shared_scale_rows,
)
from pymc_subsample.kernels.gram import weighted_gram
from pymc_subsample.kernels.indexing import round_up_float32
from pymc_subsample.model.glm_pass import GLMPass
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.model.location_scale import (
    LocationScaleTerm,
    location_scale_terms,
    upper_pairs,
)
from pymc_subsample.model.predictors import PredictorTerm, check_finite_suprema

__all__ = ["LocationScalePass"]


def _shared_row(x: np.ndarray) -> np.ndarray | None:
    """The one row of a predictor's rows broadcast from a single row (stride 0), else None."""
    return x[0] if x.shape[0] > 0 and x.strides[0] == 0 else None


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
    # NumPy calls only up to NUMPY_PASS_ROWS: a Student-t's closed forms as separate NumPy
    # calls (digamma and trigamma of ν on every row) cost twice its C code (1.0 against 0.47
    # CPU s a pass at 10⁶ rows)
    gil_free_pass = False
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
        # (through a cell grid made from the first block: GLMPass.speculative_constants)
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
        # a predictor shared by all rows (a scale, ψ, log α) has one row, broadcast: its
        # products are that row times a sum, O(n) instead of O(n·d²) per pair (the three
        # predictors of a hurdle negative binomial: 2.5 of the 5 s of its passes at 10⁶)
        shared = [_shared_row(x) for x in rows]
        g = sum(x.T @ f if a is None else a * np.sum(f)
                for x, a, f in zip(rows, shared, grad, strict=True))
        h = 0.0
        for (j, k), f in zip(upper_pairs(len(rows)), hess, strict=True):
            a, b = shared[j], shared[k]
            if j == k:
                block = weighted_gram(rows[j], f) if a is None else np.sum(f) * np.outer(a, a)
                h = h + block
                continue
            if a is None and b is None:
                block = rows[j].T @ (f[:, None] * rows[k])
            elif a is None:
                block = np.outer(rows[j].T @ f, b)
            elif b is None:
                block = np.outer(a, rows[k].T @ f)
            else:
                block = np.sum(f) * np.outer(a, b)
            h = h + block + block.T
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
        shared = all(_shared_row(x) is not None or bool(np.all(x == x[:1])) for x in rows[1:])
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
        if temperature != 1.0:  # (at 1 the division changes nothing: not a copy of each S_α)
            sup, plain = {k: v / temperature for k, v in sup.items()}, plain / temperature
        weights = shared_scale_rows(order, sup, norms[0])
        shared_rows = np.array([x[0] for x in whitened[1:]])
        return (weights, round_up_float32(plain),
                (shared_rows[0] if len(rows) == 2 else shared_rows) if shared else None)

