r"""The reference point ``θ̂``: a posterior mode found in a few passes over the data.

Every step needs ``θ̂`` and the Laplace covariance there. On tall data the log posterior is
nearly quadratic around its mode, so Newton's method converges in one or two steps from a good
start, and each step is one pass over the data that returns ``Σ ℓ_i``, ``Σ ∇ℓ_i`` and
``Σ ∇²ℓ_i`` together (:class:`~pymc_subsample.model.glm_pass.GLMPass` for GLMs,
:class:`~pymc_subsample.model.generic_pass.GenericPass` otherwise). The procedure is stated
once, with what each step was measured to cost, in ``docs/methods/reference.md`` ("Newton's
method from a subsample"); :func:`fit_reference` takes its steps in order: the subsample start
(:func:`_subsample_rows`, :func:`~pymc_subsample.model.newton.newton_or_lbfgs`), the Newton
passes on all rows with the row constants on the pass expected to be the last, damped Newton
on all rows far from the mode or where the Hessian is not negative definite and no group scale
makes a funnel possible (:func:`_damped_newton`), and the fallbacks: a funnel's marginal mode
(:func:`_at_marginal_mode`) and PyMC's ``find_MAP`` (:func:`_find_map_fallback`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
import pymc as pm

from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.kernels.indexing import distinct_rows, distinct_runs
from pymc_subsample.model.data_pass import PassResult
from pymc_subsample.model.frame import (
    LaplaceFrame,
    NotPositiveDefiniteError,
    laplace_frame,
)
from pymc_subsample.model.levels import LevelLayout
from pymc_subsample.model.likelihood import SETUP_CHUNK_ROWS, SubsampledLikelihood
from pymc_subsample.model.marginal_mode import (
    SURROGATE_COST,
    exact_marginal_mode,
    surrogate_marginal_mode,
)
from pymc_subsample.model.newton import absolute_frame, newton_or_lbfgs, newton_with_frame
from pymc_subsample.model.prior_hessian import prior_terms

__all__ = ["ReferenceFit", "fit_reference"]

_log = logging.getLogger("pymc_subsample")

#: Default Newton distance (posterior standard deviations) below which ``θ̂`` is a mode.
MODE_TOLERANCE = 0.25
#: Newton distance after which costly row constants (an automatic bound's) are made on the
#: next pass: Newton converges quadratically, and on eleven automatic families at 10⁶ rows a
#: step from d = 0.27–1.26 sd landed within 0.041 d² sd of the mode (0.17 sd from 2 sd;
#: the reference fit's debug log on ``benchmarks/automatic_bounds.py``'s models), so the pass
#: after one from within 2 sd is the mode's (a miss costs one more constants pass)
COSTLY_CONSTANTS_DISTANCE = 2.0
#: Newton distance (posterior sds) to which :func:`_difference_objective`'s Newton converges
#: before the constants' pass: the estimate's own error is what is left
DIFFERENCE_TOLERANCE = 0.02


@dataclass
class ReferenceFit:
    """The reference point, the sums there and the Laplace frame.

    Attributes
    ----------
    frame : LaplaceFrame
        ``θ̂`` and the whitening used by the proposals and by :attr:`row_constants`.
    loglik, grad_sum, hess_sum
        ``Σ ℓ_i(θ̂)``, ``Σ ∇ℓ_i(θ̂)``, ``Σ ∇²ℓ_i(θ̂)`` (tempered likelihood, no prior).
    row_constants : ndarray, LevelRows, SharedScaleRows or None
        Whitened MHSS constants ``c_i`` (when an order was asked for and the model is a GLM),
        or a rate bound's pieces with Corollary 2's constants among them: the level bound's
        when the frame has levels (:class:`~pymc_subsample.bounds.LevelRows`), the
        shared-scale bound's for two predictors (:class:`~pymc_subsample.bounds.SharedScaleRows`).
        The step keeps one and sets this to the constants it keeps (``None`` for a rate bound).
    newton_distance : float
        ``‖Lᵀ∇ log π(θ̂)‖`` at the end.
    mode : ndarray, shape (d,)
        The Laplace approximation's centre: ``θ̂`` plus the Newton step from it with the last
        pass's gradient and Hessian (within ``newton_distance`` posterior sds of ``θ̂``, and,
        Newton's method converging quadratically, much closer to the true mode); ``θ̂``
        itself at a funnel's marginal mode, where ``newton_distance`` is not small.
    full_data_passes : int
        Passes over all N rows, the MAP's included.
    profile : dict
        Seconds spent per phase.
    """

    frame: LaplaceFrame
    loglik: float
    grad_sum: np.ndarray
    hess_sum: np.ndarray
    row_constants: np.ndarray | None
    newton_distance: float
    mode: np.ndarray
    full_data_passes: int
    profile: dict[str, float] = field(default_factory=dict)

    @property
    def theta_hat(self) -> np.ndarray:
        return self.frame.theta_hat


#: Newton distance (in the subsample's posterior sds) at which the subsample fit stops: its
#: mode is itself a few full-data posterior sds from the full-data mode, which the full-data
#: passes then reach, so converging further spends a subsample pass for nothing (0.25 sds of
#: the subsample's posterior are 0.25·√(n/N) of the full posterior's).
SUBSAMPLE_TOLERANCE = 0.25

#: Subsamples of at least ten times this many rows start Newton on a tenth of their rows.
WARM_START_ROWS = 10_000


def _subsample_rows(n: int, d: int) -> int:
    """Rows of the subsample start: ``max(10⁴, 50·d², N/20)``, a Hessian of ``d`` parameters
    well estimated, but at most ``N/4`` once that is 10⁴ rows or more, so that the search
    from PyMC's initial point (Newton, or L-BFGS down a funnel) runs on a subsample rather
    than in passes over all ``N`` rows; ``N`` itself below that (small data)."""
    n_sub = max(WARM_START_ROWS, 50 * d * d, n // 20)
    return min(n_sub, n // 4) if n // 4 >= WARM_START_ROWS else n


#: Fewest runs of consecutive rows a subsample of chunked sources is drawn in.
MIN_SUBSAMPLE_RUNS = 16


def _subsample_index(lik: SubsampledLikelihood, rng: np.random.Generator, n_sub: int):
    """The subsample's rows: uniform, or for sources read in chunks (Zarr, Dask) whole
    chunks at random (:func:`~pymc_subsample.kernels.indexing.distinct_runs`), at least
    :data:`MIN_SUBSAMPLE_RUNS` of them: random rows would read nearly every chunk, i.e. all
    the data (a Dask fancy index over 2,442 chunks was most of a 200 s setup at 10⁷ rows).
    The fit only starts the full-data passes, which correct any bias of the runs."""
    chunks = [s.chunk_rows for _, s in lik.gathered.values() if s.chunk_rows]
    if not chunks:
        return distinct_rows(rng, lik.n_rows, n_sub)  # O(n_sub) memory, not O(N)
    run = min(max(chunks), max(1, n_sub // MIN_SUBSAMPLE_RUNS))
    return distinct_runs(rng, lik.n_rows, n_sub, run)


def fit_reference(
    lik: SubsampledLikelihood,
    data_pass,
    *,
    map_point: dict | None = None,
    order: int | None = None,
    tolerance: float = MODE_TOLERANCE,
    max_passes: int = 8,
    subsample_rows: int | None = None,
    seed: int = 20240611,
) -> ReferenceFit:
    """Find ``θ̂`` (or check a given one) and everything the steps need there.

    Parameters
    ----------
    lik : SubsampledLikelihood
    data_pass : GLMPass or GenericPass
        ``data_pass.full(θ, idx_chunks=..., weight=..., whiten_rows=..., order=...)`` returns a
        :class:`~pymc_subsample.model.data_pass.PassResult`.
    map_point : dict, optional
        A user's reference point (a PyMC point); checked, and refined if it is not a mode.
    order : {1, 2}, optional
        Taylor order of the MHSS row constants to compute on the way (GLM passes only).
    tolerance : float
        Newton distance, in posterior standard deviations, that counts as converged.
    max_passes : int
        Full-data passes allowed before giving up.
    subsample_rows : int, optional
        Rows of the subsample start (default :func:`_subsample_rows`).
    seed : int
        Seed of the subsample (the fit is deterministic).

    Raises
    ------
    SubsamplingModelError
        When no mode is found within ``max_passes`` passes; says what to check.
    """
    profile: dict[str, float] = {}
    t_start = time.perf_counter()
    n, d = lik.n_rows, lik.dim
    passes_before = data_pass.n_passes

    def log_post(theta, res):
        v, g, h = prior_terms(lik, theta, data_pass.levels)
        return v + res.loglik, g + res.grad, -(h + res.hess)

    if map_point is not None:
        theta = lik.ravel(map_point)
        if not np.all(np.isfinite(theta)):
            raise ValueError("map_point contains NaN or infinite values")
    else:
        theta = lik.ravel(lik.initial_point)
    n_sub = subsample_rows or _subsample_rows(n, d)
    whitening: LaplaceFrame | None = None
    # the subsample's row chunks and weight N/n (None without a subsample)
    subsample: tuple[list[np.ndarray], float] | None = None

    def full_objective(th):
        return log_post(th, data_pass.full(th))

    if n_sub >= n and map_point is None:
        # small data: damped Newton on all rows, each step a (cheap) pass over the data
        theta, prec = newton_or_lbfgs(full_objective, theta, tolerance=tolerance,
                                       max_steps=60, hyper=_unread(data_pass, theta, None))
        try:
            whitening = laplace_frame(theta, prec)
        except NotPositiveDefiniteError:
            whitening = None
        profile["small_data_newton_s"] = time.perf_counter() - t_start
    elif n_sub < n:
        rng = np.random.default_rng(seed)
        idx = _subsample_index(lik, rng, n_sub)
        n_sub = idx.size

        def chunks_of(rows: np.ndarray) -> list[np.ndarray]:
            return [rows[i : i + SETUP_CHUNK_ROWS]
                    for i in range(0, rows.size, SETUP_CHUNK_ROWS)]

        chunks = chunks_of(idx)
        subsample = chunks, n / n_sub

        def sub_objective(th):
            res = data_pass.full(th, idx_chunks=chunks, weight=n / n_sub)
            return log_post(th, res)

        if map_point is None:
            warm_started = n_sub >= WARM_START_ROWS * 10
            if warm_started:
                # far from the mode (a log link from θ = 0, say) Newton takes many damped
                # steps: take them on a tenth of the subsample, then finish on all of it
                n_warm = n_sub // 10
                warm = chunks_of(np.sort(rng.choice(idx, size=n_warm, replace=False)))
                unread = _unread(data_pass, theta, warm)
                theta, _ = newton_or_lbfgs(
                    lambda th: log_post(th, data_pass.full(th, idx_chunks=warm,
                                                           weight=n / n_warm)),
                    theta, tolerance=1.0, max_steps=60, hyper=unread,
                )
            else:
                unread = _unread(data_pass, theta, chunks)
            # from a warm start Newton converges in a few steps; from PyMC's initial point
            # (the mouth of a hierarchical model's funnel) L-BFGS takes over, on these rows
            # rather than on all N (18 passes over 10⁵ rows in a 50-group model); if it does
            # not converge, the full-data passes and their fallback take over. From a warm
            # start the group effects are fitted already: no run with the group scales held
            # first (it took 4 of 7 evaluations on 2.5·10⁵ rows of a 100-level random
            # intercept)
            theta, prec = newton_or_lbfgs(
                sub_objective, theta, tolerance=SUBSAMPLE_TOLERANCE, max_steps=20,
                hyper=unread, hold_first=not warm_started)
        else:
            prec = sub_objective(theta)[2]
        try:
            whitening = laplace_frame(theta, prec)
        except NotPositiveDefiniteError:
            whitening = None
        profile["subsample_s"] = time.perf_counter() - t_start

    best_value, best_theta = -np.inf, theta
    expect_converged = n_sub >= n or map_point is not None
    distance = np.inf
    first_distance = None
    damped_restart = False
    result = None
    used_fallback = tried_marginal = False
    marginal = None  # (pass, frame) at the group scales' marginal mode, for a funnel
    t_pass = time.perf_counter()
    # costly constants (an automatic bound's) only on a pass at a point found to be the mode,
    # one Newton step from within COSTLY_CONSTANTS_DISTANCE of it, or the mode of the
    # difference estimate (_difference_objective) from a pass farther away
    at_mode = data_pass.speculative_constants

    def damped_from(theta: np.ndarray, start: tuple) -> np.ndarray:
        """Damped Newton on all rows from ``θ`` (:func:`_damped_newton`), once per fit; at a
        mode, the next pass is the constants' (its distance checked again)."""
        nonlocal damped_restart, whitening, expect_converged, at_mode
        theta, converged_frame = _damped_newton(full_objective, theta, tolerance, start=start)
        damped_restart = True
        if converged_frame is not None:
            whitening, expect_converged, at_mode = converged_frame, True, True
        return theta

    for _ in range(max_passes):
        want_constants = (order is not None and whitening is not None and expect_converged
                          and at_mode)
        t_one = time.perf_counter()
        res = data_pass.full(
            theta,
            whiten_rows=whitening.whiten_rows if want_constants else None,
            order=order if want_constants else None,
            levels=whitening.n_levels if want_constants else 0,
        )
        pass_seconds = time.perf_counter() - t_one
        value, g_post, prec = log_post(theta, res)
        if not np.isfinite(value):
            raise SubsamplingModelError(
                "The log posterior is not finite at the reference point "
                f"{lik.unravel(theta)}. Pass map_point= inside the support of the model."
            )
        if value < best_value - 1e-9 * abs(best_value):
            # the full-data Newton step overshot: halve it back toward the best point
            theta = 0.5 * (theta + best_theta)
            continue
        best_value, best_theta = value, theta
        try:
            frame = laplace_frame(theta, prec)
        except NotPositiveDefiniteError:
            if first_distance is None:
                first_distance = np.inf  # no Newton step: the Hessian is not negative definite
            if used_fallback:
                break
            if map_point is None and not tried_marginal and data_pass.levels is not None:
                # many levels: a funnel (a group scale heading to zero), before PyMC's
                # find_MAP on all rows, which heads there too (with a few levels, dense,
                # find_MAP first: it finds the joint mode where the data give one)
                marginal, tried_marginal = _at_marginal_mode(
                    lik, data_pass, log_post, order, tolerance,
                    current=(theta, res, pass_seconds)), True
                if marginal is not None:
                    break
            if not damped_restart and not _unread_mask(res.hess, data_pass.levels, d).any():
                # every coordinate read by some row, so no funnel: the point is near a mode
                # whose curvature the subsample misjudged (a zero-inflated NB's mixing weight
                # and dispersion), and damped Newton on all rows finds it in a few counted
                # passes (find_MAP took 97 s of a 3·10⁵-row setup and read all rows uncounted)
                _log.info("the log posterior's Hessian is not negative definite at a full "
                          "pass; damped Newton on all rows")
                theta = damped_from(theta, (value, g_post, prec))
                continue
            theta, used_fallback = _find_map_fallback(lik, theta), True
            best_value = -np.inf
            continue
        distance = frame.newton_distance(g_post)
        if first_distance is None:
            first_distance = distance
        _log.debug(
            "reference pass %d: Newton distance %.3g posterior sd (constants: %s)",
            data_pass.n_passes - passes_before, distance, want_constants,
        )
        if distance <= tolerance:
            mode = theta + frame.newton_step(g_post)
            if order is None:
                result = (res, frame, mode)
                break
            if want_constants:
                # the constants were whitened with the previous Hessian: keep that whitening
                result = (res, laplace_frame(theta, whitening.precision), mode)
                break
            # one more pass here, for the constants
            whitening, expect_converged, at_mode = frame, True, True
            continue
        # after one Newton step from within a few dozen sds the next pass is usually the last
        whitening, expect_converged = frame, distance <= 25.0
        at_mode = data_pass.speculative_constants or distance <= COSTLY_CONSTANTS_DISTANCE
        if (not at_mode and expect_converged and not want_constants and order is not None
                and subsample is not None and isinstance(res.hess, np.ndarray)):
            # costly constants: Newton on the subsample's difference estimate of the log
            # posterior (exact at θ) finds the mode without another pass (their pass next)
            refined, _, converged, refined_frame = newton_with_frame(
                _difference_objective(data_pass, log_post, *subsample, theta, res), theta,
                tolerance=DIFFERENCE_TOLERANCE, max_steps=10, start=(value, g_post, prec))
            _log.debug("difference estimate's Newton: converged %s, %.3g sd from the pass",
                       converged, frame.newton_distance(prec @ (refined - theta)))
            if converged:
                theta, whitening, at_mode = refined, refined_frame, True
                continue
        if distance > 25.0 and not damped_restart:
            # far from the mode (a poor map_point, or a subsample that misses what a few
            # rows inform, like rare binary columns): plain Newton steps may overshoot, so
            # damped Newton on all rows, each step and backtrack a counted pass
            theta = damped_from(theta, (value, g_post, prec))
            continue
        theta = theta + frame.newton_step(g_post)
    if result is None and map_point is None and not tried_marginal:
        # no mode the Newton passes could reach: a funnel, when some coordinates no row reads
        marginal, tried_marginal = _at_marginal_mode(lik, data_pass, log_post, order,
                                                     tolerance), True
    if marginal is not None:
        # θ̂ is its own Laplace centre; the joint gradient there is not zero (the scales')
        res, frame = marginal
        result = (res, frame, frame.theta_hat)
        distance = frame.newton_distance(log_post(frame.theta_hat, res)[1])
    profile["full_data_passes_s"] = time.perf_counter() - t_pass
    passes = data_pass.n_passes - passes_before
    if result is None:
        raise SubsamplingModelError(
            f"No posterior mode found for the reference point: after {passes} passes over the "
            f"data the Newton step from the best point is still {distance:.3g} posterior "
            "standard deviations long (or the log posterior's Hessian is not negative definite "
            "there). Check that every parameter has a proper prior and the model is identified "
            "(e.g. no collinear or all-zero covariate columns), or pass map_point= close to the "
            "mode. In a hierarchical model with few rows per group the joint mode can put a "
            "group-level scale at zero (a funnel); when no scale's marginal mode is found either "
            "(docs/methods/reference.md, Funnels), use AusterityMH or BarkerMinibatch with a "
            "proposal_cov= and cv_order=None (a random walk without control variates needs no "
            "reference point), or NUTS."
        )
    res, frame, mode = result
    if map_point is not None and not np.array_equal(frame.theta_hat, lik.ravel(map_point)):
        _log.warning(
            "map_point was not a posterior mode (%s); it was refined with Newton passes over "
            "the data", f"Newton step {first_distance:.3g} posterior sd"
            if np.isfinite(first_distance) else "the log posterior's Hessian there is not "
            "negative definite",
        )
    profile["reference_s"] = time.perf_counter() - t_start
    return ReferenceFit(
        frame, res.loglik, res.grad, res.hess, res.row_constants, distance, mode, passes, profile
    )


