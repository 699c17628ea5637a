r"""MHSS bounds for rows that touch one level of a grouping factor (random intercepts).

In a model with group effects, ``η_i = x_iᵀβ + u_{g_i}``, each row's predictor depends on the
dense coefficients and on one of many level coordinates. In the Laplace frame ordered levels
first (:class:`~pymc_subsample.model.frame.LaplaceFrame`) the whitened row :math:`\tilde x_i` is
non-zero on the dense block :math:`D` and on the row's level :math:`k_i` only, so

.. math::

    |a_i| = |\tilde x_i^\top\varphi| \le s_i\,\lVert\varphi_D\rVert + t_i\,|\varphi_{k_i}|,
    \qquad s_i = \lVert\tilde x_{i,D}\rVert,\; t_i = |\tilde x_{i,k_i}|,

where Cauchy–Schwarz on the whole :math:`\varphi` (Corollary 2) gives
:math:`\lVert\tilde x_i\rVert\lVert\varphi\rVert` and :math:`\lVert\varphi\rVert^2` grows with
the number of levels. The remainder of a one-predictor row is a scalar function of the
displacements :math:`a = \eta_i - \hat\eta_i`, :math:`a'` (at :math:`\theta'`) and
:math:`h = a' - a`: with :math:`L_k \ge \sup|f^{(k+1)}|` on the interval they visit,

.. math::

    |\xi_i| \le \tfrac12 L_1 |h| (|a| + |a'|) \quad(k = 1), \qquad
    |\xi_i| \le \tfrac16 L_2 |h| (a^2 + |a a'| + a'^2) \quad(k = 2),

    |\xi_i| \le \tfrac1{24} L_3 |h| (|a|^3 + a^2|a'| + |a|a'^2 + |a'|^3) \quad(k = 3),

    |\xi_i| \le \tfrac1{120} L_4 |h| \textstyle\sum_{j=0}^4 |a|^j|a'|^{4-j} \quad(k = 4),

(:math:`R'(t) = f'(\hat\eta + t) - T'(t)` is at most :math:`L_k|t|^k/k!`, and
:math:`\xi = \int_a^{a'} R'`; for :math:`a, a'` of opposite signs
:math:`|a|^{k+1} + |a'|^{k+1} \le |h|\sum_j |a|^j|a'|^{k-j}`), increasing in
:math:`|a|, |a'|, |h|`, so the bounds above may replace them. Each is
:math:`S_i = s_i w_D + t_i w_K` times a factor linear in the row's share
:math:`\rho_i = s_i w_D / S_i`, e.g. :math:`|a_i| \le S_i(\rho_i u + (1-\rho_i) v)` with
:math:`u = \lVert\varphi_D\rVert / w_D`, :math:`v = |\varphi_{k}| / w_K`. So the rate of row
:math:`i` is

.. math::

    B_i(\theta, \theta') = \bar c_i\, P_{k_i}(\rho_i), \qquad
    \bar c_i = \kappa_k L_k S_i^{k+1},\; \kappa_k = \tfrac1{(k+1)!},

with :math:`P_k` a polynomial of degree :math:`k + 1` whose coefficients depend on the pair
and the level :math:`k` only; it is symmetric in :math:`(\theta, \theta')`. Its total
:math:`\Lambda = \sum_i B_i` comes from per-level moments :math:`\sum_{i \in k}\bar c_i
\rho_i^j` in :math:`O(G)`, and rows are drawn from the fixed weights :math:`\bar c_i` with
the envelope :math:`\bar M = \max_k \max_\rho P_k(\rho)` (the largest of each linear factor's
ends) and kept with probability :math:`P_{k_i}(\rho_i)/\bar M` before any data are read:
a Poisson process of rate :math:`B_i` (``docs/methods/mhss.md``, "Rows that touch one level").

Rows touching no level have :math:`t_i = 0` (category ``G``); a row touching several levels
(a crossed factor) is bounded with its whole norm and :math:`\lVert\varphi\rVert` (category
``G + 1``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pymc_subsample.bounds.rates import EnvelopeRates
from pymc_subsample.kernels.indexing import WeightedIndexSampler, round_up_float32

__all__ = ["CategoryRates", "LevelBound", "LevelMoveRates", "LevelRates", "LevelRows",
           "level_rows", "power_sum", "split_level_rows"]

#: ``κ_k`` of the scalar remainder bounds (module docstring).
ORDER_FACTOR = {1: 0.5, 2: 1.0 / 6.0, 3: 1.0 / 24.0, 4: 1.0 / 120.0}


def check_level_order(order: int) -> None:
    """Refuse a Taylor order the level bound has no form for (1, 2, and 3 and 4 for the level
    moves' higher-order control variates, :mod:`pymc_subsample.model.level_cubic`)."""
    if isinstance(order, bool) or order not in ORDER_FACTOR:
        raise ValueError(f"order must be 1, 2, 3 or 4 (the Taylor control-variate order), "
                         f"got {order!r}")

#: Relative margin on each linear factor for the float32 rounding of the stored shares.
SHARE_MARGIN = 1e-6


@dataclass(frozen=True)
class LevelRows:
    """Per-row pieces of the level bound for all N rows, from a data pass.

    Attributes
    ----------
    weights : ndarray of float32
        ``c̄_i = κ_k L_k S_i^{k+1}`` (rounded up), the fixed sampling weights.
    share : ndarray of float32
        ``ρ_i = s_i w_D / S_i`` in ``[0, 1]``.
    category : ndarray of int32
        The row's level ``k_i`` (``0..G-1``), ``G`` for none, ``G + 1`` for several.
    plain : ndarray of float32
        Corollary 2's constants ``L_k ‖x̃_i‖^{k+1}`` from the same pass (the alternative).
    n_levels : int
        ``G``.
    order : int
        Taylor order ``k``.
    """

    weights: np.ndarray
    share: np.ndarray
    category: np.ndarray
    plain: np.ndarray
    n_levels: int
    order: int

    @staticmethod
    def empty(n_rows: int, n_levels: int, order: int) -> LevelRows:
        return LevelRows(np.zeros(n_rows, np.float32), np.ones(n_rows, np.float32),
                         np.zeros(n_rows, np.int32), np.zeros(n_rows, np.float32),
                         n_levels, order)

    def fill(self, rows: np.ndarray, block: tuple[np.ndarray, ...]) -> None:
        """Write one block of :func:`level_rows` into the rows ``rows``."""
        for target, values in zip((self.weights, self.share, self.category, self.plain), block,
                                  strict=True):
            target[rows] = values


def dense_weight(dim: int, n_levels: int) -> float:
    """``w_D``: the typical ``‖φ_D‖`` under ``N(0, I)``, ``√|D|``."""
    return math.sqrt(max(dim - n_levels, 1))


#: ``w_K``: twice the typical ``|φ_k|``, so that the largest of many levels' ``|φ_k| / w_K``
#: rarely exceeds ``‖φ_D‖ / w_D`` (the envelope, and so the index draws, stay small).
LEVEL_WEIGHT = 2.0


def level_rows(
    order: int, sup: np.ndarray, whitened: np.ndarray, n_levels: int,
    norms: np.ndarray | None = None,
) -> tuple[np.ndarray, ...]:
    """``(c̄, ρ, category, plain)`` for a block of rows (float32 where :class:`LevelRows` is).

    Parameters
    ----------
    order : {1, 2, 3}
    sup : ndarray, shape (n,)
        ``L_k ≥ sup |f^{(k+1)}|`` of each row on the interval its predictor visits.
    whitened : ndarray, shape (n, d)
        ``x̃_i``, levels in the first ``n_levels`` columns.
    n_levels : int
        ``G``.
    norms : ndarray, shape (n,), optional
        ``‖x̃_i‖`` when the caller has them already.
    """
    check_level_order(order)
    xt = np.asarray(whitened, dtype=np.float64)
    levels, dense = np.abs(xt[:, :n_levels]), xt[:, n_levels:]
    touched = np.count_nonzero(levels, axis=1)
    rows = np.arange(xt.shape[0])
    level = np.argmax(levels, axis=1) if n_levels else np.zeros(xt.shape[0], dtype=np.int64)
    t = levels[rows, level] if n_levels else np.zeros(xt.shape[0])
    s = np.sqrt(np.einsum("ij,ij->i", dense, dense))
    full = (np.sqrt(np.einsum("ij,ij->i", xt, xt)) if norms is None
            else np.asarray(norms, dtype=np.float64))
    category = np.where(touched == 0, n_levels, level)
    several = touched > 1
    category[several] = n_levels + 1
    s[several], t[several] = full[several], 0.0
    dense_part = s * dense_weight(xt.shape[1], n_levels)
    return _level_pieces(order, sup, dense_part, t, category, full)


def _level_pieces(order: int, sup: np.ndarray, dense_part: np.ndarray, t: np.ndarray,
                  category: np.ndarray, full: np.ndarray) -> tuple[np.ndarray, ...]:
    """The :class:`LevelRows` pieces of rows from their weighted dense part, level value
    ``t``, category and whole whitened length (shared by both row layouts)."""
    wide = dense_part + t * LEVEL_WEIGHT
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(wide > 0.0, dense_part / wide, 1.0)
    weights = ORDER_FACTOR[order] * sup * wide ** (order + 1)
    return (round_up_float32(weights), np.clip(share, 0.0, 1.0).astype(np.float32),
            category.astype(np.int32), round_up_float32(sup * full ** (order + 1)))


def split_level_rows(
    order: int, sup: np.ndarray, dense: np.ndarray, level: np.ndarray, value: np.ndarray,
    n_levels: int,
) -> tuple[np.ndarray, ...]:
    """:func:`level_rows` of whitened rows kept split by level: ``x̃_{i,D}`` = ``dense``
    ``(n, d_F)`` and ``x̃_{i,k_i}`` = ``value`` on the level ``level`` (each row on one level
    at most; ``value = 0`` for none). O(n·d_F), no ``(n, d)`` array."""
    check_level_order(order)
    dense = np.asarray(dense, dtype=np.float64)
    s2 = np.einsum("ij,ij->i", dense, dense)
    t = np.abs(np.asarray(value, dtype=np.float64))
    full = np.sqrt(s2 + t * t)
    category = np.where(t > 0.0, level, n_levels)
    dense_part = np.sqrt(s2) * dense_weight(dense.shape[1] + n_levels, n_levels)
    return _level_pieces(order, sup, dense_part, t, category, full)


def _poly_product(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The product of polynomials in ``ρ`` held column by column (row ``j``: the coefficient
    of ``ρ^j``; one column per category)."""
    if p.shape[0] > q.shape[0]:  # a loop over the shorter one's rows
        p, q = q, p
    out = np.zeros((p.shape[0] + q.shape[0] - 1, max(p.shape[1], q.shape[1])))
    for i in range(p.shape[0]):
        out[i : i + q.shape[0]] += p[i] * q
    return out


def power_sum(a, b, k: int, one, product):
    """``Σ_{j=0}^{k} a^j b^{k−j}`` under ``product`` (of polynomials or of arrays), by
    ``S_m = a^m + b S_{m−1}``: ``2k − 1`` products."""
    power, total = a, product(b, one) + a
    for _ in range(k - 1):
        power = product(power, a)
        total = product(b, total) + power
    return total


class LevelRates(EnvelopeRates):
    """The rates ``B_i`` of one move ``θ → θ'`` (:meth:`LevelBound.rates`)."""

    def __init__(self, bound: LevelBound, coefficients: np.ndarray, envelope_factor: float):
        super().__init__(bound.sampler, envelope_factor,
                         float(np.sum(coefficients * bound.moments)))
        self._bound = bound
        self._coefficients = coefficients

    def row_rates(self, idx: np.ndarray) -> np.ndarray:
        """``B_i = c̄_i P_{k_i}(ρ_i) ≥ |ξ_i(θ, θ')|`` of the rows ``idx`` (Horner in ``ρ_i``)."""
        return self.sampler.weights[idx] * self._bound.polynomial(self._coefficients, idx)


class LevelBound:
    """The level-split MHSS bound (module docstring) on the rows of a :class:`LevelRows`.

    Parameters
    ----------
    rows : LevelRows
    dim : int
        ``d``, the length of ``φ``.
    """

    def __init__(self, rows: LevelRows, dim: int) -> None:
        self.order, self.n_levels, self.dim = rows.order, rows.n_levels, dim
        self.sampler = WeightedIndexSampler(rows.weights)
        self.share, self.category = rows.share, rows.category
        self.dense_weight = dense_weight(dim, rows.n_levels)
        n_cat, degree = rows.n_levels + 2, rows.order + 1
        # Σ_{i ∈ k} c̄_i ρ_i^j per category and power, in chunks (O(N) once)
        self.moments = np.zeros((n_cat, degree + 1))
        step = 1 << 20
        for start in range(0, rows.weights.size, step):
            w = self.sampler.weights[start : start + step].astype(np.float64)
            rho = rows.share[start : start + step].astype(np.float64)
            cat = rows.category[start : start + step]
            power = np.ones_like(w)
            for j in range(degree + 1):
                self.moments[:, j] += np.bincount(cat, weights=w * power, minlength=n_cat)
                power = power * rho
        self._present = self.moments[:, 0] > 0.0
        #: the rows by level, for the level moves (:meth:`level_rates`; built on first use)
        self._by_level: np.ndarray | None = None

    def coefficients(self, phi: np.ndarray, phi_new: np.ndarray, *, by_category: bool = False
                     ) -> tuple[np.ndarray, np.ndarray]:
        """Per category, the coefficients of ``P_k`` for the move between the whitened points
        ``φ`` and ``φ'`` (the product of the linear factors ``H``, ``A``, ``A'`` of the module
        docstring, as polynomials in ρ; shape ``(G + 2, k + 2)``) and its largest value over
        ``ρ ∈ [0, 1]`` (each linear factor is largest at an end; shape ``(G + 2,)``), or with
        ``by_category`` over the category's own range of stored ``ρ_i`` (each factor at the
        larger of its values at the range's ends)."""
        g, n_cat = self.n_levels, self.n_levels + 2
        h = phi_new - phi
        u = np.empty((3, n_cat))  # ‖·_D‖ / w_D per category (‖·‖ / w_D for several levels)
        v = np.zeros((3, n_cat))  # |·_k| / w_K per level (0 for none and several)
        for row, vec in enumerate((phi, phi_new, h)):
            dense = math.sqrt(float(vec[g:] @ vec[g:]))
            u[row, :-1] = dense
            u[row, -1] = math.sqrt(dense * dense + float(vec[:g] @ vec[:g]))
            v[row, :g] = np.abs(vec[:g]) * (1.0 / LEVEL_WEIGHT)
        u *= 1.0 / self.dense_weight
        top = np.maximum(u, v)
        # each factor is v + margin + (u − v)ρ: never below its value at the stored ρ, never
        # above max(u, v)(1 + margin); twice the margin covers the products' rounding
        (a0, b0, h0), (a1, b1, h1) = v + SHARE_MARGIN * top, u - v
        if by_category:  # each factor a + bρ at the ends of the category's stored ρ_i
            lo, hi = self._share_range
            top = np.maximum(v + SHARE_MARGIN * top + (u - v) * lo,
                             v + SHARE_MARGIN * top + (u - v) * hi)
            top = np.maximum(top, 0.0) * (1.0 + 2.0 * SHARE_MARGIN)
        else:
            top = top * (1.0 + 2.0 * SHARE_MARGIN)
        # H · Σ_{j=0}^{k} A^j A'^{k−j} as polynomials in ρ (rows: powers of ρ), and its
        # largest value from each factor's largest
        factor_a, factor_b, factor_h = np.stack([a0, a1]), np.stack([b0, b1]), np.stack([h0, h1])
        total = power_sum(factor_a, factor_b, self.order, np.ones((1, n_cat)), _poly_product)
        coefficients = _poly_product(factor_h, total).T.copy()
        envelope = top[2] * power_sum(top[0], top[1], self.order, 1.0, np.multiply)
        return coefficients, envelope

    def rates(self, phi: np.ndarray, phi_new: np.ndarray) -> LevelRates:
        """The rates of the move between the whitened points ``φ`` and ``φ'``, drawn from all
        rows with one envelope (the largest category's)."""
        coefficients, envelope = self.coefficients(phi, phi_new)
        return LevelRates(self, coefficients, float(np.max(envelope[self._present],
                                                           initial=0.0)))

    def level_rates(self, phi: np.ndarray, phi_new: np.ndarray) -> LevelMoveRates:
        """The rates of the level moves ``φ → φ'`` (``φ'`` differs from ``φ`` on level
        coordinates only), level by level (:class:`LevelMoveRates`)."""
        if self._by_level is None:
            self._index_levels()
        return LevelMoveRates(self, *self.coefficients(phi, phi_new, by_category=True))

    def category_rates(self, phi: np.ndarray, phi_new: np.ndarray) -> CategoryRates:
        """The rates of any move ``φ → φ'`` drawn category by category
        (:class:`CategoryRates`): the fixed block's move beside the level moves."""
        if self._by_level is None:
            self._index_levels()
        return CategoryRates(self, *self.coefficients(phi, phi_new, by_category=True))

    def _index_levels(self) -> None:
        """The rows sorted by level (stable), each level's span in that order, and the largest
        weight of each level: what :class:`LevelMoveRates` draws a level's rows from (O(N)
        once, 4 bytes a row)."""
        n_cat = self.n_levels + 2
        self._by_level = np.argsort(self.category, kind="stable").astype(np.int32)
        counts = np.bincount(self.category, minlength=n_cat)
        self._level_start = np.concatenate([[0], np.cumsum(counts)])
        self._level_count = counts
        top = np.zeros(n_cat, dtype=np.float32)
        np.maximum.at(top, self.category, self.sampler.weights)
        self._level_top = top.astype(np.float64)
        # each category's range of stored shares ρ_i (the envelope of its own rows)
        lo, hi = np.ones(n_cat, dtype=np.float32), np.zeros(n_cat, dtype=np.float32)
        np.minimum.at(lo, self.category, self.share)
        np.maximum.at(hi, self.category, self.share)
        self._share_range = (lo.astype(np.float64), np.maximum(lo, hi).astype(np.float64))

    def polynomial(self, coefficients: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """``P_{k_i}(ρ_i)`` of the rows ``idx`` (Horner in ``ρ_i``)."""
        coef = coefficients[self.category[idx]]
        share = self.share[idx].astype(np.float64)
        factor = coef[:, -1]
        for j in range(coef.shape[1] - 2, -1, -1):
            factor = factor * share + coef[:, j]
        return factor


class _ByCategory:
    r"""Rows drawn category by category (a level, none, several): a Poisson process of rates
    ``B_i = c̄_i P_k(ρ_i)`` on category ``k`` is ``Poisson(n_k c̄^{max}_k \bar M_k)`` rows
    uniform among its ``n_k`` rows, each kept with probability
    ``c̄_i P_k(ρ_i) / (c̄^{max}_k \bar M_k)`` (``c̄^{max}_k`` its largest weight, ``\bar M_k``
    its polynomial's largest value over ``ρ ∈ [0, 1]``), independent across categories and
    drawn without reading data. Its envelope is each category's own, not the largest."""

    def __init__(self, bound: LevelBound, coefficients: np.ndarray, envelope: np.ndarray):
        self._bound, self._coefficients, self._envelope = bound, coefficients, envelope
        #: ``Λ_k = Σ_{i ∈ k} B_i`` per category
        self.category_expected = np.sum(coefficients * bound.moments, axis=1)
        self._count = bound._level_count
        #: mean candidate rows per category
        self._draws = self._count * bound._level_top * envelope

    def _rows(self, rng: np.random.Generator, counts: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``counts[k]`` candidates uniform in each category, thinned: (rows, category, B_i)."""
        bound = self._bound
        total = int(counts.sum())
        if total == 0:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty, np.empty(0)
        category = np.repeat(np.arange(counts.size), counts)
        size = self._count[category]
        pos = bound._level_start[category] + np.minimum(
            (rng.random(total) * size).astype(np.int64), size - 1)
        idx = bound._by_level[pos].astype(np.int64)
        rates = bound.sampler.weights[idx] * bound.polynomial(self._coefficients, idx)
        ceiling = bound._level_top[category] * self._envelope[category]
        keep = rng.random(total) * ceiling < rates
        return idx[keep], category[keep], rates[keep]

    def row_rates(self, idx: np.ndarray) -> np.ndarray:
        """``B_i`` of the rows ``idx``."""
        return self._bound.sampler.weights[idx] * self._bound.polynomial(self._coefficients,
                                                                         idx)


class CategoryRates(_ByCategory):
    """The rates of any move, drawn category by category (:class:`_ByCategory`), as the MHSS
    kernel reads them (:class:`pymc_subsample.kernels.mhss.ThinningRates`): ``draw(rng, K)``
    with ``K ~ Poisson(envelope)`` splits the ``K`` candidates among the categories in
    proportion to their means, which makes them independent Poisson counts. With many levels
    the global envelope of :class:`LevelRates` (the largest level's factor times all weights)
    draws far more candidates than rows kept; this one's are each category's own."""

    def __init__(self, bound: LevelBound, coefficients: np.ndarray, envelope: np.ndarray):
        super().__init__(bound, coefficients, envelope)
        self.envelope = float(np.sum(self._draws))
        self.expected = float(np.sum(self.category_expected))

    def draw(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
        if size == 0 or self.envelope <= 0.0:
            return np.empty(0, dtype=np.int64), np.empty(0)
        cdf = np.cumsum(self._draws)
        which = np.minimum(np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right"),
                           cdf.size - 1)
        idx, _, rates = self._rows(rng, np.bincount(which, minlength=cdf.size))
        return idx, rates


class LevelMoveRates(_ByCategory):
    r"""The rates ``B_i`` of simultaneous moves of the levels, one Poisson process per level.

    For a move that changes level coordinates only (``φ'_D = φ_D``), level ``k``'s rows have
    rates ``B_i = c̄_i P_k(ρ_i)`` that depend on the pair through ``φ_k``, ``φ'_k`` and
    ``φ_D`` only, and the rows touching no level have rate 0; each level's rows are drawn
    apart (:class:`_ByCategory`). A level whose ``n_k c̄^{max}_k \bar M_k`` reaches ``n_k`` is
    decided on all its rows (:attr:`fallback`).
    """

    def __init__(self, bound: LevelBound, coefficients: np.ndarray, envelope: np.ndarray):
        super().__init__(bound, coefficients, envelope)
        g = bound.n_levels
        #: ``Λ_k``, the expected rows of each level's decision
        self.expected = self.category_expected[:g]
        #: levels whose thinning would draw as many rows as they have: decided on all rows
        self.fallback = ~(self._draws[:g] < self._count[:g])

    def draw(self, rng: np.random.Generator, levels: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows of the Poisson processes of rates ``B_i`` of the levels in the mask ``levels``:
        ``(rows, their level, their B_i)``."""
        g = self._bound.n_levels
        lam = np.zeros(self._draws.size)
        lam[:g] = np.where(levels & ~self.fallback, self._draws[:g], 0.0)
        return self._rows(rng, rng.poisson(lam))

    def rows_of(self, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All rows of the levels in the mask ``levels`` and their level (the fallback)."""
        bound = self._bound
        chosen = np.flatnonzero(levels)
        if chosen.size == 0:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty
        spans = [np.arange(bound._level_start[k], bound._level_start[k + 1]) for k in chosen]
        pos = np.concatenate(spans)
        level = np.repeat(chosen, self._count[chosen])
        return bound._by_level[pos].astype(np.int64), level
