"""The control variates' remainders ``ξ_i`` in NumPy, from a table of per-row constants.

For a row whose log-likelihood is ``f(p_i; y_i, κ_i)`` in ``m`` predictors ``p_i = A_i θ + o_i``
affine in ``θ`` (a GLM's ``η``, ``m = 1``; a location–scale family's ``(μ, log σ, ...)``), the
order-``k`` remainder of eq. (4) of Prado, Nemeth & Sherlock (2024) is, with ``u = A_i(θ − θ̂)``,
``u' = A_i(θ' − θ̂)``, ``g_i = ∇_p f(p̂_i)`` and ``H_i = ∇²_p f(p̂_i)``,

    ξ_i = f(p̂_i + u') − f(p̂_i + u) − g_iᵀ(u' − u) [− ½ (u'ᵀH_i u' − uᵀH_i u)]

(:class:`~pymc_subsample.model.control_variates.TaylorControlVariate` builds the same
expression as a PyTensor graph). Everything in it but ``θ`` and ``θ'`` is a per-row constant:
``A_i``, ``p̂_i``, ``y_i``, ``κ_i``, ``g_i`` and ``H_i``. :class:`TabulatedRemainder` computes
them once, in one pass over the data at ``θ̂`` in the setup's NumPy mode, and keeps them as one
float64 array of ``N`` rows; an iteration then gathers its few rows and evaluates ``ξ_i`` with a
handful of NumPy calls and the family's own NumPy log-density (:meth:`Family.loglik
<pymc_subsample.bounds.Family.loglik>`, :meth:`LocationScaleFamily.loglik
<pymc_subsample.bounds.LocationScaleFamily.loglik>`).

Nothing is compiled to C: on a first run with an empty PyTensor cache that saves compiling the
remainder's C code (1–3 s, ``docs/benchmarks.md``), at a per-call cost close to the compiled
function's. The table holds ``N·(m·d + 2m + 1 + |κ| + m(m+1)/2)`` numbers, so it is used on
small data only (:data:`TABLE_ROWS`, :data:`TABLE_NUMBERS`), where the compile is most of the
setup; larger data, quadratic predictors, rows split by level, families known only from the
model's graph and float32 models keep the compiled graph.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt

from pymc_subsample.bounds import Family, LocationScaleFamily
from pymc_subsample.model.glm import GLMTerm, family_terms
from pymc_subsample.model.likelihood import NUMPY_PASS_ROWS, SubsampledLikelihood
from pymc_subsample.model.location_scale import (
    LocationScaleTerm,
    location_scale_terms,
    upper_pairs,
)

__all__ = ["TABLE_NUMBERS", "TABLE_ROWS", "TabulatedRemainder", "tabulable"]

#: Most rows ``N`` for which the remainders are tabulated: the setup's passes run in NumPy
#: there too (:data:`~pymc_subsample.model.likelihood.NUMPY_PASS_ROWS`), so nothing of the
#: setup is compiled to C.
TABLE_ROWS = NUMPY_PASS_ROWS

#: Most numbers in the table (float64: 64 MB).
TABLE_NUMBERS = 1 << 23


def _widths(term: GLMTerm | LocationScaleTerm, dim: int) -> tuple[int, int]:
    """``(m, columns)``: a term's predictors and its table's width."""
    m = 1 if isinstance(term, GLMTerm) else len(term.predictors)
    return m, m * dim + 2 * m + 1 + len(term.params) + m * (m + 1) // 2


def tabulable(lik: SubsampledLikelihood, terms: list | None) -> bool:
    """Whether :class:`TabulatedRemainder` evaluates the remainders of ``terms``: affine
    predictors of families with a NumPy log-density, a float64 model, and a table within
    :data:`TABLE_ROWS` rows and :data:`TABLE_NUMBERS` numbers."""
    if not terms or lik.n_rows > TABLE_ROWS or not lik.float64:
        return False
    for term in terms:
        if isinstance(term, GLMTerm):
            if (term.curvature is not None or term.rows is None
                    or not isinstance(term.family, Family) or not term.family.loglik_is_model):
                return False
        elif not isinstance(term.family, LocationScaleFamily):  # automatic: a graph only
            return False
    width = sum(_widths(term, lik.dim)[1] for term in terms)
    return lik.n_rows * width <= TABLE_NUMBERS


class TabulatedRemainder:
    """``ξ_i(θ, θ')`` of the order-``order`` control variates at ``θ̂`` in NumPy (module
    docstring), for the terms :func:`tabulable` accepts.

    Parameters
    ----------
    lik : SubsampledLikelihood
    terms : list of GLMTerm or of LocationScaleTerm
        The model's terms (:attr:`DataPass.terms <pymc_subsample.model.data_pass.DataPass>`).
    theta_hat : ndarray, shape (d,)
    order : {1, 2}
    """

    def __init__(self, lik: SubsampledLikelihood, terms: list, theta_hat: np.ndarray,
                 order: int) -> None:
        self.terms = list(terms)
        self.order = order
        self.dim = lik.dim
        self.theta_hat = np.array(theta_hat, dtype=np.float64)
        self.temperature = lik.temperature
        self._layout = [_widths(term, lik.dim) for term in self.terms]
        self._lik = lik
        self.tables = self._fill(lik)

    def __getstate__(self) -> dict:
        # the table is N rows: a process that receives the step (pm.sample with cores > 1)
        # fills its own from the data it already has, instead of a copy in the message
        return {**self.__dict__, "tables": None}

    # ------------------------------------------------------------------ setup
    def _outputs(self, lik: SubsampledLikelihood, term) -> tuple:
        """One term's predictor rows ``(n, m·d)`` and per-row constants ``(k, n)`` on the rows
        ``idx`` at ``θ``, as float64 graphs: ``p̂`` (m), ``y``, ``κ``, ``g`` (m) and ``H``'s
        upper triangle row by row, weighted as in ``½ uᵀHu``."""
        n = lik.idx.shape[0]
        if isinstance(term, GLMTerm):
            rows, predictors = [term.rows], [term.eta]
            _, f1, f2 = family_terms(term, term.eta)
            grad, hess = [f1], [f2]
        else:
            rows, predictors = list(term.predictor_rows), list(term.predictors)
            _, grad, hess = location_scale_terms(term, *predictors)
        # a predictor shared by all rows has one row (PredictorTerm.predictor_rows)
        rows = pt.concatenate([pt.broadcast_to(pt.reshape(r, (-1, lik.dim)), (n, lik.dim))
                               for r in rows], axis=1)
        # the Hessian's entries with their weights in ½ uᵀHu: ½ on the diagonal, 1 off it
        hess = [h * (0.5 if j == k else 1.0)
                for h, (j, k) in zip(hess, upper_pairs(len(predictors)), strict=True)]
        consts = pt.stack([pt.broadcast_to(pt.cast(v, "float64"), (n,))
                           for v in (*predictors, term.y, *term.params, *grad, *hess)])
        return pt.cast(rows, "float64"), consts

    def _fill(self, lik: SubsampledLikelihood) -> list[tuple[np.ndarray, np.ndarray]]:
        """The tables, ``(rows, constants)`` per term: one pass over the data at ``θ̂``, in
        the setup's NumPy mode."""
        outputs = [out for term in self.terms for out in self._outputs(lik, term)]
        fn = lik.compile([lik.theta, lik.idx], outputs, setup=True)
        n = lik.n_rows
        tables = [(np.empty((n, m * lik.dim)), np.empty((width - m * lik.dim, n)))
                  for m, width in self._layout]
        for idx in lik.row_chunks():
            blocks = fn(self.theta_hat, idx)
            start, stop = idx[0], idx[-1] + 1
            for t, (rows, consts) in enumerate(tables):
                rows[start:stop] = blocks[2 * t]
                consts[:, start:stop] = blocks[2 * t + 1]
        return tables

    # ------------------------------------------------------------------ per iteration
    def __call__(self, theta: np.ndarray, theta_new: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """``ξ_i(θ, θ')`` for the rows ``idx``; cost O(len(idx)·d), no data pass.

        Arrays are ``(2, n)``, the point ``θ`` in the first row and ``θ'`` in the second: each
        row of the table's constants then broadcasts along a contiguous axis, NumPy's fast path
        on a few rows."""
        if self.tables is None:  # unpickled: one pass at θ̂, the same numbers
            self.tables = self._fill(self._lik)
        moves = np.array((theta, theta_new)) - self.theta_hat  # from θ̂, as rows
        d, xi = self.dim, 0.0
        with np.errstate(all="ignore"):  # as the compiled code: inf and NaN, never warnings
            for term, (table, table_consts), (m, _) in zip(self.terms, self.tables,
                                                             self._layout, strict=True):
                rows, consts = table[idx], table_consts[:, idx]
                n_par = len(term.params)
                if m == 1:  # a GLM: one predictor, step = (u' − u)(g + ½h(u' + u))
                    hat, y, *params, grad, hess = consts
                    u_cur, u_new = u = moves @ rows.T
                    f_cur, f_new = term.family.loglik(hat + u, y, *params)
                    step = grad if self.order == 1 else grad + hess * (u_new + u_cur)
                    xi = xi + (f_new - f_cur - (u_new - u_cur) * step)
                    continue
                # predictor j's moves from p̂_j: u[j][0] at θ, u[j][1] at θ'
                u = [moves @ rows[:, j * d : (j + 1) * d].T for j in range(m)]
                hats, y, params = consts[:m], consts[m], tuple(consts[m + 1 : m + 1 + n_par])
                grad, hess = consts[m + 1 + n_par : 2 * m + 1 + n_par], consts[2 * m + 1 + n_par :]
                f_cur, f_new = term.family.row_loglik(
                    tuple(h + v for h, v in zip(hats, u, strict=True)), y, params)
                step = sum(g * (v[1] - v[0]) for g, v in zip(grad, u, strict=True))
                if self.order == 2:
                    for h, (j, k) in zip(hess, upper_pairs(m), strict=True):
                        step = step + h * (u[j][1] * u[k][1] - u[j][0] * u[k][0])
                xi = xi + (f_new - f_cur - step)
        return xi / self.temperature if self.temperature != 1.0 else xi
