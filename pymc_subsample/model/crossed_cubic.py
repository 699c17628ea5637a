r"""Third-order control variates for random intercepts on two crossed factors
(``docs/methods/mhss.md``, "Third-order terms on two crossed factors").

A row reads the fixed coordinates ``R``, level ``k_i`` of the first factor and level ``l_i``
of the second (:class:`~pymc_subsample.model.crossed.CrossedCoordinates`):
``a_i = η_i − η̂_i = p_i + t_iU_{k_i} + r_iV_{l_i}``, ``p_i = x_{R,i}ᵀδ_R``, ``U = δ_u``,
``V = δ_v`` (``δ = θ − θ̂``). Expanding ``a_i³``, the cubic of all rows is

.. math::

    \sum_i f'''_i a_i^3 = E[\delta_R]^3
    + 3\sum_k U_k\,\delta_R^\top W_k\delta_R + 3\sum_l V_l\,\delta_R^\top W'_l\delta_R
    + 3\sum_k U_k^2\,V_k^\top\delta_R + 3\sum_l V_l^2\,V_l'^\top\delta_R
    + \sum_k T_kU_k^3 + \sum_l T'_lV_l^3
    + \sum_{(k,l)} \bigl(6\,U_kV_l\,S_{kl}^\top\delta_R + 3P_{kl}U_k^2V_l + 3Q_{kl}U_kV_l^2\bigr),

with ``f‴_i = f‴(η̂_i)`` and the sums, of one pass over the data at ``θ̂``:
per level of the first factor ``T_k = Σ f‴t³``, ``V_k = Σ f‴t²x_R``, ``W_k = Σ f‴t x_Rx_Rᵀ``;
the same of the second (``T'_l``, ``V'_l``, ``W'_l`` with ``r``); per cell ``(k, l)`` that has
rows ``S_{kl} = Σ f‴t r x_R``, ``P_{kl} = Σ f‴t²r``, ``Q_{kl} = Σ f‴t r²``; and
``E = Σ f‴x_R^{⊗3}``. O((G + G₂)d_R² + C·d_R) numbers, ``C`` the cells; any move's terms in as
many operations. A move of level ``k`` alone (the rest held) changes its rows' cubic by
``3A_kΔU + 3B_kΔ(U²) + T_kΔ(U³)`` with ``A_k = Σ_{i∈k} f‴t c_i²``, ``B_k = Σ_{i∈k} f‴t²c_i``,
``c_i = p_i + r_iV_{l_i}``:

.. math::

    A_k = \delta_R^\top W_k\delta_R + \sum_{l} V_l\,(2S_{kl}^\top\delta_R + Q_{kl}V_l),\qquad
    B_k = V_k^\top\delta_R + \sum_l P_{kl}V_l,

and the second factor's moves the same with the factors' roles swapped. The rows' remainders
after these terms are bounded by the crossed bound at order 3 (:mod:`pymc_subsample.bounds.
crossed`, ``L₃ = sup|f⁗| = 1/8`` of the logistic family on the whole line), from the same pass.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from pymc_subsample.bounds import CrossedBound, CrossedRows, crossed_level_rows
from pymc_subsample.kernels.gram import weighted_level_sums
from pymc_subsample.model.crossed import CrossedCoordinates
from pymc_subsample.model.glm_pass import GLMPass
from pymc_subsample.model.level_cubic import (
    LOGIT_FOURTH_SUP,
    LevelCubic,
    RecentByDelta,
    cubic_moment,
    level_cubic_change,
    level_cubic_sums,
    logit_third,
    newton_update,
)

__all__ = ["CellSums", "CrossedCubic", "CrossedCubicPass", "FactorSums", "crossed_cubic"]


@dataclass(frozen=True)
class FactorSums:
    """One factor's per-level sums: ``T`` (G,), ``V`` (G, d_R), ``W`` (G, d_R, d_R)."""

    t: np.ndarray
    v: np.ndarray
    w: np.ndarray

    @staticmethod
    def of(level: np.ndarray, s: np.ndarray, f3: np.ndarray, rest: np.ndarray,
           n_levels: int) -> FactorSums:
        """The sums of rows on ``level`` with values ``s`` (``t`` or ``r``)."""
        return FactorSums(*level_cubic_sums(level, s, f3, rest, n_levels))

    def __add__(self, other: FactorSums) -> FactorSums:
        return FactorSums(self.t + other.t, self.v + other.v, self.w + other.w)


