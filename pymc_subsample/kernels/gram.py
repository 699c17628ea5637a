r"""Weighted Gram matrices of a block of rows, as the passes over the data form them.

A pass adds up ``Σ_i w_i x_i x_iᵀ = Xᵀ diag(w) X`` over blocks of rows (the data part of the
log posterior's Hessian, ``w_i = f''(η_i)``). The product is symmetric, so BLAS's symmetric
rank-k update (``dsyrk``: ``C ← α AAᵀ + βC``, one triangle) does half the multiplications of
a general product ``Xᵀ(w ∘ X)``, with ``A = (√|w| ∘ X)ᵀ`` and ``α = ±1`` when all weights
have one sign (a log-concave family's ``f'' ≤ 0``); weights of both signs take the general
product.

:func:`weighted_level_sums` adds up ``Σ_{i: k_i = k} w_i x_i`` per level ``k`` (a grouping
factor's coupling to the fixed coordinates, :class:`~pymc_subsample.model.levels.SplitRows`)
in one pass over the rows, as a sparse ``G × n`` indicator matrix times the rows.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse
from scipy.linalg.blas import dsyrk

__all__ = ["scaled_gram", "weighted_gram", "weighted_level_sums"]

#: Fewest columns for which :func:`weighted_gram` calls ``dsyrk``: below, NumPy's general
#: product of a few columns costs as little and needs no symmetrising copy.
SYRK_MIN_COLUMNS = 8


def weighted_gram(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``Xᵀ diag(w) X``, symmetric, by symmetric rank-k updates.

    Parameters
    ----------
    x : ndarray, shape (n, d)
        The rows (any float dtype; the sum is in float64).
    w : ndarray, shape (n,)
        The weights (NaN and infinities propagate as in ``Xᵀ(w ∘ X)``).

    Returns
    -------
    ndarray, shape (d, d)
        Both triangles filled.
    """
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    d = x.shape[1]
    if d < SYRK_MIN_COLUMNS or x.shape[0] == 0:
        return x.T @ (w[:, None] * x)
    negative = w < 0.0
    if negative.all():
        alpha, w = -1.0, -w
    elif not negative.any():
        alpha = 1.0
    else:
        # both signs: two updates on copies of the rows of each sign cost as much as the
        # general product
        return x.T @ (w[:, None] * x)
    # (√|w| ∘ X)ᵀ is Fortran-ordered d × n: dsyrk reads it without a copy
    c = dsyrk(alpha, (x * np.sqrt(w)[:, None]).T, trans=0, lower=0)
    return np.triu(c) + np.triu(c, 1).T


def scaled_gram(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``Xᵀ diag(s²) X`` of a tall ``X`` (``n ≫ d``), symmetric: one ``dsyrk`` on ``s ∘ X``.

    Called at every iteration by the level moves (``X`` the levels' coupling to the fixed
    block, ``n = G``): with ``X`` in Fortran order ``s ∘ X`` is too, and ``dsyrk`` reads it
    as ``AᵀA`` without a copy (2.4–2.7 ms against 3.6–4.4 ms for NumPy's general product on
    4037 × 135, one thread, CPU time).

    Parameters
    ----------
    x : ndarray, shape (n, d)
    scale : ndarray, shape (n,)

    Returns
    -------
    ndarray, shape (d, d)
        Both triangles filled.
    """
    a = np.asarray(x, dtype=np.float64) * np.asarray(scale, dtype=np.float64)[:, None]
    if a.shape[1] < SYRK_MIN_COLUMNS or a.shape[0] == 0:
        return a.T @ a
    c = dsyrk(1.0, a, trans=1, lower=1)
    return np.tril(c) + np.tril(c, -1).T


def weighted_level_sums(level: np.ndarray, w: np.ndarray, x: np.ndarray,
                        n_levels: int) -> np.ndarray:
    """``Σ_{i: k_i = k} w_i x_i`` for each level ``k``: shape ``(n_levels, d)``.

    Parameters
    ----------
    level : int ndarray, shape (n,)
        Each row's level, ``0 … n_levels − 1``.
    w : ndarray, shape (n,)
    x : ndarray, shape (n, d)
    n_levels : int
    """
    n = level.size
    indicator = scipy.sparse.csr_array(
        (np.asarray(w, dtype=np.float64), np.asarray(level, dtype=np.int64),
         np.arange(n + 1, dtype=np.int64)), shape=(n, n_levels)).T
    return np.asarray(indicator @ np.asarray(x, dtype=np.float64)).reshape(n_levels, -1)