def _at_marginal_mode(lik: SubsampledLikelihood, data_pass, log_post, order: int | None,
                      tolerance: float, current: tuple | None = None):
    """The pass, frame and ``θ̂`` at the hyperparameters' Laplace-marginal mode
    (:mod:`~pymc_subsample.model.marginal_mode`), for a model whose joint mode the Newton passes
    could not reach; None when every coordinate is read by some row (no hyperparameter to
    hold) or no conditional mode exists.

    ``current`` is ``(θ, pass, seconds)``, a full pass already made (none is made again
    there) and its wall time; the levels and fixed effects start from it, the
    hyperparameters from PyMC's initial point. Where a pass costs more than
    :data:`~pymc_subsample.model.marginal_mode.SURROGATE_COST` evaluations of the prior's
    terms (tall data), the mode is found on the data's quadratic expansion at the last pass
    (:func:`~pymc_subsample.model.marginal_mode.surrogate_marginal_mode`: a pass an outer
    step); elsewhere, or where that does not converge, with Newton solves on all rows for each
    evaluation of the marginal
    (:func:`~pymc_subsample.model.marginal_mode.exact_marginal_mode`).
    """
    theta = lik.ravel(lik.initial_point)
    if current is None:
        t_one = time.perf_counter()
        current = (theta, data_pass.full(theta))
        current += (time.perf_counter() - t_one,)
    at, res, pass_seconds = current
    hyper = _unread_mask(res.hess, data_pass.levels, lik.dim)
    if not hyper.any():
        return None
    start = np.where(hyper, theta, at)
    t_one = time.perf_counter()
    log_post(start, res)
    prior_seconds = time.perf_counter() - t_one
    found = None
    if pass_seconds > SURROGATE_COST * prior_seconds:
        try:
            found = surrogate_marginal_mode(data_pass, log_post, hyper, start, at, res,
                                             tolerance)
        except NotPositiveDefiniteError:
            pass
    if found is None:
        try:
            found = exact_marginal_mode(data_pass, log_post, hyper, start, tolerance)
        except NotPositiveDefiniteError:
            return None
    frame = found.frame
    res = data_pass.full(found.theta, whiten_rows=frame.whiten_rows if order else None,
                         order=order, levels=frame.n_levels if order else 0)
    return res, frame


