r"""Moves of a grouping factor's hyperparameters (``docs/methods/mhss.md``, "Moves of the
levels", items 2 and 3): :class:`HyperMove`, an exact prior-only move of the coordinates no row
reads (the group scale) given the levels, and :class:`ScaleMove`, a move of the scale with all
levels, ``u/s`` held, decided by MHSS. :mod:`pymc_subsample.steps.level_moves` has the levels'
and the fixed block's moves they alternate with.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["HyperMove", "ScaleMove"]


#: Newton steps of the hyperparameters' proposal stop below this (in their coordinates).
NEWTON_TOLERANCE = 1e-6

#: Degrees of freedom of the hyperparameters' t proposal: heavier tails than the scale's
#: conditional (exponential in ``log s`` on the right), so the independence move does not
#: stick in them.
HYPER_DF = 5.0


class HyperMove:
    r"""An exact MH move of the coordinates no row reads (the group scale ``log s``), the rest
    held: its target is ``log p0`` alone, so it reads no data.

    The proposal is centred at the mode of ``log p0`` in those coordinates given the others
    (Newton from ``θ̂``'s values until a step is below :data:`NEWTON_TOLERANCE`, a function of
    the held coordinates only), scaled by its negative Hessian there, and a multivariate t
    (:data:`HYPER_DF`): an independence proposal of the move,
    ``log α = log p0(θ') − log p0(θ) + log g(θ_H) − log g(θ'_H)``. Where Newton
    meets a Hessian that is not negative definite the move is skipped (the identity, also a
    function of the held coordinates). Given the levels the scale's conditional is sharp
    (``G`` levels inform it), which the Laplace frame at the joint mode does not see: the
    funnel of a centred hierarchy puts that mode's scale well below the posterior's.

    Parameters
    ----------
    derivatives : callable
        ``θ ↦ (log p0(θ), ∇_H log p0(θ), ∇²_H log p0(θ))``
        (:func:`~pymc_subsample.model.levels.prior_derivatives`).
    coordinates : ndarray of int
        The coordinates moved ``H`` (indices into ``θ``).
    theta_hat : ndarray
    max_newton_steps : int
    """

    def __init__(self, derivatives, coordinates: np.ndarray, theta_hat: np.ndarray,
                 max_newton_steps: int = 30) -> None:
        self._derivatives = derivatives
        self.coordinates = np.asarray(coordinates, dtype=np.int64)
        self._start = np.asarray(theta_hat, dtype=np.float64)[self.coordinates]
        self.max_newton_steps = int(max_newton_steps)

    def _gradient_and_precision(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``∇_H log p0`` and ``−∇²_H log p0``."""
        _, grad, hess = self._derivatives(theta)
        hess = np.asarray(hess, dtype=np.float64)
        return np.asarray(grad, dtype=np.float64), -0.5 * (hess + hess.T)

    def proposal(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """``(m, chol(P))`` of the conditional's Gaussian given ``θ``'s other coordinates, or
        None (no move)."""
        h = self.coordinates
        point = theta.copy()
        point[h] = self._start
        for step in range(self.max_newton_steps + 1):
            with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
                grad, precision = self._gradient_and_precision(point)
            if not (np.all(np.isfinite(grad)) and np.all(np.isfinite(precision))):
                return None
            try:
                chol = np.linalg.cholesky(precision)
            except np.linalg.LinAlgError:
                return None
            newton = np.linalg.solve(precision, grad)
            if np.max(np.abs(newton)) < NEWTON_TOLERANCE or step == self.max_newton_steps:
                return point[h] + newton, chol
            # at most one unit per coordinate (the scale's log lives there)
            point[h] += np.clip(newton, -1.0, 1.0)
        return None  # pragma: no cover

    def move(self, theta: np.ndarray, logp0: float, rng_proposal: np.random.Generator,
             rng_accept: np.random.Generator) -> tuple[np.ndarray, bool]:
        """One MH move of the coordinates: the new ``θ`` and whether it was accepted."""
        found = self.proposal(theta)
        if found is None:
            return theta, False
        mean, chol = found
        h = self.coordinates
        current = theta[h]
        # a multivariate t of scale chol^{-T}: x = m + chol^{-T} z / √(χ²_ν/ν)
        z = rng_proposal.standard_normal(h.size) / math.sqrt(
            rng_proposal.chisquare(HYPER_DF) / HYPER_DF)
        proposed = mean + np.linalg.solve(chol.T, z)
        theta_new = theta.copy()
        theta_new[h] = proposed

        def log_g(x):
            w = chol.T @ (x - mean)
            return -0.5 * (HYPER_DF + h.size) * math.log1p(float(w @ w) / HYPER_DF)

        logp0_new = self._derivatives(theta_new)[0]
        log_alpha = float(logp0_new) - logp0 + log_g(current) - log_g(proposed)
        if not np.isfinite(log_alpha) or not np.log(rng_accept.random()) < log_alpha:
            return theta, False
        return theta_new, True


#: The scale move's step size is tuned for this acceptance (a one-dimensional random walk's
#: optimum, Roberts & Rosenthal 2001) ...
SCALE_TARGET_ACCEPT = 0.44
#: ... from this step size in ``log s``.
SCALE_INITIAL_STEP = 0.1


class ScaleMove:
    r"""The interweaving move of the group scale (Yu & Meng 2011; ``docs/methods/mhss.md``,
    "Moves of the levels"): ``τ = log s`` and every level together, ``z = u/s`` held.

    With ``ε ~ N(0, σ²)`` the move is the map ``T_ε: (τ, u) ↦ (τ + ε, u e^ε)``, the other
    coordinates held; ``T_{−ε} = T_ε^{-1}`` and ``ε`` and ``−ε`` are equally likely, and its
    Jacobian is ``e^{Gε}``, so ``π(T_ε θ) e^{Gε} / π(θ)`` is the MH ratio of an exact move
    (Liu & Wu 1999's group moves; for any target). The prior's part of it is
    ``log p0(θ') − log p0(θ) + Gε``, from the model's own ``log p0``: with ``u ~ Normal(0, s)``
    the levels' terms cancel (``u'/s' = u/s``) and what is left is the scale's own prior, so
    the move is not held back by the sharp ``s | u`` of weakly informed levels (the centred
    parametrisation's funnel); the rows' part is an MHSS decision of the step. :meth:`adapt`
    tunes ``σ`` during tuning (Robbins–Monro on ``log σ`` toward
    :data:`SCALE_TARGET_ACCEPT`); after tuning it is fixed.

    Parameters
    ----------
    coordinate : int
        The index of ``log s`` in ``θ``.
    levels : slice
        The levels' coordinates in ``θ``.
    """

    def __init__(self, coordinate: int, levels: slice) -> None:
        self.coordinate, self.levels = int(coordinate), levels
        self.n_levels = levels.stop - levels.start
        self.reset()

    def reset(self) -> None:
        """The untuned step size (a new chain)."""
        self.step_size, self._n_adapted = SCALE_INITIAL_STEP, 0

    def apply(self, theta: np.ndarray, eps: float) -> tuple[np.ndarray, float]:
        """``(T_ε θ, Gε)``: the moved point and the log Jacobian of the map."""
        theta_new = np.array(theta, dtype=np.float64)
        theta_new[self.coordinate] += eps
        theta_new[self.levels] *= math.exp(eps)
        return theta_new, self.n_levels * eps

    def propose(self, theta: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, float]:
        """:meth:`apply` with ``ε ~ N(0, σ²)``."""
        return self.apply(theta, self.step_size * float(rng.standard_normal()))

    def adapt(self, accepted: bool) -> None:
        """One Robbins–Monro step of ``log σ`` (gain ``(n + 1)^{-0.6}``)."""
        self._n_adapted += 1
        gain = (self._n_adapted + 1) ** -0.6
        self.step_size *= math.exp(gain * (float(accepted) - SCALE_TARGET_ACCEPT))
