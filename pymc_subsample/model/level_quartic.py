r"""Fourth-order control variates for the moves of one grouping factor's levels
(``docs/methods/mhss.md``, "Fourth-order terms for the level moves").

The third-order terms of :mod:`pymc_subsample.model.level_cubic` and, with
``a_i = c_i + t_iδ_k``, ``c_i = x_{F,i}ᵀδ_F``, ``f⁗_i = f⁗(η̂_i)``, the rows' quartic

.. math::

    \sum_{i\in k} f''''_i a_i^4 = \sum_{m=0}^{4}\binom4m \delta_k^m\,
    \sum_{i\in k} f''''_i t_i^m c_i^{4-m}
    = Q_{0,k}(\delta_F) + 4\delta_k Q_{1,k}(\delta_F) + 6\delta_k^2 Q_{2,k}(\delta_F)
    + 4\delta_k^3 Q_{3,k}(\delta_F) + \delta_k^4 Q_{4,k}

with the per-level sums ``Q_{4,k} = Σ f⁗ t⁴``, ``Q_{3,k} = Σ f⁗ t³ x_F`` (times ``δ_F``),
``Q_{2,k} = Σ f⁗ t² x_F^{⊗2}``, ``Q_{1,k} = Σ f⁗ t x_F^{⊗3}`` (each kept once per monomial of
``δ_F``: ``C(d_F + 2, 3)`` numbers a level for ``Q_1``) and, over all rows,
``Σ_i f⁗_i c_i⁴ = p(δ_F)ᵀ E₄ p(δ_F)`` with ``E₄ = Σ f⁗ (x_F^{⊗2})(x_F^{⊗2})ᵀ`` on the pairs
``p(δ_F)`` of ``δ_F``. A level's move (``θ_F`` held) changes its rows' quartic by the terms in
``δ_k`` only, ``O(1)`` a level once the coefficients at ``δ_F`` are known (``O(G d_F³/6)``, once
a ``δ_F``); any other move by the difference of the whole quartic. Stage 1 adds
``(1/24)`` of these changes, each row's remainder loses its ``(1/24)f⁗_i(a'^4_i − a_i^4)``,
and the remainders are bounded with ``L₄ ≥ sup|f^{(5)}|`` by the level bound at order 4
(:mod:`pymc_subsample.bounds.levels`). The logistic family only: ``|f^{(5)}| = |σ⁗|``,
at most 0.12768392196… on the whole line, so no region.
"""

from __future__ import annotations

from itertools import combinations_with_replacement
from math import factorial

import numpy as np
from scipy.special import expit

from pymc_subsample.kernels.gram import weighted_level_sums
from pymc_subsample.model.frame import LevelFrame
from pymc_subsample.model.glm_pass import GLMPass
from pymc_subsample.model.level_cubic import (
    CubicPass,
    LevelCubic,
    RecentByDelta,
    refusal,
    summed_pass,
)
from pymc_subsample.model.levels import SplitRows

__all__ = ["LOGIT_FIFTH_SUP", "LevelQuartic", "level_quartic"]

#: ``L₄ ≥ sup|f^{(5)}|`` of ``f(η) = yη − log(1 + e^η)``: ``f^{(5)} = −σ⁗ =
#: −p(1−p)(1−2p)(1−12p+12p²)``, whose largest magnitude on ``[0, 1]`` is 0.127683921967…
#: (at ``|η| = 0.8426``), rounded up.
LOGIT_FIFTH_SUP = 0.1277

#: rows of a block whose monomials are formed at once (``rows × C(d_F + 2, 3)`` floats)
_SUB_ROWS = 1 << 13


def _logit_fourth(eta: np.ndarray) -> np.ndarray:
    """``f⁗(η) = −p(1 − p)(1 − 6p(1 − p))``, ``p = σ(η)``, of the logistic log-likelihood."""
    p = expit(eta)
    q = p * (1.0 - p)
    return -q * (1.0 - 6.0 * q)


class _Monomials:
    """The monomials of degree ``k`` in ``d`` variables, each once, and their multinomial
    coefficients: ``(Σ_j x_j δ_j)^k = Σ_m mult_m x^{(m)} δ^{(m)}``."""

    def __init__(self, d: int, k: int) -> None:
        combos = np.array(list(combinations_with_replacement(range(d), k)),
                          dtype=np.int64).reshape(-1, k)
        self.index = combos.T
        counts = [np.bincount(row, minlength=d) for row in combos]
        self.mult = np.array([factorial(k) / np.prod([factorial(c) for c in cnt])
                              for cnt in counts])

    def kept(self, coordinates: np.ndarray) -> np.ndarray:
        """The monomials of the variables ``coordinates`` only (in this order: the same as
        ``_Monomials(len(coordinates), k)``'s for increasing ``coordinates``)."""
        return np.flatnonzero(np.all(np.isin(self.index, coordinates), axis=0))

    def columns(self, x_t: np.ndarray) -> np.ndarray:
        """``x^{(m)}`` of each column of ``x_t`` (``(d, n)``; shape ``(M, n)``)."""
        out = x_t[self.index[0]]
        for j in self.index[1:]:
            out = out * x_t[j]
        return out

    def weighted(self, d: np.ndarray) -> np.ndarray:
        """``mult_m δ^{(m)}``."""
        return self.mult * self.columns(d[:, None])[:, 0]