def _difference_objective(data_pass, log_post, chunks: list[np.ndarray], weight: float,
                          theta_pass: np.ndarray, at_pass: PassResult):
    r"""The log posterior estimated near a full pass at ``θ₀`` from the subsample ``chunks``
    (weighted ``N/n``): its sums ``ℓ_S, g_S, H_S`` plus the second-order Taylor expansion at
    ``θ₀`` of what the full pass's sums differ from them by,

    .. math::

        \tilde\ell(θ) = \ell_S(θ) + Δ\ell + Δg^\top(θ - θ_0)
            + \tfrac12 (θ - θ_0)^\top ΔH (θ - θ_0),

    with ``Δ`` the full pass's sums less the subsample's at ``θ₀`` (a difference estimator
    with the Taylor expansion as control variate): exact at ``θ₀``, its error elsewhere only
    the subsample's error in the rows' remainder beyond second order, where the subsample's
    own mode is about ``√(N/n)`` posterior sds off. One subsample pass a call."""
    at_sub = data_pass.full(theta_pass, idx_chunks=chunks, weight=weight)
    d_loglik = at_pass.loglik - at_sub.loglik
    d_grad = at_pass.grad - at_sub.grad
    d_hess = at_pass.hess - at_sub.hess

    def objective(theta: np.ndarray):
        res = data_pass.full(theta, idx_chunks=chunks, weight=weight)
        delta = theta - theta_pass
        return log_post(theta, PassResult(
            res.loglik + d_loglik + d_grad @ delta + 0.5 * delta @ d_hess @ delta,
            res.grad + d_grad + d_hess @ delta, res.hess + d_hess))

    return objective


