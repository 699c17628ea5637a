"""The build of a subsampling step, before any chain: one function from a PyMC model to a
:class:`Setup`.

The stages run in this order (``docs/architecture.md``, *Building a step*): the checks of the
arguments, the sampled variables and the centred twin of non-centred effects, the likelihood
(:class:`~pymc_subsample.model.likelihood.SubsampledLikelihood`), the data pass and the
reference fit (the only O(N) work), the Laplace frame, the control variates, the proposal and
its tuner. Nothing here draws a random number or knows PyMC's step protocol: a step class calls
:func:`build_setup` once and keeps what it returns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pymc as pm
import pytensor
from pymc.initial_point import make_initial_point_fn
from pytensor.graph.utils import MethodNotDefined
from threadpoolctl import threadpool_limits

from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.model.build_progress import build_note, build_phase
from pymc_subsample.model.centring import CentredTwin, centred_twin
from pymc_subsample.model.control_variates import TaylorControlVariate, validate_cv_order
from pymc_subsample.model.frame import LaplaceFrame
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.model.location_scale import detect_location_scale_terms
from pymc_subsample.model.passes import DataPass, GenericPass, GLMPass, LocationScalePass
from pymc_subsample.model.predictors import detect_predictor_terms
from pymc_subsample.model.reference import MODE_TOLERANCE, ReferenceFit, fit_reference
from pymc_subsample.model.row_checks import raise_no_second_derivative
from pymc_subsample.proposals.proposal import PROPOSALS, cholesky_factor, make_proposal
from pymc_subsample.proposals.tuning import ESJDTuner, ScaleAdapter

__all__ = ["Setup", "build_setup", "default_data_pass", "glm_data_pass"]

_log = logging.getLogger("pymc_subsample")


@dataclass
class Setup:
    """What a step reads off its model before the first draw."""

    #: the value variables PyMC hands the step, in the order of its raveled points
    user_vars: list
    #: non-centred effects ``s * z[g]`` run as ``u = s·z`` (None when the model has none)
    centring: CentredTwin | None
    likelihood: SubsampledLikelihood
    cv_order: int | None
    #: how ``θ̂`` was found (None when no reference point was needed)
    reference: ReferenceFit | None
    #: the pass over the data of the reference fit (None without one)
    reference_pass: DataPass | None
    frame: LaplaceFrame
    theta_hat: np.ndarray | None
    control_variate: TaylorControlVariate | None
    #: the Laplace mode in the frame's coordinates ``φ``
    laplace_centre: np.ndarray
    proposal: Any
    proposal_kind: str
    target_accept: float | None
    #: the acceptance-rate adapter (random walk with a target), else None
    adapter: ScaleAdapter | None
    tuner: ESJDTuner
    #: where chains start: ``"laplace"`` or ``"pymc"``
    init: str
    #: PyMC's start without user initial values (to spot ``initvals``), for ``init="laplace"``
    pymc_default_start: np.ndarray | None
    #: seconds per setup phase and ``full_data_passes``
    setup_profile: dict

    def laplace_draw(self, rng: np.random.Generator, fallback: np.ndarray) -> np.ndarray:
        """A draw from the Laplace approximation where the prior density is positive (a
        Potential or a bounded prior may cut the Gaussian); ``fallback`` after 100 tries."""
        for _ in range(100):
            theta = self.frame.unwhiten(self.laplace_centre
                                        + rng.standard_normal(self.likelihood.dim))
            if np.isfinite(self.likelihood.logp0(theta)):
                return theta
        return fallback

    def row_differences(
        self, theta: np.ndarray, theta_new: np.ndarray, finite: Callable[[Any], np.ndarray]
    ) -> tuple[float, Callable[[np.ndarray], np.ndarray]]:
        """The per-row population a kernel reads for ``θ → θ'``, and its data-free part.

        With control variates: ``(Σ r̂_i, idx ↦ ξ_i)``, the estimate from ``G`` and ``H`` and
        the remainders; without: ``(0, idx ↦ ℓ_i(θ') − ℓ_i(θ))``. Either way the rows' values
        pass through ``finite`` (the step's non-finite policy).
        """
        cv = self.control_variate
        if cv is None:
            diff = self.likelihood.loglik_diff
            return 0.0, lambda idx: finite(diff(theta, theta_new, idx))
        return cv.estimate_sum(theta, theta_new), lambda idx: finite(
            cv.remainder(theta, theta_new, idx))


def default_data_pass(lik: SubsampledLikelihood, cv_order: int | None) -> DataPass:
    """The pass over the data for the reference fit: the GLM pass when the model is one."""
    try:
        return GLMPass(lik)
    except SubsamplingModelError:
        # only the order-2 control variates need Σ H_i exact; the Laplace frame and
        # Newton's method do with differences of the gradient, much cheaper to compile
        try:
            return GenericPass(lik, exact_hessian=cv_order == 2)
        except MethodNotDefined as err:  # an op on the gradient's path has no gradient
            raise_no_second_derivative(lik, err)


#: Private: make :func:`glm_data_pass` read every model with the automatic bound, to compare
#: it with the hand-derived one (``benchmarks/automatic_bounds.py``); never set by the package.
_AUTOMATIC_ONLY = False


def glm_data_pass(lik: SubsampledLikelihood, cv_order: int | None = None) -> DataPass:
    """The pass of a model MHSS bounds itself: a GLM, its detection naming what is missing."""
    if _AUTOMATIC_ONLY:  # benchmarks: the automatic bound where a hand-derived one applies
        return LocationScalePass(lik, detect_predictor_terms(lik, cv_order or 2))
    terms = detect_location_scale_terms(lik)
    if terms:
        return LocationScalePass(lik, terms)
    try:
        data_pass = GLMPass(lik)
    except SubsamplingModelError as hand_derived:
        # no hand-derived family reads the model: the bound from its own graph, or the
        # refusal that says why not (the hand-derived detection's when it names a family link)
        try:
            return LocationScalePass(lik, detect_predictor_terms(lik, cv_order or 2))
        except SubsamplingModelError as automatic:
            raise automatic from hand_derived
    data_pass.check_curvature_size()
    return data_pass


def check_proposal_knobs(proposal: str, scaling: float | None, df: float | None) -> None:
    """Refuse a bad ``scaling``/``df`` before any work on the data, naming the knob."""
    try:
        make_proposal(proposal, 2, parameter=scaling, df=df)
    except ValueError as err:
        meaning = {"pcn": "ρ, in [0, 1)", "independence": "the scale s > 0",
                   "random_walk": "κ > 0"}[proposal]
        raise ValueError(
            f"scaling={scaling!r}, df={df!r} do not fit proposal={proposal!r} ({err}). For this "
            f"proposal scaling is {meaning}; leave it None to let tuning choose, or pick "
            f"another proposal (one of {PROPOSALS})."
        ) from None


def default_start(model: pm.Model, user_vars: Sequence,
                  initial_point: dict | None = None) -> np.ndarray:
    """PyMC's initial point without any initial value a user set (``θ`` of the support
    points). A chain handed another start point was given ``initvals`` (in ``pm.sample``
    or on a variable), and ``init="laplace"`` keeps it. ``initial_point``, the model's own
    ``model.initial_point()`` when the caller has it, saves compiling PyMC's function again."""
    if all(model.rvs_to_initial_values.get(rv) is None for rv in model.free_RVs):
        point = model.initial_point() if initial_point is None else initial_point
    else:
        overrides = {rv: None for rv in model.free_RVs}
        point = make_initial_point_fn(model=model, overrides=overrides)(0)
    return np.concatenate([np.ravel(point[v.name]) for v in user_vars]).astype(np.float64)


def _check_arguments(cv_order, proposal, scaling, init) -> int | None:
    if cv_order is not None:
        cv_order = validate_cv_order(cv_order)
    if proposal not in PROPOSALS:
        raise ValueError(f"proposal must be one of {PROPOSALS}; got {proposal!r}")
    if scaling is not None and not np.isfinite(scaling):
        raise ValueError(f"scaling must be a positive number; got {scaling!r}")
    if init not in ("laplace", "pymc"):
        raise ValueError(f'init must be "laplace" or "pymc"; got {init!r}')
    return cv_order


def _target_accept(proposal, target_accept, default) -> float | None:
    """The acceptance rate the random walk is tuned toward, or None for ESJD tuning."""
    target = default if target_accept is None else target_accept
    if target is not None and proposal != "random_walk":
        if target_accept is not None:
            raise ValueError(
                "target_accept only applies to the random walk (and Langevin) proposals; "
                f"the {proposal} proposal is tuned by jump distance per cost"
            )
        return None
    return None if target is None else float(target)


def _user_covariance(proposal_cov, dim: int) -> np.ndarray | None:
    if proposal_cov is None:
        return None
    cov = np.atleast_2d(np.asarray(proposal_cov, dtype=np.float64))
    if cov.shape != (dim, dim):
        raise ValueError(
            f"proposal_cov has shape {np.shape(proposal_cov)} but the model has {dim} "
            "sampled coordinates (the raveled free variables)"
        )
    cholesky_factor(cov)  # a clear error for a covariance that is not one
    return cov


def build_setup(
    vars: Sequence | None = None,
    *,
    model: pm.Model | None = None,
    cv_order: int | None = None,
    temperature: float = 1.0,
    proposal: str = "random_walk",
    map_point: dict[str, Any] | None = None,
    proposal_cov: np.ndarray | None = None,
    scaling: float | None = None,
    df: float | None = None,
    target_accept: float | None = None,
    default_target_accept: float | None = None,
    row_cost: float = 50.0,
    init: str = "laplace",
    map_tolerance: float = MODE_TOLERANCE,
    compile_kwargs: dict | None = None,
    needs_reference_point: bool = False,
    data_pass: Callable[[SubsampledLikelihood, int | None], DataPass] = default_data_pass,
    bound_order: int | None = None,
) -> Setup:
    """Build everything a step needs from ``model`` (arguments as
    :class:`~pymc_subsample.steps.base.SubsamplingStep`'s, and the step class's
    ``default_target_accept``, ``needs_reference_point``); ``data_pass`` makes the reference
    fit's pass; ``bound_order`` is the Taylor order of the row constants it computes, if any."""
    # one BLAS thread for the setup passes: their products are thin (chunk × d) and a
    # threaded BLAS on a busy machine, or under pm.sample(cores>1), is up to 50× slower.
    # No creation stack kept on the graph nodes the setup makes (derivative graphs, the
    # rewrites of compiling): walking the stack for each of them was about a third of
    # building an ordinal probit's derivatives, and they point into this package anyway
    with threadpool_limits(limits=1, user_api="blas"), \
            pytensor.config.change_flags(traceback__limit=0):
        return _build(vars, model, cv_order, temperature, proposal, map_point, proposal_cov,
                      scaling, df, target_accept, default_target_accept, row_cost, init,
                      map_tolerance, compile_kwargs, needs_reference_point, data_pass,
                      bound_order)


def _build(vars, model, cv_order, temperature, proposal, map_point, proposal_cov, scaling, df,
           target_accept, default_target_accept, row_cost, init, map_tolerance, compile_kwargs,
           needs_reference_point, data_pass, bound_order) -> Setup:
    t_start = time.perf_counter()
    model = pm.modelcontext(model)
    cv_order = _check_arguments(cv_order, proposal, scaling, init)
    if vars is not None:
        vars = pm.util.get_value_vars_from_user_vars(vars, model)
    check_proposal_knobs(proposal, scaling, df)
    user_vars = SubsampledLikelihood.check_vars(model, vars)
    centring = centred_twin(model, user_vars)
    model_sampled = model
    if centring is not None:
        model_sampled = centring.model
        if map_point is not None:
            map_point = centring.point_to_twin(map_point)
    with build_phase("reading the model"):
        lik = SubsampledLikelihood(model_sampled, temperature=temperature,
                                   compile_kwargs=compile_kwargs)
    profile = {"likelihood_s": time.perf_counter() - t_start}

    cov = _user_covariance(proposal_cov, lik.dim)
    needs_reference = (cv_order is not None or cov is None or proposal != "random_walk"
                       or needs_reference_point)
    reference = reference_pass = theta_hat = None
    if needs_reference:
        t0 = time.perf_counter()
        with build_phase("compiling the data pass"):
            reference_pass = data_pass(lik, cv_order)
        profile["pass_compile_s"] = time.perf_counter() - t0
        with build_phase("reference point"):
            reference = fit_reference(lik, reference_pass, map_point=map_point,
                                      order=bound_order, tolerance=map_tolerance)
        build_note("reference point", f"{reference.full_data_passes} passes over "
                                      f"{lik.n_rows:,} rows")
        profile.update(reference.profile)
        frame = reference.frame
        theta_hat = frame.theta_hat
    else:
        # no reference point needed: a frame whose whitening is the user's covariance
        frame = LaplaceFrame.from_covariance(lik.ravel(lik.initial_point), cov)
    t0 = time.perf_counter()
    control_variate = None
    if cv_order is not None:
        with build_phase("control variates"):
            control_variate = TaylorControlVariate(
                lik, theta_hat, cv_order,
                sums=(reference.loglik, reference.grad_sum, reference.hess_sum),
                glm_terms=reference_pass.terms,
            )
    profile["control_variate_s"] = time.perf_counter() - t0
    # the user's random-walk covariance in whitened coordinates: Δφ = RᵀΔθ
    cov_phi = None
    if cov is not None:
        r = frame.chol_precision
        cov_phi = r.T @ cov @ r
    # the Laplace mode in the frame: θ̂ is a mode only to within map_tolerance sds
    laplace_centre = frame.whiten(reference.mode) if reference is not None else np.zeros(lik.dim)
    made = make_proposal(
        proposal, lik.dim, cov=cov_phi, parameter=scaling, df=df,
        centre=None if proposal == "random_walk" else laplace_centre,
    )
    target = _target_accept(proposal, target_accept, default_target_accept)
    init = init if reference is not None else "pymc"
    # only init="laplace" asks where PyMC would start a chain (to spot user initvals)
    pymc_start = None
    if init == "laplace":
        pymc_start = default_start(model, user_vars,
                                   lik.initial_point if centring is None else None)
    for _, source in lik.gathered.values():
        source.finish_finite_check()  # the blocks no pass read (all of them if none ran)
    profile["setup_s"] = time.perf_counter() - t_start
    profile["full_data_passes"] = reference.full_data_passes if reference else 0
    _log.debug("setup: %s", profile)
    return Setup(
        user_vars=user_vars, centring=centring, likelihood=lik, cv_order=cv_order,
        reference=reference, reference_pass=reference_pass, frame=frame, theta_hat=theta_hat,
        control_variate=control_variate, laplace_centre=laplace_centre, proposal=made,
        proposal_kind=proposal,
        target_accept=target, adapter=ScaleAdapter(target) if target is not None else None,
        tuner=ESJDTuner(made.candidates, row_cost, min_accept=made.min_accept),
        init=init, pymc_default_start=pymc_start, setup_profile=profile,
    )
