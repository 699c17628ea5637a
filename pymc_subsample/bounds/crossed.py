r"""MHSS bounds for rows that touch one level of each of two crossed grouping factors.

With random intercepts on two factors, ``η_i = x_{F,i}ᵀθ_F + t_i u_{k_i} + r_i v_{l_i}``, a row
reads the fixed block, level ``k_i`` of the first factor and level ``l_i`` of the second. In the
bound's coordinates ``ψ = (ψ_U, ψ_V, ψ_F)`` (``model/crossed.py``: an affine map of ``θ`` in which
the row is ``x̃_i = (α_i e_{k_i}, β_i e_{l_i}, γ_i)``, so ``a_i = η_i − η̂_i = x̃_iᵀψ``),

.. math::

    |a_i| \le \lVert\gamma_i\rVert\,\lVert\psi_F\rVert + |\alpha_i|\,|\psi_{U,k_i}|
              + |\beta_i|\,|\psi_{V,l_i}|
          = S_i\,(\rho_i u + \sigma_i v_{k_i} + \tau_i w_{l_i}),

with ``S_i = ‖γ_i‖w_D + (|α_i| + |β_i|)w_K``, the shares ``ρ_i = ‖γ_i‖w_D/S_i``,
``σ_i = |α_i|w_K/S_i``, ``τ_i = 1 − ρ_i − σ_i`` and ``u = ‖ψ_F‖/w_D``, ``v_k = |ψ_{U,k}|/w_K``,
``w_l = |ψ_{V,l}|/w_K`` (``w_D = √d_F``, ``w_K`` = :data:`~pymc_subsample.bounds.levels.
LEVEL_WEIGHT`): the one-factor bound of ``bounds/levels.py`` with a third term. The same for
``a'_i`` and ``h_i = a'_i − a_i`` (with ``ψ' − ψ``), and the scalar remainder bounds of that
module (increasing in ``|a|``, ``|a'|``, ``|h|``) give the rate

.. math::

    B_i = \bar c_i\,H_i\sum_{j=0}^{k} A_i^j A_i'^{k-j},
    \qquad \bar c_i = \kappa_k L_k S_i^{k+1},

``A_i, A'_i, H_i`` the linear factors above and ``k`` the control variates' order (1, 2, or 3
with the third-order terms of :mod:`pymc_subsample.model.crossed_cubic`): symmetric in
``(ψ, ψ')``. Each linear factor is a
convex combination of its three terms, so it is at most their largest, and at most the
largest shares times the terms; over the rows of one level ``k`` of a factor that is
``max(u, v_k, \max_l w_l)`` (the other factor's largest) and
``ρ^{max}_k u + σ^{max}_k v_k + τ^{max}_k \max_l w_l``, the envelope ``E_k`` the rows of a level
are drawn with (``Poisson(W_k E_k)`` candidates, ``W_k`` the level's total weight, each row
``i`` with probability ``c̄_i/W_k``, kept with probability ``B_i/(c̄_i E_k)``): a Poisson
process of rate ``B_i`` per level (as in :class:`~pymc_subsample.bounds.levels.
LevelMoveRates`, which draws a level's rows uniformly), by levels of either factor (the
moves of one factor's levels), or summed over the first factor's levels
(any move, :class:`CrossedCategoryRates`). ``docs/methods/mhss.md``, "Rows on two crossed
factors".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pymc_subsample.bounds.levels import (
    LEVEL_WEIGHT,
    ORDER_FACTOR,
    SHARE_MARGIN,
    check_level_order,
    power_sum,
)
from pymc_subsample.kernels.indexing import WeightedIndexSampler, round_up_float32

__all__ = ["CrossedBound", "CrossedCategoryRates", "CrossedLevelRates", "CrossedRows",
           "crossed_level_rows"]


@dataclass(frozen=True)
class CrossedRows:
    """Per-row pieces of the crossed bound for all N rows (module docstring).

    Attributes
    ----------
    weights : ndarray of float32
        ``c̄_i`` (rounded up).
    share_fixed, share_first : ndarray of float32
        ``ρ_i`` and ``σ_i`` (``τ_i = 1 − ρ_i − σ_i``).
    level, level2 : ndarray of int32
        ``k_i`` (first factor, ``0 … G − 1``) and ``l_i`` (second, ``0 … G₂ − 1``).
    n_levels, n_levels2 : int
    order : int
    """

    weights: np.ndarray
    share_fixed: np.ndarray
    share_first: np.ndarray
    level: np.ndarray
    level2: np.ndarray
    n_levels: int
    n_levels2: int
    order: int

    @staticmethod
    def empty(n_rows: int, n_levels: int, n_levels2: int, order: int) -> CrossedRows:
        return CrossedRows(np.zeros(n_rows, np.float32), np.ones(n_rows, np.float32),
                           np.zeros(n_rows, np.float32), np.zeros(n_rows, np.int32),
                           np.zeros(n_rows, np.int32), n_levels, n_levels2, order)

    def fill(self, rows: np.ndarray, block: tuple[np.ndarray, ...]) -> None:
        """Write one block of :func:`crossed_level_rows` into the rows ``rows``."""
        for target, values in zip((self.weights, self.share_fixed, self.share_first,
                                   self.level, self.level2), block, strict=True):
            target[rows] = values


def crossed_level_rows(order: int, sup: np.ndarray, dense: np.ndarray, first: np.ndarray,
                       level: np.ndarray, second: np.ndarray, level2: np.ndarray,
                       dense_weight: float) -> tuple[np.ndarray, ...]:
    """``(c̄, ρ, σ, k, l)`` of a block of rows (float32/int32 where :class:`CrossedRows` is).

    Parameters
    ----------
    order : {1, 2, 3, 4}
    sup : ndarray, shape (n,)
        ``L_k ≥ sup |f^{(k+1)}|`` of each row.
    dense : ndarray, shape (n, d_F)
        ``γ_i``.
    first, second : ndarray, shape (n,)
        ``α_i`` and ``β_i``, the rows' values on their levels ``level`` and ``level2``.
    dense_weight : float
        ``w_D``.
    """
    check_level_order(order)
    dense = np.asarray(dense, dtype=np.float64)
    dense_part = np.sqrt(np.einsum("ij,ij->i", dense, dense)) * dense_weight
    one = np.abs(np.asarray(first, dtype=np.float64)) * LEVEL_WEIGHT
    two = np.abs(np.asarray(second, dtype=np.float64)) * LEVEL_WEIGHT
    wide = dense_part + one + two
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.where(wide > 0.0, dense_part / wide, 1.0)
        sigma = np.where(wide > 0.0, one / wide, 0.0)
    weights = ORDER_FACTOR[order] * np.asarray(sup, dtype=np.float64) * wide ** (order + 1)
    return (round_up_float32(weights), np.clip(rho, 0.0, 1.0).astype(np.float32),
            np.clip(sigma, 0.0, 1.0).astype(np.float32), np.asarray(level, np.int32),
            np.asarray(level2, np.int32))


class _LevelIndex:
    """The rows sorted by the levels of one factor: each level's span, count and total
    weight, the running sum of the weights in that order (rows are drawn from a level in
    proportion to their weight), and each level's largest shares (O(N) once, 12 bytes a
    row)."""

    def __init__(self, level: np.ndarray, n_levels: int, weights: np.ndarray,
                 shares: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        self.order = np.argsort(level, kind="stable").astype(np.int32)
        self.count = np.bincount(level, minlength=n_levels)
        self.start = np.concatenate([[0], np.cumsum(self.count)])
        self.cumulative = np.cumsum(weights[self.order], dtype=np.float64)
        before = np.concatenate([[0.0], self.cumulative])
        self.before = before[self.start[:-1]]
        self.total = before[self.start[1:]] - self.before
        #: ``max ρ_i``, ``max σ_i``, ``max τ_i`` over each level's rows, shape (3, G)
        self.top_shares = np.zeros((3, n_levels))
        for row, share in enumerate(shares):
            np.maximum.at(self.top_shares[row], level, share)


class _Factors:
    """``u``, ``v_k``, ``w_l`` of ``ψ``, ``ψ'`` and ``h = ψ' − ψ`` (rows 0, 1, 2)."""

    def __init__(self, psi: np.ndarray, psi_new: np.ndarray, g: int, g2: int,
                 dense_weight: float) -> None:
        self.u = np.empty(3)
        self.v = np.empty((3, g))
        self.w = np.empty((3, g2))
        for row, vec in enumerate((psi, psi_new, psi_new - psi)):
            tail = vec[g + g2:]
            self.u[row] = np.sqrt(float(tail @ tail)) / dense_weight
            self.v[row] = np.abs(vec[:g]) / LEVEL_WEIGHT
            self.w[row] = np.abs(vec[g : g + g2]) / LEVEL_WEIGHT


class CrossedBound:
    """The crossed bound (module docstring) on the rows of a :class:`CrossedRows`.

    Parameters
    ----------
    rows : CrossedRows
    dense_dim : int
        ``d_F``, the length of ``ψ_F``.
    """

    def __init__(self, rows: CrossedRows, dense_dim: int) -> None:
        self.order, self.n_levels, self.n_levels2 = rows.order, rows.n_levels, rows.n_levels2
        self.sampler = WeightedIndexSampler(rows.weights)
        self.share_fixed, self.share_first = rows.share_fixed, rows.share_first
        self.level, self.level2 = rows.level, rows.level2
        self.dense_weight = float(np.sqrt(max(dense_dim, 1)))
        self._index: dict[int, _LevelIndex] = {}

    def index(self, factor: int) -> _LevelIndex:
        """The rows by the levels of ``factor`` (0: the first, 1: the second; built on first
        use)."""
        if factor not in self._index:
            level, g = ((self.level, self.n_levels) if factor == 0
                        else (self.level2, self.n_levels2))
            rho = self.share_fixed.astype(np.float64)
            sigma = self.share_first.astype(np.float64)
            tau = np.maximum(1.0 - rho - sigma, 0.0)
            self._index[factor] = _LevelIndex(level, g, self.sampler.weights, (rho, sigma, tau))
        return self._index[factor]

    def factors(self, psi: np.ndarray, psi_new: np.ndarray) -> _Factors:
        return _Factors(np.asarray(psi, dtype=np.float64), np.asarray(psi_new, dtype=np.float64),
                        self.n_levels, self.n_levels2, self.dense_weight)

    def row_rates(self, factors: _Factors, idx: np.ndarray) -> np.ndarray:
        """``B_i ≥ |ξ_i(θ, θ')|`` of the rows ``idx``."""
        rho = self.share_fixed[idx].astype(np.float64)
        sigma = self.share_first[idx].astype(np.float64)
        tau = np.maximum(1.0 - rho - sigma, 0.0)
        k, l_ = self.level[idx], self.level2[idx]
        lin = []
        for row in range(3):
            u, v, w = factors.u[row], factors.v[row, k], factors.w[row, l_]
            # stored shares are float32: the margin covers their rounding (and τ's)
            top = np.maximum(np.maximum(u, v), w)
            lin.append(rho * u + sigma * v + tau * w + SHARE_MARGIN * top)
        a, a_new, h = lin
        weights = self.sampler.weights[idx].astype(np.float64)
        return weights * h * power_sum(a, a_new, self.order, 1.0, np.multiply)

    def envelopes(self, factors: _Factors, factor: int) -> np.ndarray:
        """Per level of ``factor``, a bound on ``B_i / c̄_i`` of its rows: each linear factor
        ``ρu + σv_k + τw_l`` at most ``max(u, own level's, the other factor's largest)`` (the
        shares sum to 1) and at most the level's largest shares times those terms."""
        own, other = (factors.v, factors.w) if factor == 0 else (factors.w, factors.v)
        other_top = np.max(other, axis=1, initial=0.0)[:, None]
        top = np.maximum(np.maximum(factors.u[:, None], own), other_top)
        rho, sigma, tau = self.index(factor).top_shares
        own_share, other_share = (sigma, tau) if factor == 0 else (tau, sigma)
        shares = rho * factors.u[:, None] + own_share * own + other_share * other_top
        # the stored shares' rounding, as in row_rates, and the products'
        top = (np.minimum(top, shares) + SHARE_MARGIN * top) * (1.0 + 2.0 * SHARE_MARGIN)
        a, a_new, h = top
        return h * power_sum(a, a_new, self.order, 1.0, np.multiply)

    def level_rates(self, psi: np.ndarray, psi_new: np.ndarray, factor: int = 0
                    ) -> CrossedLevelRates:
        """The rates of moves of one factor's levels (``ψ'`` differs from ``ψ`` on that
        factor's coordinates only), level by level."""
        return CrossedLevelRates(self, self.factors(psi, psi_new), factor)

    def category_rates(self, psi: np.ndarray, psi_new: np.ndarray) -> CrossedCategoryRates:
        """The rates of any move, drawn level by level of the first factor."""
        return CrossedCategoryRates(self, self.factors(psi, psi_new))


class _ByLevel:
    """Rows drawn level by level of one factor: ``Poisson(W_k E_k)`` rows of level ``k``
    drawn with probability ``c̄_i / W_k`` (``W_k = Σ_{i∈k} c̄_i``), each kept with probability
    ``B_i / (c̄_i E_k)`` (``E_k`` :meth:`CrossedBound.envelopes`), without reading data: a
    Poisson process of rate ``B_i`` on each level's rows."""

    def __init__(self, bound: CrossedBound, factors: _Factors, factor: int) -> None:
        self._bound, self._factors = bound, factors
        self._index = bound.index(factor)
        self._envelope = bound.envelopes(factors, factor)
        #: mean candidate rows per level; also what :attr:`expected` reports (an upper bound
        #: of ``Λ_k``: the exact one needs every row's shares)
        self._draws = self._index.total * self._envelope

    def _rows(self, rng: np.random.Generator, counts: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``counts[k]`` candidates uniform in each level, thinned: (rows, level, B_i)."""
        index = self._index
        total = int(counts.sum())
        if total == 0:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty, np.empty(0)
        level = np.repeat(np.arange(counts.size), counts)
        target = index.before[level] + rng.random(total) * index.total[level]
        pos = np.clip(np.searchsorted(index.cumulative, target, side="right"),
                      index.start[level], index.start[level + 1] - 1)
        idx = index.order[pos].astype(np.int64)
        rates = self._bound.row_rates(self._factors, idx)
        ceiling = self._bound.sampler.weights[idx].astype(np.float64) * self._envelope[level]
        keep = rng.random(total) * ceiling < rates
        return idx[keep], level[keep], rates[keep]

    def row_rates(self, idx: np.ndarray) -> np.ndarray:
        return self._bound.row_rates(self._factors, idx)


class CrossedLevelRates(_ByLevel):
    """The rates of simultaneous moves of one factor's levels, one Poisson process per level
    (the interface of :class:`~pymc_subsample.bounds.levels.LevelMoveRates`). A level whose
    candidates would reach its number of rows is decided on all its rows (:attr:`fallback`)."""

    def __init__(self, bound: CrossedBound, factors: _Factors, factor: int) -> None:
        super().__init__(bound, factors, factor)
        self.expected = self._draws
        self.fallback = ~(self._draws < self._index.count)

    def draw(self, rng: np.random.Generator, levels: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows of the Poisson processes of the levels in the mask ``levels``:
        ``(rows, their level, their B_i)``."""
        lam = np.where(levels & ~self.fallback, self._draws, 0.0)
        return self._rows(rng, rng.poisson(lam))

    def rows_of(self, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All rows of the levels in the mask ``levels`` and their level (the fallback)."""
        index = self._index
        chosen = np.flatnonzero(levels)
        if chosen.size == 0:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty
        pos = np.concatenate([np.arange(index.start[k], index.start[k + 1]) for k in chosen])
        return index.order[pos].astype(np.int64), np.repeat(chosen, index.count[chosen])


class CrossedCategoryRates(_ByLevel):
    """The rates of any move, drawn level by level of the first factor (the interface of
    :class:`~pymc_subsample.kernels.mhss.ThinningRates`): ``draw(rng, K)`` with
    ``K ~ Poisson(envelope)`` splits the candidates among the levels in proportion to their
    means, which makes them independent Poisson counts."""

    def __init__(self, bound: CrossedBound, factors: _Factors) -> None:
        super().__init__(bound, factors, 0)
        self.envelope = float(np.sum(self._draws))
        self.expected = self.envelope

    def draw(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
        if size == 0 or self.envelope <= 0.0:
            return np.empty(0, dtype=np.int64), np.empty(0)
        cdf = np.cumsum(self._draws)
        which = np.minimum(np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right"),
                           cdf.size - 1)
        idx, _, rates = self._rows(rng, np.bincount(which, minlength=cdf.size))
        return idx, rates