def _damped_newton(full_objective, theta: np.ndarray, tolerance: float, start: tuple):
    """Damped Newton on all rows from ``θ`` (``start``: the pass made there), each step and
    backtrack a counted pass, with :func:`~pymc_subsample.model.newton.absolute_frame` where
    the Hessian is not negative definite. Returns the last point and, when it is a mode (the
    undamped Newton distance within ``tolerance``), the Laplace frame there (else None)."""
    theta, _, converged, frame = newton_with_frame(
        full_objective, theta, tolerance=tolerance, max_steps=30, damp=absolute_frame,
        start=start)
    return theta, frame if converged else None


def _unread(data_pass, theta: np.ndarray, chunks: list[np.ndarray] | None,
            split_only: bool = True) -> np.ndarray | None:
    """The mask of the fixed coordinates no row reads (a group scale: zero data curvature), on
    the rows ``chunks`` (all rows when None: a counted pass); None for a pass not split by
    levels when ``split_only``. Not the first rows: a covariate can be zero on those (a month,
    in rows sorted by date), and the mask decides whether L-BFGS is tried."""
    levels = data_pass.levels
    if levels is None and split_only:
        return None
    return _unread_mask(data_pass.full(theta, idx_chunks=chunks).hess, levels, theta.size)


def _unread_mask(hess, levels: LevelLayout | None, dim: int) -> np.ndarray:
    """The coordinates with zero data curvature in a pass's Hessian sums (of the fixed
    block, when they are split by ``levels``)."""
    if levels is None:
        return np.diag(hess) == 0.0
    mask = np.zeros(dim, dtype=bool)
    mask[levels.fixed[np.diag(hess.block) == 0.0]] = True
    return mask


def _find_map_fallback(lik: SubsampledLikelihood, theta: np.ndarray) -> np.ndarray:
    """``pm.find_MAP`` (L-BFGS) on all rows, from the model's initial point.

    Not from ``θ``, where Newton stalled: in a hierarchical model Newton from group effects at
    zero can run down the funnel toward a scale of zero, where the density grows without bound,
    and L-BFGS from there stays; from PyMC's start it finds the local mode that the data
    inform, as PyMC's own ``find_MAP`` does.
    """
    lazy = sorted(var.name for var, (_, source) in lik.gathered.items() if not source.in_memory)
    if lazy:
        # the model's own graph holds a stand-in for Zarr and Dask rows (pymc_subsample.model.data)
        raise SubsamplingModelError(
            "Newton's method stalled finding the reference point, and its fallback, "
            "pm.find_MAP on all rows, cannot read the Zarr or Dask data "
            f"{lazy}. Pass map_point= (a posterior "
            "mode found another way), or give the data as a NumPy array or .npy memmap."
        )
    _log.info("Newton's method stalled; falling back to pm.find_MAP (L-BFGS) on all rows")
    point = pm.find_MAP(start=dict(lik.initial_point), model=lik.model, progressbar=False)
    return lik.ravel(point)
