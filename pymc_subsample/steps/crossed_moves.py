r"""Moves of a second, crossed grouping factor's levels (``docs/methods/mhss.md``, "Rows on two
crossed factors").

With random intercepts on two factors, ``η_i = x_{F,i}ᵀθ_F + t_i u_{k_i} + r_i v_{l_i}``, the
second factor's levels ``v`` are independent given everything else when their prior is
elementwise (:class:`~pymc_subsample.model.levels.LevelPrior`) and each row reads one of them:
:class:`SecondFactorMoves` moves all of them at once with ``G₂`` separate MHSS decisions, as
:class:`~pymc_subsample.steps.level_moves.LevelMoves` does the first factor's. For level ``l``:

- *proposal*: an independence draw from the Gaussian in ``v_l`` of the order-2 control
  variates and its prior term expanded to second order at ``v̂_l`` (exact for a Normal prior),
  given the held coordinates (the fixed block and the first factor's levels);
- *stage 1*: ``Δp_l + Σ_{i∈l} r̂_i + log q-ratio``, from the per-level sums of the Hessian:
  its diagonal on ``v``, its rows on the fixed block and on ``u`` (the co-occurrence of the two
  factors, ``Σ_{i: k_i = k, l_i = l} f''_i t_i r_i``);
- *stage 2*: Poisson thinning of its own rows with the crossed bound's rates
  (:class:`~pymc_subsample.bounds.crossed.CrossedLevelRates`), or all its rows where they
  reach their number.

With the rows' third-order terms (:class:`~pymc_subsample.model.crossed_cubic.CrossedCubic`)
the proposal takes one Newton step on the level's cubic, stage 1 adds the cubic's change and
stage 2 bounds the order-3 remainders.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from pymc_subsample.bounds import CrossedBound
from pymc_subsample.kernels.mhss import mhss_accept_levels
from pymc_subsample.model.crossed import (
    CrossedCoordinates,
    crossed_rows,
    second_factor,
    splits_one_predictor,
)
from pymc_subsample.model.crossed_cubic import CrossedCubic, crossed_cubic
from pymc_subsample.model.level_cubic import refusal as cubic_refusal
from pymc_subsample.model.levels import LevelHessian, LevelPrior
from pymc_subsample.steps.level_moves import LevelSweep, level_stage_one

__all__ = ["CrossedLevels", "SecondFactorMoves", "crossed_levels"]


class SecondFactorMoves:
    """Per-level MHSS moves of the second factor's levels (module docstring).

    Parameters
    ----------
    coords : CrossedCoordinates
    prior : LevelPrior
        The second factor's level prior.
    bound : CrossedBound
    grad_sum : ndarray, shape (d,)
        ``Σ_i ∇ℓ_i(θ̂)``.
    hess_sum : LevelHessian
        ``Σ_i ∇²ℓ_i(θ̂)`` (the first factor split, the second in its fixed block).
    order : {1, 2}
        The control variates' order without ``cubic``.
    cubic : CrossedCubic, optional
        The rows' third-order terms (``bound`` then their bound, ``cubic.bound``).
    """

    def __init__(self, coords: CrossedCoordinates, prior: LevelPrior, bound: CrossedBound,
                 grad_sum: np.ndarray, hess_sum: LevelHessian, order: int,
                 cubic: CrossedCubic | None = None) -> None:
        self.coords, self.prior, self.bound = coords, prior, bound
        self.order, self.cubic = order, cubic
        lay, second = coords.layout, coords.second
        self._levels = slice(second.start, second.stop)
        self._first = slice(lay.start, lay.stop)
        self._fixed = lay.fixed
        pos = np.flatnonzero((lay.fixed >= second.start) & (lay.fixed < second.stop))
        self._grad = np.asarray(grad_sum, dtype=np.float64)[self._levels]
        self._diag = hess_sum.block[pos, pos].copy()
        # the rows of the data Hessian on the other fixed coordinates (its own block is
        # diagonal: a row reads one level) and on the first factor's levels
        block = hess_sum.block[pos].copy()
        block[:, pos] = 0.0
        self._to_fixed, self._to_first = block, hess_sum.coupling[:, pos].T.copy()
        self._theta_hat = coords.theta_hat
        self.n_levels = second.n_levels

    def _held_sum(self, theta: np.ndarray) -> np.ndarray:
        """``Σ_j H_{lj}δ_j`` over the held coordinates ``j`` (all but the second factor's)."""
        delta = theta - self._theta_hat
        fixed = delta[self._fixed]
        return self._to_fixed @ fixed + self._to_first @ delta[self._first]

    def conditional_gaussian(self, theta: np.ndarray, held: np.ndarray
                             ) -> tuple[np.ndarray, np.ndarray]:
        """``(m_l, P_l)`` given the held coordinates (``held`` = :meth:`_held_sum`); where
        ``P_l`` is not positive, the Laplace precision ``E_l`` around ``v̂_l``."""
        e = self._theta_hat[self._levels]
        at = theta.copy()
        at[self._levels] = e
        p1, p2 = self.prior.derivatives(at)
        a = self._diag + p2
        b = self._grad + held - self._diag * e + p1 - p2 * e
        precision = -a
        with np.errstate(invalid="ignore", divide="ignore"):
            ok = (precision > 0.0) & np.isfinite(precision) & np.isfinite(b)
            mean = np.where(ok, b / precision, e)
        return mean, np.where(ok, precision, self.coords.second_precision)

    def propose(self, theta: np.ndarray, rng: np.random.Generator
                ) -> tuple[np.ndarray, np.ndarray]:
        """Every level's proposal ``v'_l`` and its ``log q(v_l) − log q(v'_l)``."""
        x = theta[self._levels]
        mean, precision = self.conditional_gaussian(theta, self._held_sum(theta))
        if self.cubic is not None:
            mean, precision = self.cubic.second_newton(theta, mean, precision)
        x_new = mean + rng.standard_normal(self.n_levels) / np.sqrt(precision)
        return x_new, 0.5 * precision * ((x_new - mean) ** 2 - (x - mean) ** 2)

    def decide(self, theta: np.ndarray, x_new: np.ndarray, log_q_ratio: np.ndarray,
               remainder: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray], *,
               rng_index: np.random.Generator, rng_accept: np.random.Generator) -> LevelSweep:
        """The ``G₂`` MHSS decisions of the moves ``v_l → v'_l`` (``remainder(θ, θ', idx)``
        the rows' ``ξ_i``), and the new ``θ``."""
        lv, g = self._levels, self.n_levels
        x = theta[lv]
        theta_new, step, log_alpha1 = level_stage_one(
            self.prior, theta, lv, x_new, log_q_ratio, self._grad, self._diag,
            self._theta_hat, self.order, lambda: self._held_sum(theta))
        psi = self.coords.point(theta)
        psi_new = psi.copy()
        start = self.coords.n_levels
        psi_new[start : start + g] += self.coords.second_scale * step
        rates = self.bound.level_rates(psi, psi_new, factor=1)
        cubic = self.cubic
        if cubic is not None:
            log_alpha1 = log_alpha1 + cubic.second_level_terms(theta, x_new)

            def xi(idx: np.ndarray) -> np.ndarray:
                return (remainder(theta, theta_new, idx)
                        - cubic.row_terms(theta, theta_new, idx))
        else:
            def xi(idx: np.ndarray) -> np.ndarray:
                return remainder(theta, theta_new, idx)
        info = mhss_accept_levels(log_alpha1, rates, remainder=xi, rng_index=rng_index,
                                  rng_accept=rng_accept)
        out = theta.copy()
        out[lv] = np.where(info.accepted, x_new, x)
        return LevelSweep(out, info, np.ones(g, dtype=bool))

    def sweep(self, theta: np.ndarray,
              remainder: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray], *,
              rng_proposal: np.random.Generator, rng_index: np.random.Generator,
              rng_accept: np.random.Generator) -> LevelSweep:
        """Move every level of the second factor once: :meth:`propose`, :meth:`decide`."""
        x_new, log_q_ratio = self.propose(theta, rng_proposal)
        return self.decide(theta, x_new, log_q_ratio, remainder, rng_index=rng_index,
                           rng_accept=rng_accept)


