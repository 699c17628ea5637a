"""Newton's method and its L-BFGS fallback for the reference fit
(:func:`~pymc_subsample.model.reference.fit_reference`): damped Newton ascent on a cheap
objective ``θ ↦ (log π, ∇ log π, −∇² log π)``, with a dense or level-structured Hessian, and the
same with some coordinates held (a group scale)."""

from __future__ import annotations

import logging

import numpy as np
import scipy.optimize

from pymc_subsample.model.frame import LaplaceFrame, NotPositiveDefiniteError, laplace_frame
from pymc_subsample.model.levels import LevelHessian

__all__ = ["DAMPED_STEPS", "absolute_frame", "damped_frame", "holding", "lbfgs", "newton",
           "newton_or_lbfgs", "newton_with_frame"]

_log = logging.getLogger("pymc_subsample")


#: Damped Newton steps in a row after which :func:`newton` gives up.
DAMPED_STEPS = 10


def newton(
    objective, theta: np.ndarray, *, tolerance: float, max_steps: int,
    damped_steps: int = DAMPED_STEPS, damp=None, start: tuple | None = None,
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Damped Newton ascent on ``objective(θ) -> (value, gradient, −Hessian)`` (cheap calls).

    Returns the last point, its negative Hessian and whether it converged: the Newton distance
    is within ``tolerance`` in the metric of the undamped Hessian, which is positive definite
    there (a point reached with Levenberg damping is not a mode). It gives up after
    ``damped_steps`` damped steps in a row: far from any mode, or down a funnel.

    ``damp(θ, P)`` makes the frame of a step where ``P`` is not positive definite
    (:func:`damped_frame` by default, or :func:`absolute_frame`); ``start``, the objective's
    value at ``θ`` when the caller has it already (a pass over the data not made again).
    """
    return newton_with_frame(objective, theta, tolerance=tolerance, max_steps=max_steps,
                             damped_steps=damped_steps, damp=damp, start=start)[:3]


def newton_with_frame(
    objective, theta: np.ndarray, *, tolerance: float, max_steps: int,
    damped_steps: int = DAMPED_STEPS, damp=None, start: tuple | None = None,
) -> tuple[np.ndarray, np.ndarray, bool, LaplaceFrame | None]:
    """:func:`newton`, and the Laplace frame of the last point's negative Hessian when it
    converged (None otherwise): a caller that needs it does not factor it again."""
    damp = damp or damped_frame
    value, g, prec = start if start is not None else objective(theta)
    damped_in_a_row = 0
    for _ in range(max_steps):
        if not (np.isfinite(value) and np.all(np.isfinite(g)) and finite_hessian(prec)):
            return theta, prec, False, None  # the full-data passes fall back to L-BFGS from here
        try:
            frame = laplace_frame(theta, prec)
            damped = False
        except NotPositiveDefiniteError:
            frame, damped = damp(theta, prec), True
        damped_in_a_row = damped_in_a_row + 1 if damped else 0
        if damped_in_a_row > damped_steps:
            return theta, prec, False, None
        step = frame.newton_step(g)
        if frame.newton_distance(g) <= tolerance and not damped:
            return theta, prec, True, frame
        t = 1.0
        for _ in range(30):
            candidate = theta + t * step
            new_value, new_g, new_prec = objective(candidate)
            if np.isfinite(new_value) and new_value >= value:
                break
            t *= 0.5
        else:
            return theta, prec, False, None
        theta, value, g, prec = candidate, new_value, new_g, new_prec
    return theta, prec, False, None


def finite_hessian(prec) -> bool:
    return prec.is_finite() if isinstance(prec, LevelHessian) else bool(np.all(np.isfinite(prec)))


def damped_frame(theta: np.ndarray, prec) -> LaplaceFrame:
    """Levenberg damping far from the mode, where the Hessian may be indefinite: the frame of
    ``P + shift·I``. The margin is relative to the largest curvature, so the damped matrix
    stays well conditioned (an absolute 1e-6 left a condition number the frame refuses). For a
    :class:`LevelHessian` (no eigenvalues without a dense matrix) the shift grows tenfold from
    ``10⁻⁶`` of the largest entry until the arrow factor exists."""
    if isinstance(prec, LevelHessian):
        scale = max(1.0, prec.max_abs())
        shift = 1e-6 * scale
        for _ in range(16):
            try:
                return laplace_frame(theta, prec.shifted(shift))
            except NotPositiveDefiniteError:
                shift *= 10.0
        raise NotPositiveDefiniteError("no damping makes the Hessian positive definite")
    eigs = np.linalg.eigvalsh(0.5 * (prec + prec.T))
    shift = abs(eigs.min()) + 1e-6 * max(1.0, float(np.abs(eigs).max()))
    return LaplaceFrame(theta, prec + shift * np.eye(theta.size))


def absolute_frame(theta: np.ndarray, prec) -> LaplaceFrame:
    """The frame of ``|P|`` (each eigenvalue by its absolute value, floored at ``10⁻⁶`` of the
    largest): where ``P`` has a few negative eigenvalues near the mode (a zero-inflated
    model's mixing weight and dispersion, say), the step along each such direction goes
    uphill by its own curvature's scale, where the Levenberg shift of :func:`damped_frame`
    leaves it a curvature near zero and a step that backtracking (a pass over the data each
    halving) must shorten many times. :func:`damped_frame` for a :class:`LevelHessian`."""
    if isinstance(prec, LevelHessian):
        return damped_frame(theta, prec)
    eigs, vecs = np.linalg.eigh(0.5 * (prec + prec.T))
    floor = 1e-6 * max(1.0, float(np.abs(eigs).max()))
    return LaplaceFrame(theta, (vecs * np.maximum(np.abs(eigs), floor)) @ vecs.T)


#: Objective evaluations allowed to :func:`lbfgs`, and the Newton distance (posterior sds,
#: with a negative definite Hessian) at which it hands over to Newton's method (as the
#: full-data passes trust a plain Newton step from within 25 sds)
LBFGS_EVALUATIONS, NEWTON_BASIN = 200, 25.0


class NewtonBasin(Exception):
    """Raised inside L-BFGS at the first point where Newton's method can take over."""

    def __init__(self, theta: np.ndarray) -> None:
        self.theta = theta


def lbfgs(objective, theta: np.ndarray) -> np.ndarray:
    """L-BFGS ascent (SciPy) on ``objective``'s value and gradient, from ``θ``, until a point
    where Newton's method can take over: its Hessian negative definite and the Newton step at
    most :data:`NEWTON_BASIN` posterior sds long.

    Newton's method rescales each direction by its curvature. In a hierarchical model started
    with its group effects at zero, the group scale's curvature is nearly zero and its
    gradient pulls toward a scale of zero: Newton's first step runs down the funnel, where the
    density grows without bound and Newton crawls. L-BFGS's first steps follow the gradient,
    which the data make largest for the group effects: it fits them first, and the scale's
    gradient then points to the mode the data inform (as PyMC's ``find_MAP`` finds it).
    """
    def negative(th):
        value, g, prec = objective(th)
        if not (np.isfinite(value) and np.all(np.isfinite(g))):
            return np.inf, np.zeros_like(th)
        try:
            if laplace_frame(th, prec).newton_distance(g) <= NEWTON_BASIN:
                raise NewtonBasin(np.array(th))
        except NotPositiveDefiniteError:
            pass
        return -value, -g

    try:
        result = scipy.optimize.minimize(negative, theta, jac=True, method="L-BFGS-B",
                                         options={"maxfun": LBFGS_EVALUATIONS})
    except NewtonBasin as basin:
        return basin.theta
    return result.x


def holding(objective, held: np.ndarray):
    """``objective`` with the coordinates ``held`` (a mask) kept where they are: their
    gradient zero and their rows of the negative Hessian those of the identity."""
    def held_objective(th):
        value, g, prec = objective(th)
        g = np.where(held, 0.0, g)
        if isinstance(prec, LevelHessian):
            return value, g, prec.holding(held)
        prec = prec.copy()
        prec[held, :], prec[:, held] = 0.0, 0.0
        prec[held, held] = 1.0
        return value, g, prec
    return held_objective


def newton_or_lbfgs(
    objective, theta: np.ndarray, *, tolerance: float, max_steps: int,
    hyper: np.ndarray | None = None, hold_first: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Newton from ``θ``; when it does not converge, L-BFGS from ``θ`` (:func:`lbfgs`) and
    Newton again from there. Returns the point and its negative Hessian.

    The first Newton run takes no damped step: a Hessian that is not negative definite at the
    start (a hierarchical model with its group effects at zero, at the mouth of the funnel)
    sends Newton down the funnel, where it spent 54 evaluations (7 s of a 10⁶-row random
    intercept model's setup) before giving up; L-BFGS goes straight to the data's mode.

    With ``hyper``, the coordinates no row reads (a group scale) of a model split by levels,
    Newton first runs with them held: with the scale fixed the group effects and fixed
    effects of a GLM are a concave problem, which Newton solves in a few steps, and from its
    solution (group effects fitted, away from the funnel's mouth) Newton on all coordinates.
    L-BFGS on a thousand levels went down the funnel instead (``log σ → −19``), so with
    ``hyper`` it is not tried: a Newton run that does not converge from there means a funnel
    with no interior mode, which the full-data passes hand to the scales' marginal mode.
    ``hold_first=False`` skips the held run, for a start whose group effects are fitted
    already (a warm start on fewer rows).
    """
    start = theta
    if hyper is not None and hyper.any():
        if hold_first:
            start = newton(holding(objective, hyper), theta, tolerance=tolerance,
                            max_steps=max_steps)[0]
        theta, prec, converged = newton(objective, start, tolerance=tolerance,
                                         max_steps=max_steps)
    else:
        theta, prec, converged = newton(objective, theta, tolerance=tolerance,
                                         max_steps=max_steps, damped_steps=0)
    if converged or (hyper is not None and hyper.any()):
        # with group scales, not converged is a funnel, and L-BFGS heads down it: the
        # full-data passes take over, and their fallback, the scales' marginal mode
        return theta, prec
    _log.info("Newton's method did not converge on the reference fit's rows; L-BFGS from the "
              "start, then Newton again")
    theta, prec, _ = newton(objective, lbfgs(objective, start), tolerance=tolerance,
                             max_steps=max_steps)
    return theta, prec