class _LevelSums:
    """Per-level sums of values given per cell, over each level's cells in one contiguous
    run (``np.add.reduceat``: the cells come sorted by the first factor's level)."""

    def __init__(self, level: np.ndarray, n_levels: int) -> None:
        order = np.argsort(level, kind="stable")
        self._order = None if np.all(order[1:] > order[:-1]) else order
        runs = level[order]
        self._starts = np.flatnonzero(np.r_[True, runs[1:] != runs[:-1]]) if runs.size else (
            np.zeros(0, dtype=np.int64))
        self._levels, self._n_levels = runs[self._starts], n_levels

    def __call__(self, values: np.ndarray) -> np.ndarray:
        out = np.zeros(self._n_levels)
        if self._starts.size:
            out[self._levels] = np.add.reduceat(
                values if self._order is None else values[self._order], self._starts)
        return out


class _QuadraticForms:
    """``δᵀW_kδ`` of symmetric ``W_k``, each pair of coordinates once (half the numbers an
    iteration reads)."""

    def __init__(self, w: np.ndarray) -> None:
        self._i, self._j = np.triu_indices(w.shape[1])
        weight = np.where(self._i == self._j, 1.0, 2.0)
        self._packed = np.ascontiguousarray(w[:, self._i, self._j] * weight)

    def __call__(self, d: np.ndarray) -> np.ndarray:
        return self._packed @ (d[self._i] * d[self._j])


@dataclass(frozen=True)
class CellSums:
    """The sums of the cells ``(k, l)`` with rows: ``S`` (C, d_R), ``P``, ``Q`` (C,)."""

    first: np.ndarray
    second: np.ndarray
    s: np.ndarray
    p: np.ndarray
    q: np.ndarray

    @staticmethod
    def of(cell: np.ndarray, n_levels2: int, t: np.ndarray, r: np.ndarray, f3: np.ndarray,
           rest: np.ndarray) -> CellSums:
        """The sums of rows in the cells ``cell = k·G₂ + l``."""
        ids, inverse = np.unique(cell, return_inverse=True)
        n = ids.size
        ftr = f3 * t * r
        return CellSums(ids // n_levels2, ids % n_levels2,
                        weighted_level_sums(inverse, ftr, rest, n),
                        np.bincount(inverse, ftr * t, minlength=n),
                        np.bincount(inverse, ftr * r, minlength=n))

    @staticmethod
    def merged(parts: list[CellSums], n_levels2: int) -> CellSums:
        """The blocks' cells summed (a cell's rows may lie in several blocks)."""
        cell = np.concatenate([c.first * n_levels2 + c.second for c in parts])
        ids, inverse = np.unique(cell, return_inverse=True)
        n = ids.size
        s = weighted_level_sums(inverse, np.ones(inverse.size),
                                np.concatenate([c.s for c in parts]), n)
        return CellSums(ids // n_levels2, ids % n_levels2, s,
                        np.bincount(inverse, np.concatenate([c.p for c in parts]), minlength=n),
                        np.bincount(inverse, np.concatenate([c.q for c in parts]), minlength=n))


