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

from pymc_subsample.model.data_pass import PassResult
from pymc_subsample.model.frame import LaplaceFrame, NotPositiveDefiniteError, laplace_frame
from pymc_subsample.model.levels import LevelHessian
from pymc_subsample.model.newton import holding, newton_with_frame

__all__ = ["MarginalMode", "exact_marginal_mode", "marginal_mode", "surrogate_marginal_mode"]

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


def conditional_modes(objective, hyper: np.ndarray, tolerance: float):
    """``θ ↦ (log π(θ*), θ*, F)`` for :func:`marginal_mode`:
    Newton on ``objective`` with the coordinates ``hyper`` held, from ``θ``."""
    held = holding(objective, hyper)
    last: dict[str, tuple] = {}

    def held_remembered(th):
        last["point"] = (th, *held(th))
        return last["point"][1:]

    def conditional_mode(th):
        th, _, converged, frame = newton_with_frame(held_remembered, th, tolerance=tolerance,
                                                    max_steps=30)
        at, value, g, _ = last["point"]
        if not (converged and np.array_equal(at, th)):
            return -np.inf, th, None
        # the last Newton step, not taken (within the tolerance): its predicted gain, so that
        # the marginal's values carry no error of order tolerance² (its curvature is their
        # second difference)
        step = frame.newton_step(g)
        return value + 0.5 * float(g @ step), th + step, frame

    return conditional_mode


def exact_marginal_mode(data_pass, log_post, hyper: np.ndarray, start: np.ndarray,
                         tolerance: float):
    """:func:`marginal_mode` with each evaluation a
    Newton solve on all rows (two or three passes from the last one's point): on a subsample
    the levels' few rows, reweighted, look more spread than they are, and its marginal mode
    of a flights model's plane scale was 0.65 against 0.16 on all rows."""
    objective = lambda th: log_post(th, data_pass.full(th))  # noqa: E731
    return marginal_mode(conditional_modes(objective, hyper, tolerance), hyper, start)


#: Cost of a pass over all rows, in evaluations of the prior's terms (its Hessian included),
#: above which :func:`surrogate_marginal_mode` searches the marginal mode: it spends about
#: three times the exact search's evaluations but a handful of passes instead of two or
#: three per evaluation.
SURROGATE_COST = 2.0

#: Passes over all rows allowed to :func:`surrogate_marginal_mode` (its backtracking
#: included) before the exact search takes over.
SURROGATE_PASSES = 12


def quadratic_data(log_post, centre: np.ndarray, res):
    """``θ ↦ log_post(θ, ·)`` with the data's log-likelihood replaced by its second-order
    expansion at ``centre`` from the pass ``res`` there (exact at ``centre``, and its gradient
    and Hessian there too): an objective that reads no rows."""
    def objective(th):
        delta = th - centre
        h_delta = res.hess @ delta
        expanded = PassResult(res.loglik + float(res.grad @ delta) + 0.5 * float(delta @ h_delta),
                              res.grad + h_delta, res.hess, None)
        return log_post(th, expanded)
    return objective


def surrogate_marginal_mode(data_pass, log_post, hyper: np.ndarray, start: np.ndarray,
                             centre: np.ndarray, res, tolerance: float) -> MarginalMode | None:
    r"""The Laplace-marginal mode of the hyperparameters ``h`` in a handful of passes.

    Each outer step maximises the marginal with the data's log-likelihood replaced by its
    quadratic expansion at the last pass's point ``θ_k`` (:func:`quadratic_data`; the prior
    exact): no rows are read, so the search over ``h`` (dozens of conditional modes) costs
    no pass. Its result ``θ_{k+1} = (r̃(h_{k+1}), h_{k+1})`` is the next pass's point: for
    the levels and fixed effects ``r`` this is a Newton step on the conditional posterior at
    ``h_{k+1}`` (halved, a pass each, while it lowers it: the data's log-likelihood at ``r_k``
    is exact at every ``h``, since no row reads ``h``). It stops when the Newton distance of
    ``r`` at ``θ_k`` is within ``tolerance`` and ``h`` moved less than
    :data:`HYPER_TOLERANCE`: then the expansion is that of
    the conditional mode, and ``θ_{k+1}`` and its frame (the expansion's precision with the
    marginal's curvature on ``h``) are the result. The expansion's log-determinant leaves out
    how the data's curvature changes with ``r̂(h)`` (third derivatives): ``ĥ`` is that much
    off the full Laplace marginal's, which moves the reference point, never the exactness.
    None when it does not converge within :data:`SURROGATE_PASSES` passes.
    """
    theta, passes = start, 0
    last_h = None
    while passes < SURROGATE_PASSES:
        objective = quadratic_data(log_post, centre, res)
        held = holding(objective, hyper)
        _, g_held, prec_held = held(centre)
        try:
            distance = laplace_frame(centre, prec_held).newton_distance(g_held)
        except NotPositiveDefiniteError:
            distance = np.inf
        found = marginal_mode(conditional_modes(objective, hyper, tolerance), hyper, theta,
                              step=None if last_h is None else float(
                                  np.abs(centre[hyper] - last_h).max(initial=0.0)))
        h_new = found.theta[hyper]
        _log.debug("surrogate marginal: pass %d, Newton distance of the levels and fixed "
                   "effects %.3g, h %s -> %s", passes, distance, centre[hyper], h_new)
        if distance <= tolerance and np.all(np.abs(h_new - centre[hyper]) <= HYPER_TOLERANCE):
            return found
        last_h = centre[hyper]
        # the step in r at the new h, halved while the exact conditional posterior falls
        base = np.where(hyper, found.theta, centre)
        base_value = objective(base)[0]
        target = found.theta
        for _ in range(8):
            new_res = data_pass.full(target)
            passes += 1
            value = log_post(target, new_res)[0]
            if np.isfinite(value) and value >= base_value:
                break
            target = 0.5 * (base + target)
        else:
            return None
        theta, centre, res = target, target, new_res
    return None
