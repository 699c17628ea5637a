r"""A reference point where the joint mode does not exist: a hierarchical model's funnel.

A centred hierarchical model, ``u_k ~ Normal(0, σ)`` over ``G`` levels with ``τ = log σ``, has
the prior term ``−Gτ − ‖u‖²e^{−2τ}/2 + τ``: at ``u = 0`` it grows without bound as ``τ → −∞``.
When the data inform each level weakly (a few rows a level) there is no local mode away from
that mouth either, and the joint Newton fit of :func:`~pymc_subsample.model.reference.fit_reference`
runs down the funnel. The posterior is proper all the same, and MHSS needs no mode: any
reference point ``θ̂`` and any positive definite whitening give a valid bound, and only its
tightness depends on them (``docs/methods/reference.md``, "Funnels").

So the *hyperparameters* ``h`` (the coordinates no row reads: group scales) are put at the
mode of their Laplace-approximate marginal and the rest ``r`` (fixed effects and levels) at
their conditional mode given ``h`` (Tierney & Kadane 1986; Rue, Martino & Chopin 2009, eq. 3):

.. math::

    \hat r(h) = \arg\max_r \log\pi(r, h),\qquad
    \tilde\pi(h) = \log\pi(\hat r(h), h) - \tfrac12\log\det P_{rr}(\hat r(h), h),

with ``P = −∇²log π``. ``r̂(h)`` is a concave problem for the GLMs the fit serves (Newton in a
few passes, warm-started from the last ``h``), and ``h`` has a handful of coordinates, so
``π̃`` is maximised without derivatives (Brent's method for one scale, Nelder–Mead for
several). The frame's precision is ``P_rr`` on
``r`` and the marginal curvature ``−∂²π̃/∂h_j²`` on each ``h_j``, with no ``r``–``h`` coupling:
the joint Hessian there is not positive definite (its ``(u, τ)`` Schur complement is
``(2/σ²)Σ_k u_k²(1 − 2/(1 + σ²D_k))``, negative where the levels' data curvature ``D_k`` is
below ``1/σ²``), and the block-diagonal one is a whitening like any other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.optimize

from pymc_subsample.model.frame import LaplaceFrame, NotPositiveDefiniteError, laplace_frame
from pymc_subsample.model.levels import LevelHessian

__all__ = ["MarginalMode", "marginal_mode"]

_log = logging.getLogger("pymc_subsample")

#: Tolerance on ``h`` of Brent's and Nelder–Mead's searches (a log-scale: 0.05 is a small
#: fraction of its posterior sd in any model with a funnel; a looser ``ĥ`` only loosens the
#: bound).
HYPER_TOLERANCE = 0.05
#: Nelder–Mead's tolerance on ``π̃`` (nats), of the order of what is left of the inner Newton
#: solves' error (1e-3 ran Nelder–Mead to its evaluation limit on the flights data).
MARGINAL_TOLERANCE = 0.05
#: Step of the central differences for the marginal curvature of each ``h_j``.
CURVATURE_STEP = 0.1


@dataclass(frozen=True)
class MarginalMode:
    """``θ̂ = (r̂(ĥ), ĥ)``, its frame and what it cost."""

    theta: np.ndarray
    frame: LaplaceFrame
    evaluations: int


def marginal_mode(
    conditional_mode: Callable[[np.ndarray], tuple[float, np.ndarray, LaplaceFrame | None]],
    hyper: np.ndarray,
    start: np.ndarray,
    step: float | None = None,
) -> MarginalMode:
    """Maximise ``π̃(h)`` (module docstring) over the coordinates ``hyper`` (a mask).

    Parameters
    ----------
    conditional_mode : callable
        ``θ ↦ (log π(θ*), θ*, F)``: Newton on the other coordinates with ``θ[hyper]`` held,
        from ``θ``; ``θ*`` is the conditional mode and ``F`` the frame of the negative Hessian
        there with the held rows and columns those of the identity (so ``F.log_det`` is
        ``log det P_rr``); ``(−inf, θ, None)`` when Newton does not converge.
    hyper : ndarray of bool, shape (d,)
    start : ndarray, shape (d,)
        Where ``h`` starts (PyMC's initial point: a scale of order one) and ``r``'s first
        Newton run starts.
    step : float, optional
        How far ``h`` is expected to move from a warm start (the last change of a search
        repeated on a better approximation): the first simplex's size, or Brent's bracket
        around the start, narrowed to it (at least :data:`HYPER_TOLERANCE`); from a cold
        start a simplex of 0.5 and a bracket of ``(h − 10, h + 5)``.

    Raises
    ------
    NotPositiveDefiniteError
        When no ``h`` gives a conditional mode, or the marginal is not concave at ``ĥ``.
    """
    hyper = np.asarray(hyper, dtype=bool)
    state = {"theta": np.array(start, dtype=np.float64), "evaluations": 0}

    def marginal(h: np.ndarray) -> float:
        theta = state["theta"].copy()
        theta[hyper] = h
        value, theta, frame = conditional_mode(theta)
        state["evaluations"] += 1
        if frame is None or not np.isfinite(value):
            return -np.inf
        state["theta"] = theta  # warm start of the next evaluation
        return value - 0.5 * frame.log_det

    h0 = np.asarray(start, dtype=np.float64)[hyper]
    width = 0.5 if step is None else min(0.5, max(step, 2.0 * HYPER_TOLERANCE))
    if h0.size == 1:
        # one scale: Brent's parabolic steps (bounded, for an absolute tolerance), about half
        # Nelder–Mead's evaluations
        bounds = ((h0[0] - 10.0, h0[0] + 5.0) if step is None
                  else (h0[0] - 4.0 * width, h0[0] + 4.0 * width))
        h_hat = np.array([scipy.optimize.minimize_scalar(
            lambda h: -marginal(np.array([h])), bounds=bounds,
            method="bounded", options={"xatol": HYPER_TOLERANCE}).x])
    else:
        simplex = np.vstack([h0, h0 + width * np.eye(h0.size)])
        h_hat = scipy.optimize.minimize(
            lambda h: -marginal(h), h0, method="Nelder-Mead",
            options={"initial_simplex": simplex, "xatol": HYPER_TOLERANCE,
                     "fatol": MARGINAL_TOLERANCE, "maxfev": 40 * h0.size},
        ).x
    centre = marginal(h_hat)
    if not np.isfinite(centre):
        raise NotPositiveDefiniteError("no hyperparameter value gives a conditional mode")
    theta = state["theta"].copy()
    curvature = np.empty(h_hat.size)
    for j in range(h_hat.size):
        step = np.zeros(h_hat.size)
        step[j] = CURVATURE_STEP
        curvature[j] = -(marginal(h_hat + step) - 2.0 * centre + marginal(h_hat - step)
                         ) / CURVATURE_STEP**2
    if not np.all(np.isfinite(curvature) & (curvature > 0.0)):
        raise NotPositiveDefiniteError(
            f"the hyperparameters' Laplace marginal is not concave at its maximum {h_hat}")
    _, theta, held = conditional_mode(theta)
    state["evaluations"] += 1
    frame = laplace_frame(theta, _with_hyper_curvature(held.precision, hyper, curvature))
    _log.info("reference point at the hyperparameters' marginal mode %s (%d evaluations)",
              h_hat, state["evaluations"])
    return MarginalMode(theta, frame, state["evaluations"])


def _with_hyper_curvature(prec, hyper: np.ndarray, curvature: np.ndarray):
    """``prec`` (held: identity rows and columns on ``hyper``) with ``curvature`` on the
    diagonal of the held coordinates."""
    if isinstance(prec, LevelHessian):
        cols = np.flatnonzero(hyper[prec.layout.fixed])
        block = prec.block.copy()
        block[cols, cols] = curvature
        return LevelHessian(prec.diag, prec.coupling, block, prec.layout)
    prec = np.array(prec, dtype=np.float64)
    idx = np.flatnonzero(hyper)
    prec[idx, idx] = curvature
    return prec