class LevelQuartic(LevelCubic):
    """The levels' third- and fourth-order control-variate terms and the order-4 level bound
    (module docstring), built by :func:`level_quartic`.

    Attributes
    ----------
    q_sums : tuple of ndarray
        ``(Q_{1,k}, Q_{2,k}, Q_{3,k}, Q_{4,k})`` per level as the pass summed them: ``Q_1`` and
        ``Q_2`` on the monomials of the fixed coordinates a row may read (``columns``, ``c`` of
        them: ``(G, C(c+2, 3))``, ``(G, C(c+1, 2))``), ``Q_3`` on all ``d_F``.
    e4_sum : ndarray, shape (C(c+1, 2), C(c+1, 2))
        ``E₄``.
    bound : LevelBound
        The level bound of the order-4 remainders (``κ₄ = 1/120``, ``L₄ = 0.1277``).
    """

    order = 4

    def __init__(self, glm_pass: GLMPass, frame: LevelFrame, columns: np.ndarray, reads,
                 t_sum, v_sum, w_sum, e_sum, q1, q2, q3, q4, e4, bound) -> None:
        super().__init__(glm_pass, frame, reads, t_sum, v_sum, w_sum, e_sum, bound)
        self.q_sums, self.e4_sum = (q1, q2, q3, q4), e4
        # the sums are on the monomials of ``columns`` (positions in ``layout.fixed``); keep
        # those of the coordinates the rows read (the others' sums are 0)
        n_read = self._read_pos.size
        self._pairs, self._triples = _Monomials(n_read, 2), _Monomials(n_read, 3)
        read = np.searchsorted(columns, self._read_pos)
        keep2 = _Monomials(columns.size, 2).kept(read)
        self._q1 = np.ascontiguousarray(q1[:, _Monomials(columns.size, 3).kept(read)])
        self._q2 = np.ascontiguousarray(q2[:, keep2])
        self._q3 = np.ascontiguousarray(q3[:, self._read_pos])
        self._e4 = np.ascontiguousarray(e4[keep2][:, keep2])
        self._quartic_recent = RecentByDelta(self._quartic_coefficients)

    def _quartic_coefficients(self, d: np.ndarray) -> tuple[np.ndarray, ...]:
        """``(Q_{1,k}(δ_F), Q_{2,k}(δ_F), Q_{3,k}(δ_F), Q₀)`` at the read coordinates' ``d``."""
        pairs = self._pairs.weighted(d)
        return (self._q1 @ self._triples.weighted(d), self._q2 @ pairs, self._q3 @ d,
                float(pairs @ self._e4 @ pairs))

    def quartic_coefficients(self, theta: np.ndarray) -> tuple[np.ndarray, ...]:
        return self._quartic_recent(self.read_delta(theta))

    def _level_quartic(self, theta: np.ndarray, dk: np.ndarray) -> np.ndarray:
        """``Σ_{i∈k} f⁗_i a_i⁴`` less ``Q₀``'s share, per level at ``δ_k = dk``, ``θ_F``
        at ``θ``'s."""
        c1, c2, c3, _ = self.quartic_coefficients(theta)
        return dk * (4.0 * c1 + dk * (6.0 * c2 + dk * (4.0 * c3 + dk * self.q_sums[3])))

    def level_terms(self, theta: np.ndarray, x_new: np.ndarray) -> np.ndarray:
        lv = slice(self.layout.start, self.layout.stop)
        d0, d1 = theta[lv] - self._theta_hat[lv], x_new - self._theta_hat[lv]
        return super().level_terms(theta, x_new) + (
            self._level_quartic(theta, d1) - self._level_quartic(theta, d0)) / 24.0

    def total_terms(self, theta: np.ndarray, theta_new: np.ndarray) -> float:
        return super().total_terms(theta, theta_new) + (
            self._quartic(theta_new) - self._quartic(theta)) / 24.0

    def _quartic(self, theta: np.ndarray) -> float:
        """``Σ_i f⁗_i a_i⁴`` over all rows at ``θ``."""
        lv = slice(self.layout.start, self.layout.stop)
        dk = theta[lv] - self._theta_hat[lv]
        return float(np.sum(self._level_quartic(theta, dk))
                     + self.quartic_coefficients(theta)[3])

    def level_slope_curve(self, theta: np.ndarray, d: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray]:
        slope, curve = super().level_slope_curve(theta, d)
        c1, c2, c3, _ = self.quartic_coefficients(theta)
        q4 = self.q_sums[3]
        # (1/24) d/dδ and d²/dδ² of 4c₁δ + 6c₂δ² + 4c₃δ³ + Q₄δ⁴
        return (slope + (c1 + d * (3.0 * c2 + d * (3.0 * c3 + d * q4))) / 6.0,
                curve + (c2 + d * (2.0 * c3 + d * q4)) / 2.0)

    def _row_polynomial(self, eta_hat: np.ndarray, a: np.ndarray, a_new: np.ndarray
                        ) -> np.ndarray:
        return (super()._row_polynomial(eta_hat, a, a_new)
                + _logit_fourth(eta_hat) * ((a_new * a_new) ** 2 - (a * a) ** 2) / 24.0)