class CrossedCubic(LevelCubic):
    """The third-order terms of rows on two crossed factors and their order-3 crossed bound
    (module docstring), built by :func:`crossed_cubic`. The first factor's moves and any move
    read it through :class:`~pymc_subsample.model.level_cubic.LevelCubic`'s interface (its
    ``level_coefficients`` are ``(A_k, B_k)``); the second factor's through
    :meth:`second_level_terms` and :meth:`second_newton`. Its sums are kept by factor and by
    cell, not as ``LevelCubic``'s ``(G, d_F, d_F)`` over the fixed block (which holds the
    second factor's levels): so ``LevelCubic.__init__`` is not called.

    Attributes
    ----------
    t_sum : ndarray, shape (G,)
        ``T_k``.
    v_sum : ndarray, shape (G, d_F)
        ``Σ_{i∈k} f‴_i t_i² x_{F,i}`` on the whole fixed block (``layout.fixed`` order): the
        fixed block's proposal's cubic shift reads it.
    bound : CrossedBound
        The crossed bound of the order-3 remainders.
    """

    order = 3

    def __init__(self, glm_pass: GLMPass, coords: CrossedCoordinates, first: FactorSums,
                 second: FactorSums, cells: CellSums, e_sum: np.ndarray,
                 bound: CrossedBound) -> None:
        self._pass, self.layout, self.coords = glm_pass, coords.layout, coords
        self._theta_hat = coords.theta_hat
        self._temperature = glm_pass.lik.temperature
        self.first, self.second, self.cells, self.e_sum = first, second, cells, e_sum
        self.bound = bound
        self.t_sum = first.t
        v_sum = np.zeros((coords.n_levels, self.layout.fixed.size))
        v_sum[:, coords.rest_positions] = first.v
        np.add.at(v_sum, (cells.first, coords.second_positions[cells.second]), cells.p)
        self.v_sum = v_sum
        self._by_level = (_LevelSums(cells.first, coords.n_levels),
                          _LevelSums(cells.second, coords.n_levels2))
        self._quadratic = _QuadraticForms(first.w)
        self._quadratic2 = _QuadraticForms(second.w)
        # each computed for the two points asked most recently (a move asks at both ends)
        self._of_rest = RecentByDelta(self._rest_coefficients)
        self._recent = RecentByDelta(functools.partial(self._coefficients, factor=0))
        self._recent_second = RecentByDelta(functools.partial(self._coefficients, factor=1))
        self._recent_cubic = RecentByDelta(self._cubic)

    def _rest_coefficients(self, d: np.ndarray) -> tuple[np.ndarray, ...]:
        """``(δᵀW_kδ, V_kᵀδ, δᵀW'_lδ, V'_lᵀδ, S_{kl}ᵀδ)`` at ``δ_R = d``."""
        return (self._quadratic(d), self.first.v @ d, self._quadratic2(d), self.second.v @ d,
                self.cells.s @ d)

    def _coefficients(self, key: np.ndarray, factor: int) -> tuple[np.ndarray, np.ndarray]:
        """``(A, B)`` of ``factor``'s levels (0: the first, 1: the second) at ``key = (δ_R,
        the other factor's δ)`` (module docstring: the second's with the roles swapped)."""
        d_r = self.first.v.shape[1]
        quad, lin, quad2, lin2, sd = self._of_rest(key[:d_r])
        cells = self.cells
        if factor == 0:
            held, square, line = cells.second, cells.q, cells.p
        else:
            held, square, line = cells.first, cells.p, cells.q
            quad, lin = quad2, lin2
        other = key[d_r:][held]
        by_level = self._by_level[factor]
        return (quad + by_level(other * (2.0 * sd + square * other)),
                lin + by_level(line * other))

    def level_coefficients(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(A_k, B_k)`` of the first factor's levels (module docstring): functions of
        ``δ_R`` and ``V``, which its moves hold."""
        d, _, v = self.coords.deltas(theta)
        return self._recent(np.concatenate([d, v]))

    def second_coefficients(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(A'_l, B'_l)`` of the second factor's levels: functions of ``δ_R`` and ``U``."""
        d, u, _ = self.coords.deltas(theta)
        return self._recent_second(np.concatenate([d, u]))

    def cubic(self, theta: np.ndarray) -> float:
        """``Σ_i f‴_i a_i³`` over all rows at ``θ`` (module docstring)."""
        # keyed on what the rows read: the hyperparameters' moves between two asks change θ
        return self._recent_cubic(np.concatenate(self.coords.deltas(theta)))

    def _cubic(self, key: np.ndarray) -> float:
        # the cells' terms through the first factor's (A_k, B_k) at (δ_R, V), which the
        # moves of its levels then find computed: 3Σ U_kA_k + 3Σ U_k²B_k holds them all
        d_r, g = self.first.v.shape[1], self.coords.n_levels
        d, u, v = key[:d_r], key[d_r : d_r + g], key[d_r + g :]
        a, b = self._recent(np.concatenate([d, v]))
        _, _, quad2, lin2, _ = self._of_rest(d)
        return float(((self.e_sum @ d) @ d) @ d
                     + 3.0 * (u @ a + (u * u) @ b + v @ quad2 + (v * v) @ lin2)
                     + self.first.t @ (u * u * u) + self.second.t @ (v * v * v))

    def second_level_terms(self, theta: np.ndarray, x_new: np.ndarray) -> np.ndarray:
        """``(1/6)Σ_{i∈l} f‴_i(a'_i³ − a_i³)`` of the moves ``v_l → x_new[l]`` of every level
        of the second factor, the rest held."""
        a, b = self.second_coefficients(theta)
        hat = self._theta_hat[self.coords.second_indices]
        return level_cubic_change(a, b, self.second.t, theta[self.coords.second_indices] - hat,
                                  x_new - hat)

    def second_newton(self, theta: np.ndarray, mean: np.ndarray, precision: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
        """One Newton step of the second factor's levels' proposals on their cubic terms
        (as :meth:`LevelCubic.newton`: a function of the held coordinates only)."""
        a, b = self.second_coefficients(theta)
        d = mean - self._theta_hat[self.coords.second_indices]
        t = self.second.t
        return newton_update(mean, precision, 0.5 * a + b * d + 0.5 * t * d * d, b + t * d)


def crossed_cubic(data_pass, coords: CrossedCoordinates) -> CrossedCubic:
    """The crossed third-order terms and their bound from one pass over all rows at ``θ̂``
    (the rows as :func:`~pymc_subsample.model.crossed.crossed_rows` reads them: the caller
    checks :func:`~pymc_subsample.model.crossed.splits_one_predictor` and the family).

    Raises
    ------
    ValueError
        Where a row reads two levels of the second factor or a held coordinate.
    """
    lik = data_pass.lik
    block_pass = CrossedCubicPass(data_pass, coords)
    rows = CrossedRows.empty(lik.n_rows, coords.n_levels, coords.n_levels2, 3)
    first = second = e_sum = None
    cells: list[CellSums] = []
    for chunk, (sums, bound_rows) in lik.map_row_blocks(block_pass):
        f, s, c, e = sums
        first, second = (f, s) if first is None else (first + f, second + s)
        e_sum = e if e_sum is None else e_sum + e
        cells.append(c)
        rows.fill(chunk, bound_rows)
    return CrossedCubic(data_pass, coords, first, second,
                        CellSums.merged(cells, coords.n_levels2), e_sum,
                        CrossedBound(rows, coords.dense_dim))


class CrossedCubicPass:
    """The blocks of :func:`crossed_cubic`'s pass, for
    :meth:`~pymc_subsample.model.likelihood.SubsampledLikelihood.map_row_blocks`: per block,
    both factors' sums, the cells', ``E`` and the rows' order-3 crossed-bound pieces."""

    def __init__(self, glm_pass: GLMPass, coords: CrossedCoordinates) -> None:
        self._pass, self._coords = glm_pass, coords

    def thread_copy(self) -> CrossedCubicPass:
        return CrossedCubicPass(self._pass.thread_copy(), self._coords)

    def block(self, chunk: np.ndarray) -> tuple:
        coords = self._coords
        _, pieces = self._pass.rows(coords.theta_hat, chunk, check=False)
        x, _, _, _, eta_hat, _, _ = pieces[0]
        parts = coords.split(x)
        if parts is None:
            raise ValueError("a row reads two levels of the second factor or a coordinate "
                             "no other row reads")
        rest, t, level, r, level2 = parts
        temperature = self._pass.lik.temperature
        f3 = logit_third(eta_hat) / temperature
        sums = (FactorSums.of(level, t, f3, rest, coords.n_levels),
                FactorSums.of(level2, r, f3, rest, coords.n_levels2),
                CellSums.of(level.astype(np.int64) * coords.n_levels2 + level2,
                            coords.n_levels2, t, r, f3, rest), cubic_moment(rest, f3))
        dense, alpha, _, beta, _ = coords.whitened(parts)
        sup = np.full(chunk.size, LOGIT_FOURTH_SUP / temperature)
        return sums, crossed_level_rows(3, sup, dense, alpha, level, beta, level2,
                                        float(np.sqrt(max(coords.dense_dim, 1))))