class CrossedLevels:
    """What a step with a second factor uses: the bound's coordinates, the bound, the second
    factor's moves and, at order 3, the rows' third-order terms (whose bound ``bound`` is)."""

    def __init__(self, coords: CrossedCoordinates, bound: CrossedBound,
                 moves: SecondFactorMoves, cubic: CrossedCubic | None) -> None:
        self.coords, self.bound, self.moves, self.cubic = coords, bound, moves, cubic


def crossed_levels(step, frame, hyper: np.ndarray, asked: int | None) -> CrossedLevels | str:
    """The crossed structure of an MHSS step under construction (its level moves found), or
    why there is none (for the log). One more pass over the data (the rows' pieces, or the
    third-order terms'). ``asked`` is the step's ``level_cv_order``: the third-order terms
    where it is 3, or None and they apply to rows read from Zarr or Dask chunks (in memory
    order 2 read more rows in less time, ``docs/benchmarks.md``); a ``ValueError`` where it
    asks for what cannot be."""
    lik, cv = step.likelihood, step.control_variate
    if math.isfinite(step.region_radius) or not splits_one_predictor(step._reference_pass):
        return ("the rows are not one affine predictor split by level, or the family's bound "
                "holds on a region of the frame only")
    second = second_factor(lik, frame.layout, cv.hess_sum, hyper)
    if second is None:
        return "no second grouping factor among the fixed coordinates"
    prior = LevelPrior.build(lik, second)
    if prior is None:
        return "the second factor's prior is not elementwise given the other parameters"
    if asked == 4:
        raise ValueError("level_cv_order=4, but the model has a second, crossed grouping "
                         "factor: its fourth-order terms are for one factor. Use "
                         "level_cv_order=3 or None.")
    third = asked == 3 or (asked is None and step.cv_order == 2 and not lik.rows_in_memory)
    why = cubic_refusal(step._reference_pass, crossed=True) if third else None
    if why is not None and asked == 3:
        raise ValueError(f"level_cv_order=3, but {why}. Use level_cv_order=2.")
    third = third and why is None
    try:
        coords = CrossedCoordinates(frame, second, hyper, marginal=third)
    except (ValueError, np.linalg.LinAlgError) as err:
        return f"no coordinates for the bound ({err})"
    cubic = None
    if third:
        try:
            cubic = crossed_cubic(step._reference_pass, coords)
        except ValueError:
            return "a row reads two levels of the second factor"
        finally:
            step.setup_profile["full_data_passes"] += 1
    if cubic is None:
        rows = crossed_rows(step._reference_pass, coords, step.theta_hat, step.cv_order)
        step.setup_profile["full_data_passes"] += 1  # (a part of one where it stops early)
        if rows is None:
            return "a row reads two levels of the second factor"
        bound = CrossedBound(rows, coords.dense_dim)
    else:
        bound = cubic.bound
    moves = SecondFactorMoves(coords, prior, bound, cv.grad_sum, cv.hess_sum, step.cv_order,
                              cubic)
    return CrossedLevels(coords, bound, moves, cubic)
