r"""A second, crossed grouping factor: the coordinates its rows are bounded in.

The data pass splits a predictor's rows by one grouping factor (``model/levels.py``, the one
with the most levels: ``u``, ``G`` levels); a second factor's levels ``v`` (``G₂``, e.g. random
intercepts per destination beside those per plane) are then columns of the fixed block, a
one-hot ``r_i e_{l_i}`` in each row. The Laplace frame stays the arrow of
:class:`~pymc_subsample.model.frame.LevelFrame` (``v`` in its dense block: memory
O(G·(d_F + G₂))), but in its whitened coordinates a row is dense over all of ``v``, and the
level bound's ``‖x̃_{i,D}‖‖φ_D‖`` loses a factor ``√(d_F + G₂)`` against the row's true
displacement. For the bound, this module takes from each factor's levels their Laplace
regression on the fixed block ``R`` (the fixed coordinates but ``v`` and the coordinates no
row reads), the other factor marginalised:

.. math::

    ψ_{U,k} = D_k^{1/2}δ_{u_k} + D_k^{-1/2}\tilde C_{k}^\top δ_R,\quad
    ψ_{V,l} = E_l^{1/2}δ_{v_l} + E_l^{-1/2}\tilde B_{l}^\top δ_R,\quad
    ψ_R = K^\top δ_R,

``δ = θ − θ̂``, ``D``, ``E`` the diagonal of the precision ``P`` on ``u`` and ``v``,
``K Kᵀ`` the Laplace marginal precision of ``δ_R`` (``ψ_R ~ N(0, I)`` under the Laplace
approximation), ``B̃ = −E N`` with ``N = V_{vR}V_{RR}^{-1}`` (``V`` the Laplace covariance of the
fixed block: ``v``'s regression on ``R``) and ``C̃ = C_R + C_v N`` (``C`` the rows of ``P``
of the first factor's levels on the fixed block: ``u_k``'s conditional mean given ``R`` and
``v``, with ``v`` at its regression on ``R``). With order-2 control variates the map takes
instead each factor's regression conditional on the other, ``C̃ = C_R`` and ``B̃ = B_R`` (``P``'s
own rows on ``R``), which counts the intercept twice and so bounds less tightly — there, on
purpose (``marginal`` of :class:`CrossedCoordinates`; ``docs/methods/mhss.md``). An affine map
of ``θ`` like any other: ``a_i = x_iᵀδ = x̃_iᵀψ`` exactly, with

.. math::

    \tilde x_i = \bigl(α_i e_{k_i},\ β_i e_{l_i},\ γ_i\bigr),\quad
    α_i = t_i D_{k_i}^{-1/2},\ β_i = r_i E_{l_i}^{-1/2},\
    γ_i = K^{-1}\bigl(x_{R,i} − t_i \tilde C_{k_i}/D_{k_i} − r_i \tilde B_{l_i}/E_{l_i}\bigr),

so a row touches two levels and the ``d_R`` fixed coordinates, and
:mod:`pymc_subsample.bounds.crossed` bounds it (``docs/methods/mhss.md``, "Rows on two crossed
factors"). Which map it is affects how tight the bound is, never whether it holds. A move of
one factor's levels changes only that factor's ``ψ``: by ``D^{1/2}δ`` (or ``E^{1/2}δ``).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from pymc_subsample.bounds import CrossedRows, crossed_level_rows
from pymc_subsample.model.frame import LevelFrame
from pymc_subsample.model.glm_pass import GLMPass
from pymc_subsample.model.levels import LevelHessian, LevelLayout, SplitRows

__all__ = ["CrossedCoordinates", "crossed_rows", "second_factor", "splits_one_predictor"]


def second_factor(lik, layout: LevelLayout, hess_sum: LevelHessian, hyper: np.ndarray
                  ) -> LevelLayout | None:
    """The largest vector variable (two or more coordinates) among the fixed coordinates
    whose data Hessian block is diagonal and not zero, no coordinate of it in ``hyper``: a
    second factor's levels, each row on one of them at most (:class:`CrossedCoordinates`
    checks every row); None when there is none."""
    fixed_pos = {int(j): p for p, j in enumerate(layout.fixed)}
    held = set(int(j) for j in hyper)
    best, offset = None, 0
    for _, shape in lik._ravel_info:
        size = int(np.prod(shape, dtype=int))
        start, offset = offset, offset + size
        span = range(start, start + size)
        if len(shape) != 1 or size < 2 or any(j not in fixed_pos or j in held for j in span):
            continue
        pos = [fixed_pos[j] for j in span]
        block = hess_sum.block[np.ix_(pos, pos)]
        if np.count_nonzero(block - np.diag(np.diag(block))) or not np.all(np.diag(block)):
            continue
        if best is None or size > best.n_levels:
            best = LevelLayout(start, start + size, layout.dim)
    return best


class CrossedCoordinates:
    """The bound's coordinates ``ψ = (ψ_U, ψ_V, ψ_R)`` of a frame with a second factor
    (module docstring).

    Parameters
    ----------
    frame : LevelFrame
        The Laplace frame (the first factor split, the second in its fixed block).
    second : LevelLayout
        The second factor's levels in ``θ``.
    hyper : ndarray of int
        The coordinates no row reads (left out of ``ψ_R``: at ``θ̂`` for the rows).
    marginal : bool
        Each factor's regression on ``R`` with the other factor marginalised (the module
        docstring's ``C̃``, ``B̃``: the tighter bound, for the third-order terms), or, False,
        conditional on it (``P``'s own rows ``C_R``, ``B_R``: with order-2 control variates a
        bound closer to their remainders lowers MHSS's acceptance more than it saves rows,
        ``docs/methods/mhss.md``).

    Raises
    ------
    ValueError
        Where the precision's diagonal on a level is not positive.
    """

    def __init__(self, frame: LevelFrame, second: LevelLayout, hyper: np.ndarray,
                 marginal: bool = True) -> None:
        lay, prec = frame.layout, frame.precision
        fixed = lay.fixed
        in_second = (fixed >= second.start) & (fixed < second.stop)
        rest = ~in_second & ~np.isin(fixed, hyper)
        self.layout, self.second, self.theta_hat = lay, second, frame.theta_hat
        self.n_levels, self.n_levels2 = lay.n_levels, second.n_levels
        self._pos2, self._pos_rest = np.flatnonzero(in_second), np.flatnonzero(rest)
        self._idx2, self._idx_rest = fixed[in_second], fixed[rest]
        self._pos_held = np.flatnonzero(~in_second & ~rest)
        #: ``d_R``
        self.dense_dim = int(self._pos_rest.size)
        self._d1 = prec.diag
        self._d2 = np.diag(prec.block)[self._pos2].copy()
        if not (np.all(self._d1 > 0.0) and np.all(self._d2 > 0.0)):
            raise ValueError("the precision's diagonal is not positive on every level")
        self._sqrt_d1, self._sqrt_d2 = np.sqrt(self._d1), np.sqrt(self._d2)
        fixed_cov = frame.fixed_covariance()
        cov = fixed_cov[np.ix_(self._pos_rest, self._pos_rest)]
        # K Kᵀ = (V_RR)⁻¹: L_V L_Vᵀ = V_RR gives K = L_V^{-⊤}, and K⁻¹ = L_Vᵀ
        chol_cov = scipy.linalg.cholesky(cov, lower=True)
        coupling = prec.coupling
        if marginal:  # N = V_vR V_RR⁻¹, then C̃ = C_R + C_v N and B̃ = −E N (module docstring)
            slope2 = scipy.linalg.cho_solve(
                (chol_cov, True), fixed_cov[np.ix_(self._pos_rest, self._pos2)]).T
            self._c1 = coupling[:, self._pos_rest] + coupling[:, self._pos2] @ slope2
            self._c2 = -self._d2[:, None] * slope2
        else:
            self._c1 = coupling[:, self._pos_rest]
            self._c2 = prec.block[np.ix_(self._pos2, self._pos_rest)]
        self._k = scipy.linalg.solve_triangular(chol_cov, np.eye(self.dense_dim), lower=True,
                                                trans="T")
        self._k_inv_t = chol_cov  # (K⁻¹)ᵀ = L_V: γ_i as a row is g_i L_V

    @property
    def second_scale(self) -> np.ndarray:
        """``E^{1/2}``: ``∂ψ_{V,l}/∂v_l``."""
        return self._sqrt_d2

    @property
    def second_precision(self) -> np.ndarray:
        """``E``, the precision's diagonal on the second factor's levels."""
        return self._d2

    def point(self, theta: np.ndarray) -> np.ndarray:
        """``ψ(θ)``, shape ``(G + G₂ + d_R,)``: O((G + G₂)·d_R)."""
        rest, first, second = self.deltas(theta)
        return np.concatenate([
            self._sqrt_d1 * first + (self._c1 @ rest) / self._sqrt_d1,
            self._sqrt_d2 * second + (self._c2 @ rest) / self._sqrt_d2,
            self._k.T @ rest])

    def rows(self, x: SplitRows) -> tuple[np.ndarray, ...] | None:
        """``(γ, α, k, β, l)`` of split rows (module docstring), or None when a row reads two
        of the second factor's levels or a held coordinate."""
        parts = self.split(x)
        return None if parts is None else self.whitened(parts)

    def whitened(self, parts: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        """``(γ, α, k, β, l)`` of the rows :meth:`split` gave ``parts``."""
        rest, t, level, r, level2 = parts
        g = (rest - (t / self._d1[level])[:, None] * self._c1[level]
             - (r / self._d2[level2])[:, None] * self._c2[level2])
        return (g @ self._k_inv_t, t / self._sqrt_d1[level], level, r / self._sqrt_d2[level2],
                level2)

    def split(self, x: SplitRows) -> tuple[np.ndarray, ...] | None:
        """``(x_R, t, k, r, l)`` of split rows: ``η_i − η̂_i = x_{R,i}ᵀδ_R + t_iδ_{u,k_i} +
        r_iδ_{v,l_i}``, or None when a row reads two of the second factor's levels or a held
        coordinate.

        When the pass kept this factor's columns as each row's level and value
        (:class:`~pymc_subsample.model.levels.SecondLevels`) they are read from there: no
        ``(n, d_F)`` one-hot block is formed (the same numbers, O(n·d_R))."""
        second = self._second_columns(x)
        if second is None:
            fixed = x.fixed_block()
            block = fixed[:, self._pos2]
            if (np.any(np.count_nonzero(block, axis=1) > 1)
                    or np.any(fixed[:, self._pos_held] != 0.0)):
                return None
            n = fixed.shape[0]
            level2 = np.argmax(np.abs(block), axis=1) if self.n_levels2 else np.zeros(n, int)
            r = block[np.arange(n), level2]
            rest = fixed[:, self._pos_rest]
        else:
            rest_columns, held_columns = second
            if np.any(x.fixed[:, held_columns] != 0.0):
                return None
            r = x.second.value
            # a row on no level of the factor (r = 0) at level 0, as the one-hot block's argmax
            level2 = np.where(r != 0.0, x.second.level, 0)
            rest = x.fixed[:, rest_columns]
        return rest, x.value, x.level, r, level2

    def deltas(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(δ_R, δ_u, δ_v)`` of ``θ``."""
        delta = np.asarray(theta, dtype=np.float64) - self.theta_hat
        lay = self.layout
        return delta[self._idx_rest], delta[lay.start : lay.stop], delta[self._idx2]

    @property
    def rest_positions(self) -> np.ndarray:
        """Where ``R``'s coordinates are in the fixed block (``layout.fixed`` order)."""
        return self._pos_rest

    @property
    def second_indices(self) -> np.ndarray:
        """The second factor's levels in ``θ``."""
        return self._idx2

    @property
    def second_positions(self) -> np.ndarray:
        """Where the second factor's levels are in the fixed block."""
        return self._pos2

    def _second_columns(self, x: SplitRows) -> tuple[np.ndarray, np.ndarray] | None:
        """Where ``R``'s and the held coordinates' columns are in ``x.fixed`` when ``x`` keeps
        this factor's columns apart (``x.second``, the same positions of the fixed block),
        else None."""
        sec = x.second
        if sec is None or not np.array_equal(
                np.arange(sec.columns.start, sec.columns.stop), self._pos2):
            return None
        # x.fixed is the fixed block without the columns sec.columns
        def inside(pos: np.ndarray) -> np.ndarray:
            return np.where(pos < sec.columns.start, pos, pos - sec.n_levels)

        return inside(self._pos_rest), inside(self._pos_held)


def splits_one_predictor(data_pass) -> bool:
    """Whether the pass is one observed variable of one affine predictor split by level, whose
    family's bound holds on the whole line: what :func:`crossed_rows` reads."""
    if not isinstance(data_pass, GLMPass) or data_pass.levels is None:
        return False
    if len(data_pass.terms) != 1:
        return False
    (term,) = data_pass.terms
    return term.curvature is None and not term.family.region_only


def crossed_rows(data_pass, coords: CrossedCoordinates, theta_hat: np.ndarray, order: int
                 ) -> CrossedRows | None:
    """The crossed bound's pieces of all N rows at ``θ̂`` (one pass over the data) when
    :func:`splits_one_predictor`, or None where a row reads two of the second factor's
    levels."""
    (term,) = data_pass.terms
    lik = data_pass.lik
    out = CrossedRows.empty(lik.n_rows, coords.n_levels, coords.n_levels2, order)
    dense_weight = float(np.sqrt(max(coords.dense_dim, 1)))
    for chunk in lik.row_chunks():
        _, (piece,) = data_pass.rows(theta_hat, chunk, check=False)
        x, _, _, y, eta_hat, params, _ = piece
        parts = coords.rows(x)
        if parts is None:
            return None
        dense, first, level, second, level2 = parts
        norms = np.sqrt(np.einsum("ij,ij->i", dense, dense) + first**2 + second**2)
        sup = term.family.row_sup(order, norms, y, params, eta_hat=eta_hat) / lik.temperature
        out.fill(chunk, crossed_level_rows(order, sup, dense, first, level, second, level2,
                                           dense_weight))
    return out
