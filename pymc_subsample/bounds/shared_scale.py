r"""MHSS bounds for two-predictor rows whose second predictor is one parameter for all rows.

A Normal or Student-t row with a sampled σ, a negative binomial with a sampled dispersion or a
Gamma with a sampled shape has two predictors (:class:`~pymc_subsample.bounds.LocationScaleFamily`):
a per-row one, :math:`p_1 = \mu_i` (or :math:`t_i`, :math:`\eta_i`), and :math:`p_2 = \lambda`,
the log of the scale. When the scale is one sampled scalar, :math:`\lambda - \hat\lambda =
\ell^\top\varphi` for one whitened row :math:`\ell` shared by every row, so its displacements at
:math:`\theta`, :math:`\theta'` and along :math:`h = \varphi' - \varphi` are known exactly at
each move, where Corollary 2 bounds them by Cauchy–Schwarz, :math:`s_\lambda\lVert\varphi\rVert`,
as it does the first predictor's.

*The bound.* With :math:`g(q) = f(\hat p + q)`, its Taylor polynomial :math:`T_k` at 0 and
:math:`R = g - T_k`, each partial of :math:`R` is an integral of the next derivatives of
:math:`g`: with :math:`|\partial^a_1\partial^b_2 f| \le S_{a,b}` on the region's box,

.. math::

    |\partial_j R(q)| \le \sum_a S_{ja}|q_a| \;(k = 1), \qquad
    |\partial_j R(q)| \le \tfrac12 \sum_{a,b} S_{jab}|q_a||q_b| \;(k = 2),

(:math:`S_{jab}` is :math:`S_{m, k+1-m}` with :math:`m` the number of first-predictor indices).
Integrating along the segment from the displacement :math:`p` to :math:`p'`, where
:math:`|q_a| \le (1-s)P_a + sP'_a`,

.. math::

    |\xi_i| \le \sum_{j,a} S_{ja} H_j \frac{P_a + P'_a}2 \;(k = 1), \qquad
    |\xi_i| \le \tfrac12\sum_{j,a,b} S_{jab} H_j \frac{2P_aP_b + P_aP'_b + P'_aP_b + 2P'_aP'_b}6
    \;(k = 2),

with :math:`P_1 = s_1\lVert\varphi\rVert`, :math:`P'_1 = s_1\lVert\varphi'\rVert`,
:math:`H_1 = s_1\lVert h\rVert` (:math:`s_1` the length of the row's whitened first
predictor) and :math:`P_2 = |\ell^\top\varphi|`, :math:`P'_2 = |\ell^\top\varphi'|`,
:math:`H_2 = |\ell^\top h|`. Collecting the terms with :math:`m` first-predictor indices,

.. math::

    B_i = \sum_{m=0}^{k+1} w_{i,m} G_m(\theta, \theta'), \qquad
    w_{i,m} = S_{m,k+1-m}\, s_{1,i}^m,

with :math:`G_m` symmetric in the pair and the same for every row. The step stores the
:math:`k + 2` weights of each row (float32, rounded up), samples rows with the fixed
weights :math:`\bar c_i = \sum_m w_{i,m}\gamma_m` (:math:`\gamma_m = G_m` at a typical pair:
norms :math:`\sqrt d`, :math:`|\ell^\top\cdot| = \lVert\ell\rVert`) and the envelope
:math:`\bar M = \max_m G_m/\gamma_m` (:mod:`~pymc_subsample.bounds.rates`). The box on which
:math:`S` holds is the region's, :math:`\lVert\varphi\rVert \le r`, convex and containing the
segments, so moves with an end outside it are decided on all rows, as before.

*More predictors.* A Student-t with a sampled ν has a third, ``κ = log ν``, also one scalar for
all rows: the same integrals run over all ``K`` predictors, each after the first with its
exact displacements, and the terms collect by the multi-index ``α`` that counts the indices on
each predictor, ``B_i = Σ_α w_{i,α} G_α`` with ``w_{i,α} = S_α s_1^{α_0}``
(:func:`~pymc_subsample.bounds.family.multi_indices` orders them).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from pymc_subsample.bounds.family import multi_indices
from pymc_subsample.bounds.rates import EnvelopeRates
from pymc_subsample.bounds.remainder import check_order
from pymc_subsample.kernels.indexing import WeightedIndexSampler, round_up_float32

__all__ = ["SharedScaleBound", "SharedScaleRates", "SharedScaleRows", "shared_scale_factors",
           "shared_scale_rows"]

#: Relative margin of the envelope over ``max_m G_m / γ_m`` (rounding of the sums).
ENVELOPE_MARGIN = 1e-9

#: Rows per chunk of the setup's sums over all rows: the float64 copy of 2^16 rows' weights
#: comes from the heap each time, where one of 2^20 was fresh pages (0.39 of an ordinal
#: model's setup seconds at 10⁶ rows, its 20 weights a row; 0.05 in chunks of 2^16)
_CHUNK = 1 << 16


def shared_scale_rows(
    order: int, suprema: dict[tuple[int, ...], np.ndarray], s_first: np.ndarray
) -> np.ndarray:
    """The weights ``w_{i,α} = S_α s_1^{α_0}`` of a block, one column per multi-index ``α``
    of :func:`~pymc_subsample.bounds.family.multi_indices` (for two predictors ``α = (m,
    k+1−m)``, ``m = 0..k+1``), float32 rounded up."""
    check_order(order)
    s1 = np.asarray(s_first, dtype=np.float64)
    return round_up_float32(np.stack(
        [np.broadcast_to(suprema[alpha], s1.shape) * s1 ** alpha[0]
         for alpha in multi_indices(len(next(iter(suprema))), order + 1)], axis=1))


def shared_scale_factors(
    order: int, phi: np.ndarray, phi_new: np.ndarray, shared_rows: np.ndarray
) -> np.ndarray:
    """``G_α(θ, θ')`` (module docstring) from the whitened points; ``shared_rows`` holds one
    whitened row ``ℓ`` per shared predictor, shape ``(d,)`` or ``(K − 1, d)``."""
    h = phi_new - phi
    first = (math.sqrt(phi @ phi), math.sqrt(phi_new @ phi_new), math.sqrt(h @ h))
    others = [(abs(row @ phi), abs(row @ phi_new), abs(row @ h))
              for row in np.atleast_2d(shared_rows)]
    return _factors(order, (first, *others))


def _factors(order: int, pieces: tuple) -> np.ndarray:
    """``G_α`` from ``(P, P', H)`` of each predictor (the first's without ``s_1``), in the
    order of :func:`~pymc_subsample.bounds.family.multi_indices`."""
    columns, terms = _factor_terms(order, len(pieces))
    out = np.zeros(columns)
    for column, j, a, b in terms:
        if order == 1:
            out[column] += pieces[j][2] * 0.5 * (pieces[a][0] + pieces[a][1])
        else:
            (x, xp, _), (y, yp, _) = pieces[a], pieces[b]
            mixed = (2.0 * x * y + x * yp + xp * y + 2.0 * xp * yp) / 6.0
            out[column] += 0.5 * pieces[j][2] * mixed
    return out


@functools.cache
def _factor_terms(order: int, n: int) -> tuple[int, tuple[tuple[int, int, int, int], ...]]:
    """The number of multi-indices and, for each ``(j, a[, b])`` of the sums, its column (the
    multi-index counting its predictors): computed once per order and predictor count, as
    :func:`_factors` runs at every move."""
    alphas = multi_indices(n, order + 1)
    column = {alpha: i for i, alpha in enumerate(alphas)}
    terms = []
    for indices in itertools.product(range(n), repeat=order + 1):
        counts = tuple(indices.count(p) for p in range(n))
        j, a, *rest = indices
        terms.append((column[counts], j, a, rest[0] if rest else -1))
    return len(alphas), tuple(terms)


@dataclass
class SharedScaleRows:
    """The shared-scale bound's pieces for all N rows, from a data pass.

    Attributes
    ----------
    weights : ndarray of float32, shape (N, number of multi-indices)
        ``w_{i,α}`` (``(N, k+2)`` for two predictors).
    plain : ndarray of float32, shape (N,)
        Corollary 2's constants from the same pass (the alternative).
    order : int
    shared_row : ndarray or None
        ``ℓ``, the second predictor's whitened row, shape ``(d,)``, or one per predictor after
        the first, ``(K − 1, d)``, when every row has the same ones; ``None`` when they differ
        (a scale that depends on covariates): the bound does not apply.
    """

    weights: np.ndarray
    plain: np.ndarray
    order: int
    shared_row: np.ndarray | None = None
    _seen: bool = field(default=False, repr=False)

    @staticmethod
    def empty(n_rows: int, order: int, n_predictors: int = 2) -> SharedScaleRows:
        columns = len(multi_indices(n_predictors, order + 1))
        return SharedScaleRows(np.zeros((n_rows, columns), np.float32),
                               np.zeros(n_rows, np.float32), order)

    def fill(self, rows: np.ndarray, block: tuple) -> None:
        """Write one block ``(weights, plain, ℓ of the block or None)`` into the rows ``rows``."""
        weights, plain, shared_row = block
        self.weights[rows], self.plain[rows] = weights, plain
        if not self._seen:
            self.shared_row, self._seen = shared_row, True
        elif (self.shared_row is None or shared_row is None
              or not np.array_equal(shared_row, self.shared_row)):
            self.shared_row = None


class SharedScaleRates(EnvelopeRates):
    """The rates ``B_i = Σ_m w_{i,m} G_m`` of one move (:meth:`SharedScaleBound.rates`)."""

    def __init__(self, bound: SharedScaleBound, factors: np.ndarray, envelope_factor: float):
        super().__init__(bound.sampler, envelope_factor, float(bound.totals @ factors))
        self._weights = bound.weights
        self._factors = factors

    def row_rates(self, idx: np.ndarray) -> np.ndarray:
        return self._weights[idx].astype(np.float64) @ self._factors


class SharedScaleBound:
    """The shared-scale MHSS bound (module docstring) on the rows of a :class:`SharedScaleRows`
    whose ``shared_row`` is set.

    Parameters
    ----------
    rows : SharedScaleRows
    dim : int
        ``d``, the length of ``φ``.
    """

    def __init__(self, rows: SharedScaleRows, dim: int) -> None:
        if rows.shared_row is None:
            raise ValueError("the shared-scale bound needs one second-predictor row for all rows")
        self.order, self.weights = rows.order, rows.weights
        self.shared_row = np.asarray(rows.shared_row, dtype=np.float64)
        tiny = np.finfo(float).tiny
        spreads = [(max(float(np.linalg.norm(row)), tiny),) * 3
                   for row in np.atleast_2d(self.shared_row)]
        self.typical = np.maximum(_factors(self.order, ((math.sqrt(dim),) * 3, *spreads)), tiny)
        n = rows.weights.shape[0]
        fixed = np.empty(n, dtype=np.float32)
        self.totals = np.zeros(rows.weights.shape[1])
        for start in range(0, n, _CHUNK):
            w = rows.weights[start : start + _CHUNK].astype(np.float64)
            fixed[start : start + _CHUNK] = round_up_float32(w @ self.typical)
            self.totals += w.sum(axis=0)
        self.sampler = WeightedIndexSampler(fixed)

    def rates(self, phi: np.ndarray, phi_new: np.ndarray) -> SharedScaleRates:
        """The rates of the move between the whitened points ``φ`` and ``φ'``."""
        factors = shared_scale_factors(self.order, phi, phi_new, self.shared_row)
        envelope = float(np.max(factors / self.typical)) * (1.0 + ENVELOPE_MARGIN)
        return SharedScaleRates(self, factors, envelope)