def level_quartic(data_pass, frame: LevelFrame, unread: np.ndarray | None = None
                  ) -> LevelQuartic | str:
    """The third- and fourth-order terms and their bound from one pass over all rows at
    ``θ̂``, or why there are none (a string naming what is missing). ``unread``: fixed
    coordinates (indices into ``θ``) no row reads, left out of the quartic's monomials."""
    why = refusal(data_pass)
    if why is not None:
        return why
    fixed = frame.layout.fixed
    columns = np.flatnonzero(~np.isin(fixed, () if unread is None else unread))
    sums, bound = summed_pass(data_pass, frame, QuarticPass(data_pass, frame, columns))
    return LevelQuartic(data_pass, frame, columns, *sums, bound)


class QuarticPass(CubicPass):
    """:class:`~pymc_subsample.model.level_cubic.CubicPass` with the quartic's per-level sums
    and ``E₄``, and the order-4 level bound's pieces."""

    order, remainder_sup = 4, LOGIT_FIFTH_SUP

    def __init__(self, glm_pass: GLMPass, frame: LevelFrame, columns: np.ndarray) -> None:
        super().__init__(glm_pass, frame)
        self._columns = columns
        self._pairs = _Monomials(columns.size, 2)
        # each monomial of degree 3 as (the pair of its first two variables, the third)
        self._triples = _Monomials(columns.size, 3)
        pair_of = {tuple(p): m for m, p in enumerate(self._pairs.index.T)}
        self._triple_pair = np.array([pair_of[(a, b)] for a, b in self._triples.index[:2].T],
                                     dtype=np.int64)

    def thread_copy(self) -> QuarticPass:
        return QuarticPass(self._pass.thread_copy(), self._frame, self._columns)

    def sums(self, x: SplitRows, eta_hat: np.ndarray, temperature: float
             ) -> tuple[np.ndarray, ...]:
        g = self._frame.layout.n_levels
        f4 = _logit_fourth(eta_hat) / temperature
        xf, t, level = x.fixed_block(), x.value, x.level
        n_pairs, third = self._pairs.mult.size, self._triples.index[2]
        q1 = np.zeros((g, self._triples.mult.size))
        q2 = np.zeros((g, n_pairs))
        e4 = np.zeros((n_pairs, n_pairs))
        # rows sorted by level and monomials as rows (contiguous): each level's sums are one
        # np.add.reduceat over its run of columns
        by_level = np.argsort(level, kind="stable")
        x_t = np.ascontiguousarray(xf[by_level][:, self._columns].T)
        f4_s, t_s, level_s = f4[by_level], t[by_level], level[by_level]
        for start in range(0, t.size, _SUB_ROWS):
            part = slice(start, start + _SUB_ROWS)
            lev = level_s[part]
            runs = np.flatnonzero(np.r_[True, lev[1:] != lev[:-1]])
            xp, ft = self._pairs.columns(x_t[:, part]), f4_s[part] * t_s[part]
            xp_ft = xp * ft
            q1[lev[runs]] += np.add.reduceat(xp_ft[self._triple_pair] * x_t[third, part], runs,
                                             axis=1).T
            q2[lev[runs]] += np.add.reduceat(xp_ft * t_s[part], runs, axis=1).T
            e4 += (xp * f4_s[part]) @ xp.T
        return (*super().sums(x, eta_hat, temperature), q1, q2,
                weighted_level_sums(level, f4 * t * t * t, xf, g),
                np.bincount(level, f4 * (t * t) ** 2, minlength=g), e4)
