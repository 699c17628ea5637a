"""MHSS: exact Metropolis–Hastings with scalable subsampling (Prado, Nemeth & Sherlock 2024).

Pure kernels: functions of numbers, arrays, callables and a ``numpy.random.Generator``;
nothing here knows about PyMC. One iteration (Algorithm 1, delayed-acceptance form):

1. Stage 1 screens the proposal with the control variates alone,
   ``log α1 = log p0(θ') − log p0(θ) + log q(θ|θ') − log q(θ'|θ) + Σ_i r̂_i`` (eq. (10)).
2. Stage 2 corrects for the remainders ``ξ_i`` with ``|ξ_i| ≤ c_i M`` (eq. (3)) by Poisson
   thinning: ``K ~ Poisson(C·M)`` indices drawn with probability ``c_i / C``; a draw of row
   ``i`` is kept with probability ``φ_i / (c_i M)`` and contributes ``log(φ'_i / φ_i)``
   (eqs. (5)–(7), (11)), with the rates of the ``γ = 0`` choice (Theorem 1, the largest
   acceptance among valid choices)::

       φ_i  = c_i M − max(ξ_i, 0),      φ'_i = c_i M − max(−ξ_i, 0)

   When ``C·M ≥ N`` thinning would read more than the data, so stage 2 is the exact
   delayed-acceptance ratio ``Σ_i ξ_i`` on all rows, a counted fallback. Any other symmetric
   per-row rates ``λ_i ≥ |ξ_i|`` in place of ``c_i M`` work the same way (a bound with a
   different ``M`` per group of rows: :mod:`pymc_subsample.bounds.levels`).

Why it is exact: kept draws are independent ``B_i ~ Poisson(φ_i)`` and ``φ_i(θ',θ) = φ'_i``,
so the Poisson ratio supplies the missing ``exp(Σ ξ_i)`` in expectation (``docs/methods/mhss.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

import numpy as np

from pymc_subsample.kernels.indexing import WeightedIndexSampler

__all__ = [
    "LevelThinningRates",
    "LevelsInfo",
    "MHSSInfo",
    "ScalarRates",
    "ThinningRates",
    "mhss_accept",
    "mhss_accept_levels",
    "poisson_thinning_log_ratio",
]

#: Relative rounding level below which a clipped rate is not counted as a bound violation.
CLIP_TOLERANCE = 1e-9


class MHSSInfo(NamedTuple):
    """What one MHSS acceptance decision did.

    Attributes
    ----------
    accepted : bool
        The move was accepted.
    accept_stage1 : bool
        The control-variate screen (stage 1) passed.
    n_data : int
        Rows whose likelihood was evaluated (0 when stage 1 rejected).
    expected_rows : float
        ``C·M``, the expected number of proposed rows (NaN when stage 1 rejected).
    full_data_fallback : bool
        ``C·M ≥ N``: stage 2 used all rows.
    clipped : int
        Rates clipped into ``[0, c_i M]`` by more than rounding (a bound violation if > 0).
    log_alpha2 : float
        Stage-2 log ratio (0 when stage 2 did not run).
    """

    accepted: bool
    accept_stage1: bool
    n_data: int
    expected_rows: float
    full_data_fallback: bool
    clipped: int
    log_alpha2: float


def poisson_thinning_log_ratio(
    xi: np.ndarray, c: np.ndarray, bound: float, rng: np.random.Generator
) -> tuple[float, int, int]:
    """Thin proposed rows and return ``(log α2, kept, clipped)`` (eqs. (5)–(7), (11)).

    Parameters
    ----------
    xi : ndarray
        Remainders ``ξ_i(θ, θ')`` of the proposed rows (repeats allowed).
    c : ndarray
        Their bound constants ``c_i`` (all > 0: rows with ``c_i = 0`` are never proposed).
    bound : float
        ``M(θ, θ')``.
    rng : numpy.random.Generator
        Source of the thinning uniforms.

    Returns
    -------
    log_alpha2 : float
        ``Σ_kept log(φ'_i / φ_i)``.
    kept : int
        Number of kept draws.
    clipped : int
        Rates that fell outside ``[0, c_i M]`` by more than :data:`CLIP_TOLERANCE` relative to
        ``c_i M`` — impossible when the bound holds, so a non-zero count flags a wrong bound.
    """
    cm = c * bound
    phi = cm - np.maximum(xi, 0.0)
    phi_rev = cm - np.maximum(-xi, 0.0)
    slack = CLIP_TOLERANCE * cm
    clipped = int(np.count_nonzero(phi < -slack) + np.count_nonzero(phi_rev < -slack))
    # rounding in ξ (a difference of differences) can push a rate slightly below 0: clip
    phi = np.clip(phi, 0.0, cm)
    phi_rev = np.clip(phi_rev, 0.0, cm)
    keep = rng.random(xi.size) * cm < phi
    if not keep.any():
        return 0.0, 0, clipped
    with np.errstate(divide="ignore"):
        log_ratio = float(np.sum(np.log(phi_rev[keep]) - np.log(phi[keep])))
    return log_ratio, int(keep.sum()), clipped


class ScalarRates:
    """The rates ``c_i M`` of one move with one ``M(θ, θ')`` for every row (eq. (3)), as
    :func:`mhss_accept` reads them: ``K ~ Poisson(C·M)`` rows drawn with probability
    ``c_i / C`` (:attr:`envelope` and :attr:`expected` are both ``C·M``).

    Other bounds give rates of the same shape: :class:`pymc_subsample.bounds.LevelRates`.
    """

    def __init__(self, bound: float, sampler: WeightedIndexSampler) -> None:
        self.bound = bound
        self.sampler = sampler
        self.envelope = self.expected = sampler.total * bound

    def draw(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
        """``size`` rows drawn with probability ``c_i / C`` and their rates ``c_i M``."""
        idx = self.sampler.draw(rng, size)
        return idx, self.sampler.weights[idx] * self.bound


class ThinningRates(Protocol):
    """Per-move rates ``λ_i(θ, θ') ≥ |ξ_i|``, symmetric in the pair: :attr:`envelope`, the
    mean number of index draws (``≥ N``: decide on all rows), :attr:`expected`, the mean
    number of rows proposed, and ``draw(rng, size)``, which turns ``size`` index draws into
    the proposed rows and their ``λ_i`` (a Poisson process of rate ``λ_i`` when
    ``size ~ Poisson(envelope)``)."""

    envelope: float
    expected: float

    def draw(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]: ...


def mhss_accept(
    log_alpha1: float,
    rates: ThinningRates,
    *,
    remainder: Callable[[np.ndarray], np.ndarray],
    n_rows: int,
    full_remainder_sum: Callable[[], float],
    rng_index: np.random.Generator,
    rng_accept: np.random.Generator,
    delayed: bool = True,
) -> MHSSInfo:
    """Decide one MHSS move (Algorithm 1) given the stage-1 ratio and the rates.

    ``delayed=False`` makes one decision instead of two: the rows are drawn whatever
    ``log α1`` is and the move is accepted with probability
    ``min(1, e^{log α1 + log α2})``. It is exact for the same reason as the two stages (with
    the Poisson draw ``B`` read as an auxiliary variable, swapping ``θ`` and ``θ'`` swaps
    ``φ_i`` and ``φ'_i``, so ``P(B|θ,θ')/P(B|θ',θ) = e^{Σξ_i}Π(φ_i/φ'_i)^{B_i}`` and the
    ratio ``e^{log α1}Π(φ'_i/φ_i)^{B_i}`` is inverted by the swap: ``docs/methods/mhss.md``),
    and accepts more often when ``log α1`` and ``Σξ_i`` pull apart, e.g. when the proposal
    follows a target closer to ``π`` than the control variates' (the level moves' fixed
    block); every move then reads its rows.

    Parameters
    ----------
    log_alpha1 : float
        Stage-1 log ratio (eq. (10)): prior, proposal and ``Σ r̂_i`` terms.
    rates : ThinningRates
        ``λ_i = c_i M(θ, θ')`` (:class:`ScalarRates`) or another bound's per-row rates, each
        symmetric in the pair.
    remainder : callable
        ``idx -> ξ_i(θ, θ')`` for the rows ``idx`` (touches the data).
    n_rows : int
        ``N``.
    full_remainder_sum : callable
        ``() -> Σ_i ξ_i`` over all rows, for the fallback when ``rates.envelope ≥ N``.
    rng_index, rng_accept : numpy.random.Generator
        Streams for the index/Poisson draws and for the accept uniforms and thinning.
    delayed : bool
        Two stages (the default) or one decision on both ratios (above).
    """
    if delayed:
        if not np.log(rng_accept.random()) < log_alpha1:
            return MHSSInfo(False, False, 0, np.nan, False, 0, 0.0)
        rest = 0.0  # stage 1 has decided on log α1
    else:
        rest = log_alpha1
        if np.isnan(rest) or rest == -np.inf:  # zero density at θ': nothing to read
            return MHSSInfo(False, False, 0, np.nan, False, 0, 0.0)

    def decide(n_data, expected, fallback, clipped, log_alpha2):
        accepted = bool(np.log(rng_accept.random()) < rest + log_alpha2)
        return MHSSInfo(accepted, True, n_data, expected, fallback, clipped, log_alpha2)

    envelope, expected = rates.envelope, rates.expected
    if not np.isfinite(envelope) or envelope >= n_rows:
        return decide(n_rows, expected, True, 0, float(full_remainder_sum()))
    n_drawn = int(rng_index.poisson(envelope))
    idx, cm = (rates.draw(rng_index, n_drawn) if n_drawn
               else (np.empty(0, dtype=np.int64), np.empty(0)))
    if idx.size == 0:
        return (MHSSInfo(True, True, 0, expected, False, 0, 0.0) if delayed
                else decide(0, expected, False, 0, 0.0))
    xi = remainder(idx)
    if not np.all(np.isfinite(xi)):
        # the model's own log-likelihood is -inf (or NaN) at θ' on a touched row: reject
        return MHSSInfo(False, True, idx.size, expected, False, 0, -np.inf)
    log_alpha2, _, clipped = poisson_thinning_log_ratio(xi, cm, 1.0, rng_accept)
    return decide(idx.size, expected, False, clipped, log_alpha2)


class LevelThinningRates(Protocol):
    """Per-level rates of simultaneous moves of ``G`` conditionally independent coordinates
    (the levels of a grouping factor), each level's rows apart: :attr:`expected` (``Λ_k``),
    :attr:`fallback` (levels decided on all their rows), ``draw(rng, levels)`` (the rows of
    the Poisson processes of rates ``λ_i ≥ |ξ_i|`` of the levels in a mask, their level and
    rate) and ``rows_of(levels)`` (all rows of the levels in a mask and their level)."""

    expected: np.ndarray
    fallback: np.ndarray

    def draw(self, rng: np.random.Generator, levels: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

    def rows_of(self, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


class LevelsInfo(NamedTuple):
    """What one set of per-level MHSS decisions did (:func:`mhss_accept_levels`).

    Attributes
    ----------
    accepted : ndarray of bool, shape (G,)
    accept_stage1 : ndarray of bool, shape (G,)
    n_data : int
        Rows whose remainder was evaluated, over all levels.
    expected_rows : float
        ``Σ_k Λ_k`` over the levels that passed stage 1.
    fallbacks : int
        Levels decided on all their rows.
    clipped : int
        Rates clipped beyond rounding (a bound violation if > 0).
    """

    accepted: np.ndarray
    accept_stage1: np.ndarray
    n_data: int
    expected_rows: float
    fallbacks: int
    clipped: int


def mhss_accept_levels(
    log_alpha1: np.ndarray,
    rates: LevelThinningRates,
    *,
    remainder: Callable[[np.ndarray], np.ndarray],
    rng_index: np.random.Generator,
    rng_accept: np.random.Generator,
) -> LevelsInfo:
    """``G`` MHSS decisions at once, one per level, each from its own rows (Algorithm 1 per
    level; ``docs/methods/mhss.md``, "Moves of the levels").

    Level ``k`` passes stage 1 with probability ``min(1, e^{log α1_k})``; then its rows'
    remainders are thinned as in :func:`mhss_accept` with its rates, or summed over all its
    rows where :attr:`~LevelThinningRates.fallback` says so, and it is accepted with
    probability ``min(1, e^{log α2_k})``. The levels' uniforms and Poisson processes are
    independent, so the decisions are those of ``G`` separate MHSS kernels.

    Parameters
    ----------
    log_alpha1 : ndarray, shape (G,)
        Each level's stage-1 log ratio (NaN reads as ``-inf``).
    rates : LevelThinningRates
    remainder : callable
        ``idx -> ξ_i`` of the rows ``idx`` for the move of their own level.
    rng_index, rng_accept : numpy.random.Generator
    """
    log_alpha1 = np.where(np.isnan(log_alpha1), -np.inf, log_alpha1)
    g = log_alpha1.size
    stage1 = np.log(rng_accept.random(g)) < log_alpha1
    full = stage1 & rates.fallback
    idx_t, lev_t, lam = rates.draw(rng_index, stage1 & ~full)
    idx_f, lev_f = rates.rows_of(full)
    idx = np.concatenate([idx_t, idx_f])
    log_alpha2 = np.zeros(g)
    clipped = 0
    if idx.size:
        xi = np.asarray(remainder(idx), dtype=np.float64)
        xi_t, xi_f = xi[: idx_t.size], xi[idx_t.size :]
        bad = ~np.isfinite(xi)
        # the model's own log-likelihood is -inf (or NaN) on a touched row: reject its level
        broken = np.zeros(g, dtype=bool)
        broken[np.concatenate([lev_t, lev_f])[bad]] = True
        if idx_f.size:
            log_alpha2 += np.bincount(lev_f, weights=np.where(np.isfinite(xi_f), xi_f, 0.0),
                                      minlength=g)
        if idx_t.size:
            ok = np.isfinite(xi_t)
            phi = lam - np.maximum(xi_t, 0.0)
            phi_rev = lam - np.maximum(-xi_t, 0.0)
            slack = CLIP_TOLERANCE * lam
            clipped = int(np.count_nonzero(ok & (phi < -slack))
                          + np.count_nonzero(ok & (phi_rev < -slack)))
            phi, phi_rev = np.clip(phi, 0.0, lam), np.clip(phi_rev, 0.0, lam)
            keep = ok & (rng_accept.random(idx_t.size) * lam < phi)
            with np.errstate(divide="ignore"):
                terms = np.log(phi_rev[keep]) - np.log(phi[keep])
            log_alpha2 += np.bincount(lev_t[keep], weights=terms, minlength=g)
        log_alpha2[broken] = -np.inf
    accepted = stage1 & (np.log(rng_accept.random(g)) < log_alpha2)
    return LevelsInfo(accepted, stage1, int(idx.size),
                      float(np.sum(rates.expected[stage1])), int(np.count_nonzero(full)),
                      clipped)
