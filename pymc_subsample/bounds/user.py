"""A user's MHSS bound for likelihoods without an automatic one, and its probe.

The probe runs once, when the step is built: it cannot prove a bound, only refuse one that is
violated on random pairs of points and rows (the ``clipped`` sampler stat counts violations that
sampling meets).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pymc_subsample.errors import SubsamplingModelError

__all__ = ["UserBound", "check_user_bound", "user_row_constants"]

#: Pairs of points, rows per pair and seed of the probe of a user's bound at construction.
USER_BOUND_PAIRS, USER_BOUND_ROWS, USER_BOUND_SEED = 64, 2048, 20240611


@dataclass(frozen=True)
class UserBound:
    """A user-supplied MHSS bound ``|ξ_i(θ, θ')| ≤ c_i · M(θ, θ')`` (Prado et al., eq. (3)).

    Use it for likelihoods without an automatic bound (``examples/logistic_errors_userbound.py``).
    A wrong bound breaks exactness: the step probes it at construction on random pairs of
    points and rows and refuses one that is violated (:func:`check_user_bound`), and the
    ``clipped`` sampler stat counts violations that sampling meets; neither can prove a bound.

    Parameters
    ----------
    row_constants : array or callable
        ``c_i ≥ 0`` for all N rows (already divided by the temperature), or a function
        ``theta_hat -> c`` evaluated once at the reference point.
    remainder_scale : callable
        ``(theta, theta_new, theta_hat) -> M``, symmetric in ``theta`` and ``theta_new``.
        Defaults to the GLM ``M`` of the step's ``cv_order`` (Corollary 2).
    """

    row_constants: np.ndarray | Callable[[np.ndarray], np.ndarray]
    remainder_scale: Callable[[np.ndarray, np.ndarray, np.ndarray], float] | None = None


def user_row_constants(bound: UserBound, theta_hat: np.ndarray, n_rows: int) -> np.ndarray:
    """The bound's ``c_i`` (evaluated at ``θ̂`` when a function), refused unless one finite,
    non-negative value per row."""
    consts = bound.row_constants
    if callable(consts):
        consts = consts(theta_hat)
    consts = np.asarray(consts, dtype=np.float64)
    if consts.shape != (n_rows,):
        raise SubsamplingModelError(
            f"UserBound.row_constants must have one entry per row, shape ({n_rows},); got "
            f"{consts.shape}"
        )
    if np.any(consts < 0.0) or not np.all(np.isfinite(consts)):
        raise SubsamplingModelError(
            "UserBound.row_constants must be finite and non-negative; got "
            f"{np.count_nonzero(~(consts >= 0.0) | ~np.isfinite(consts))} rows that are not"
        )
    return consts


def check_user_bound(
    consts: np.ndarray,
    *,
    remainder: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    unwhiten: Callable[[np.ndarray], np.ndarray],
    remainder_scale: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], float],
    dim: int,
) -> None:
    """Refuse a user's bound that a probe finds violated: ``|ξ_i| > c_i M`` on some row.

    :data:`USER_BOUND_PAIRS` pairs ``(θ, θ')`` around ``θ̂`` in the Laplace frame (``unwhiten``
    maps ``φ`` to ``θ``), at distances from 0.1 to 4 posterior sds and steps from small to as
    large as the distance, each on :data:`USER_BOUND_ROWS` random rows of the ``consts.size``.
    ``remainder(θ, θ', idx)`` are the control-variate errors ``ξ_i`` and
    ``remainder_scale(θ, θ', φ, φ')`` is ``M``. A bound that passes may still be wrong elsewhere
    (the ``clipped`` stat counts what sampling meets); one that fails is wrong.
    """
    n_rows = consts.size
    rng = np.random.default_rng(USER_BOUND_SEED)
    rows = np.sort(rng.choice(n_rows, size=min(USER_BOUND_ROWS, n_rows),
                              replace=False)).astype(np.int64)
    for k in range(USER_BOUND_PAIRS):
        size = 0.1 * 40.0 ** (k / (USER_BOUND_PAIRS - 1))  # 0.1 to 4 sds
        phi = size * rng.standard_normal(dim) / np.sqrt(dim)
        phi_new = phi + size * rng.uniform(0.01, 1.0) * rng.standard_normal(dim) / np.sqrt(dim)
        theta, theta_new = unwhiten(phi), unwhiten(phi_new)
        m = remainder_scale(theta, theta_new, phi, phi_new)
        xi = np.asarray(remainder(theta, theta_new, rows))
        ok = np.abs(xi) <= consts[rows] * m * (1.0 + 1e-9) + 1e-12 * (1.0 + np.abs(xi))
        bad = np.flatnonzero(np.isfinite(xi) & ~ok)
        if bad.size:
            i = int(bad[np.argmax(np.abs(xi[bad]) - consts[rows][bad] * m)])
            raise SubsamplingModelError(
                f"UserBound is violated: on row {int(rows[i])} the control-variate error "
                f"|ξ| = {abs(xi[i]):.6g} exceeds c_i·M = {consts[rows][i] * m:.6g} at a pair "
                f"{np.linalg.norm(phi):.3g} and {np.linalg.norm(phi_new):.3g} posterior sds "
                "from the reference point. MHSS would not be exact with it: check c_i (after "
                "dividing by the temperature) and M (symmetric in θ, θ'), or use AusterityMH "
                "or BarkerMinibatch."
            )
