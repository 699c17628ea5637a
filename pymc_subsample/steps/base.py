"""What every subsampling step shares: model analysis, reference point, proposal, tuning, RNG.

A subclass implements :meth:`SubsamplingStep._decide`, which calls one of the pure acceptance
kernels (:mod:`pymc_subsample.kernels.mhss`, :mod:`~pymc_subsample.kernels.austerity`,
:mod:`~pymc_subsample.kernels.barker`) and returns the decision and the stats declared in its
``stats_dtypes_shapes``. Everything the kernels need from the model is compiled once here.

The chain moves in the whitened coordinates ``φ = L⁻¹(θ − θ̂)`` of the Laplace frame
(:mod:`pymc_subsample.model.frame`): the proposal acts on ``φ``, the step maps ``φ'`` back to the
``θ'`` PyMC stores, and tuning measures jumps in ``φ``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pymc as pm
from pymc.blocking import RaveledVars, StatsType
from pymc.initial_point import make_initial_point_fn
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import RandomGenerator, RandomGeneratorState, get_random_generator
from rich.progress import TextColumn
from rich.table import Column
from threadpoolctl import threadpool_limits

from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.model.centring import centred_twin
from pymc_subsample.model.control_variates import TaylorControlVariate, validate_cv_order
from pymc_subsample.model.frame import LaplaceFrame
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.model.passes import GenericPass, GLMPass
from pymc_subsample.model.reference import MODE_TOLERANCE, ReferenceFit, fit_reference
from pymc_subsample.proposals.proposal import PROPOSALS, cholesky_factor, make_proposal
from pymc_subsample.proposals.tuning import ESJDTuner, ScaleAdapter

__all__ = ["SubsamplingStep", "SubsamplingStepState"]

_log = logging.getLogger("pymc_subsample")


@dataclass_state
class SubsamplingStepState(StepMethodState):
    proposal_parameter: float
    tune: bool
    chain_started: bool
    tuner_iteration: int
    tuner_jumps: np.ndarray
    tuner_costs: np.ndarray
    tuner_accepts: np.ndarray
    adapter_iteration: int
    rng_proposal: RandomGeneratorState
    rng_index: RandomGeneratorState
    rng_accept: RandomGeneratorState


def _check_proposal_knobs(proposal: str, scaling: float | None, df: float | None) -> None:
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


class SubsamplingStep(ArrayStepShared):
    """Base class of the subsampling Metropolis–Hastings steps (not used directly).

    Parameters
    ----------
    vars : list, optional
        Value variables to sample; must be all free variables of the model (the default).
    cv_order : {None, 1, 2}
        Order of the Taylor control variates at ``map_point``; ``None`` for none.
    temperature : float
        ``K > 0``; the likelihood is divided by ``K``.
    proposal : {"pcn", "independence", "random_walk"}
        The proposal, in the whitened Laplace frame (:mod:`pymc_subsample.proposals.proposal`). The
        default is the class's :attr:`default_proposal`.
    map_point : dict, optional
        Reference point ``θ̂`` (a PyMC point). Found by Newton's method on the full data when
        not given; a given point is checked (and refined if it is not a mode,
        :mod:`pymc_subsample.model.reference`).
    proposal_cov : array, optional
        Random walk only: the covariance of the step in ``θ``, used as given (scale 1). By
        default the Laplace covariance scaled by ``κ/√d``. With non-centred effects
        (:attr:`centring`) ``θ`` holds ``u = s·z`` in place of ``z``.
    scaling : float, optional
        Initial value of the proposal's parameter: ``κ`` for the random walk (default 1.5,
        Prado et al. 2024, Sec. 4.4), ``ρ`` for pCN (0.5), ``s`` for the independence proposal
        (1.0). Tuning replaces it unless ``tune=False``.
    df : float, optional
        Independence proposal only: degrees of freedom of a multivariate t proposal.
    target_accept : float, optional
        Tune the random walk's ``κ`` toward this acceptance rate (Robbins–Monro) instead of
        choosing the parameter by jump distance per cost
        (:class:`~pymc_subsample.proposals.tuning.ESJDTuner`).
    tune : bool
        Tune the proposal's parameter during PyMC's tuning phase (frozen afterwards).
    row_cost : float
        For tuning: rows read that cost as much as one iteration's fixed overhead.
    init : {"laplace", "pymc"}
        Where each chain starts. ``"laplace"`` (default, when a reference point exists): a draw
        from the Laplace approximation ``N(θ*, V)`` (redrawn where the prior density is zero),
        like NUTS's jittered initialisation;
        PyMC's own initial point is often so far from the posterior of tall data that the
        first thousands of iterations would read all rows. A chain given ``initvals`` (in
        ``pm.sample`` or as a variable's ``initval``) starts there all the same. ``"pymc"``:
        always PyMC's initial point.
    map_tolerance : float
        Newton distance (posterior standard deviations) below which ``θ̂`` counts as a mode.
    compile_kwargs : dict, optional
        Passed to PyTensor compilation, e.g. ``{"mode": "NUMBA"}``.
    model : pymc.Model, optional
    rng : RandomGenerator, optional
        Seed or generator; ``pm.sample(random_seed=...)`` replaces it per chain.
    blocked, initial_point
        Accepted for PyMC's step protocol; the step always samples all variables as one block
        and starts chains as ``init`` says.

    Attributes
    ----------
    frame : LaplaceFrame
        ``θ̂`` and the whitening of the chain's coordinates.
    reference : ReferenceFit or None
        How ``θ̂`` was found: full-data passes, Newton distance, sums.
    setup_profile : dict
        Seconds per setup phase and ``full_data_passes``, the passes over all N rows made
        while building the step.
    """

    name = "subsampling"
    default_blocked = True
    default_target_accept: float | None = None
    default_proposal = "random_walk"
    needs_reference_point = False
    _state_class = SubsamplingStepState

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        cv_order: int | None = None,
        temperature: float = 1.0,
        proposal: str | None = None,
        map_point: dict[str, Any] | None = None,
        proposal_cov: np.ndarray | None = None,
        scaling: float | None = None,
        df: float | None = None,
        target_accept: float | None = None,
        tune: bool = True,
        row_cost: float = 50.0,
        init: str = "laplace",
        map_tolerance: float = MODE_TOLERANCE,
        compile_kwargs: dict | None = None,
        model: pm.Model | None = None,
        rng: RandomGenerator = None,
        blocked: bool = True,
        initial_point: dict | None = None,
    ) -> None:
        # one BLAS thread for the setup passes: their products are thin (chunk × d) and a
        # threaded BLAS on a busy machine, or under pm.sample(cores>1), is up to 50× slower
        with threadpool_limits(limits=1, user_api="blas"):
            self._build(
                vars, cv_order=cv_order, temperature=temperature, proposal=proposal,
                map_point=map_point, proposal_cov=proposal_cov, scaling=scaling, df=df,
                target_accept=target_accept, tune=tune, row_cost=row_cost, init=init,
                map_tolerance=map_tolerance, compile_kwargs=compile_kwargs, model=model,
            )
        super().__init__(self.user_vars, {}, blocked=blocked, rng=rng)
        self.set_rng(self.rng)

    def _build(
        self, vars, *, cv_order, temperature, proposal, map_point, proposal_cov, scaling, df,
        target_accept, tune, row_cost, init, map_tolerance, compile_kwargs, model,
    ) -> None:
        t_start = time.perf_counter()
        model = pm.modelcontext(model)
        if cv_order is not None:
            cv_order = validate_cv_order(cv_order)
        proposal = self.default_proposal if proposal is None else proposal
        if proposal not in PROPOSALS:
            raise ValueError(f"proposal must be one of {PROPOSALS}; got {proposal!r}")
        if scaling is not None and not np.isfinite(scaling):
            raise ValueError(f"scaling must be a positive number; got {scaling!r}")
        if init not in ("laplace", "pymc"):
            raise ValueError(f'init must be "laplace" or "pymc"; got {init!r}')
        if vars is not None:
            vars = pm.util.get_value_vars_from_user_vars(vars, model)
        _check_proposal_knobs(proposal, scaling, df)
        #: the value variables PyMC hands this step, in the order of its raveled points
        self.user_vars = SubsampledLikelihood.check_vars(model, vars)
        #: non-centred effects s * z[g] run as u = s·z (None when the model has none)
        self.centring = centred_twin(model, self.user_vars)
        if self.centring is not None:
            model_sampled = self.centring.model
            if map_point is not None:
                map_point = self.centring.point_to_twin(map_point)
        else:
            model_sampled = model
        self.likelihood = lik = SubsampledLikelihood(
            model_sampled, temperature=temperature, compile_kwargs=compile_kwargs
        )
        self.n_rows = lik.n_rows
        self.cv_order = cv_order
        profile = {"likelihood_s": time.perf_counter() - t_start}

        cov = None
        if proposal_cov is not None:
            cov = np.atleast_2d(np.asarray(proposal_cov, dtype=np.float64))
            if cov.shape != (lik.dim, lik.dim):
                raise ValueError(
                    f"proposal_cov has shape {np.shape(proposal_cov)} but the model has {lik.dim} "
                    "sampled coordinates (the raveled free variables)"
                )
            cholesky_factor(cov)  # a clear error for a covariance that is not one
        needs_reference = (
            cv_order is not None
            or cov is None
            or proposal != "random_walk"
            or self.needs_reference_point
        )
        self.reference: ReferenceFit | None = None
        self._reference_pass = None
        if needs_reference:
            t0 = time.perf_counter()
            data_pass = self._reference_pass = self._data_pass()
            profile["pass_compile_s"] = time.perf_counter() - t0
            self.reference = fit_reference(
                lik,
                data_pass,
                map_point=map_point,
                order=self._bound_order(),
                tolerance=map_tolerance,
            )
            profile.update(self.reference.profile)
            self.frame = self.reference.frame
            self.theta_hat = self.frame.theta_hat
        else:
            # no reference point needed: a frame whose whitening is the user's covariance
            self.frame = LaplaceFrame.from_covariance(lik.ravel(lik.initial_point), cov)
            self.theta_hat = None
        t0 = time.perf_counter()
        self.control_variate = (
            TaylorControlVariate(
                lik,
                self.theta_hat,
                cv_order,
                sums=(self.reference.loglik, self.reference.grad_sum, self.reference.hess_sum),
                glm_terms=self._reference_pass.terms,
            )
            if cv_order is not None
            else None
        )
        profile["control_variate_s"] = time.perf_counter() - t0
        # the user's random-walk covariance in whitened coordinates: Δφ = RᵀΔθ
        r = self.frame.chol_precision
        cov_phi = None if cov is None else r.T @ cov @ r
        # the Laplace mode in the frame: θ̂ is a mode only to within map_tolerance sds
        self.laplace_centre = (
            self.frame.whiten(self.reference.mode) if self.reference is not None
            else np.zeros(lik.dim)
        )
        self.proposal = make_proposal(
            proposal, lik.dim, cov=cov_phi, parameter=scaling, df=df,
            centre=None if proposal == "random_walk" else self.laplace_centre,
        )
        self.proposal_kind = proposal
        self._initial_parameter = self.proposal.parameter
        target = self.default_target_accept if target_accept is None else target_accept
        if target is not None and proposal not in ("random_walk",):
            if target_accept is not None:
                raise ValueError(
                    "target_accept only applies to the random walk (and Langevin) proposals; "
                    f"the {proposal} proposal is tuned by jump distance per cost"
                )
            target = None
        self.target_accept = None if target is None else float(target)
        self._adapter = ScaleAdapter(self.target_accept) if target is not None else None
        self._tuner = ESJDTuner(self.proposal.candidates, row_cost,
                                 min_accept=self.proposal.min_accept)
        self.tune = bool(tune)
        self._adapt = bool(tune)
        self._cached_theta: np.ndarray | None = None
        self._cached_phi: np.ndarray | None = None
        self._cached_logp0 = 0.0
        self._last_returned: tuple[np.ndarray, np.ndarray] | None = None
        self._non_finite = False
        self.init = init if self.reference is not None else "pymc"
        # only init="laplace" asks where PyMC would start a chain (to spot user initvals)
        self._pymc_default_start = self._default_start(model) if self.init == "laplace" else None
        self.chain_started = False
        profile["setup_s"] = time.perf_counter() - t_start
        profile["full_data_passes"] = self.reference.full_data_passes if self.reference else 0
        self.setup_profile = profile
        _log.debug("setup: %s", profile)

    # ------------------------------------------------------------------ setup hooks
    def _data_pass(self):
        """The pass over the data for the reference fit: the GLM pass when the model is one."""
        try:
            return GLMPass(self.likelihood)
        except SubsamplingModelError:
            # only the order-2 control variates need Σ H_i exact; the Laplace frame and
            # Newton's method do with differences of the gradient, much cheaper to compile
            return GenericPass(self.likelihood, exact_hessian=self.cv_order == 2)

    def _default_start(self, model: pm.Model) -> np.ndarray:
        """PyMC's initial point without any initial value a user set (``θ`` of the support
        points). A chain handed another start point was given ``initvals`` (in ``pm.sample``
        or on a variable), and ``init="laplace"`` keeps it."""
        if all(model.rvs_to_initial_values.get(rv) is None for rv in model.free_RVs):
            point = model.initial_point()
        else:
            overrides = {rv: None for rv in model.free_RVs}
            point = make_initial_point_fn(model=model, overrides=overrides)(0)
        return np.concatenate([np.ravel(point[v.name]) for v in self.user_vars]).astype(
            np.float64)

    def _bound_order(self) -> int | None:
        """Taylor order of the whitened row constants the reference fit should compute."""
        return None

    # ------------------------------------------------------------------ PyMC protocol
    def set_rng(self, rng: RandomGenerator) -> None:
        """Start a chain: one generator split into proposal/index/accept streams, fresh tuning.

        PyMC calls this at the start of every chain, in the sequential and the multiprocess
        paths alike; only the sequential one also calls :meth:`reset_tuning`, so the tuning
        state is reset here too, and a reused step behaves the same with ``cores > 1``.
        """
        self.rng = get_random_generator(rng, copy=False)
        self.rng_proposal, self.rng_index, self.rng_accept = self.rng.spawn(3)
        self.tune = self._adapt
        self.reset_tuning()
        self.chain_started = False
        self._cached_theta = None

    @property
    def proposal_parameter(self) -> float:
        """The proposal's tuned parameter: ``κ`` (random walk), ``ρ`` (pCN) or ``s``."""
        return self.proposal.parameter

    @proposal_parameter.setter
    def proposal_parameter(self, value: float) -> None:
        self.proposal.parameter = value

    @property
    def scale(self) -> float:
        return self.proposal.scale

    @property
    def kappa(self) -> float:
        """The proposal's parameter (``κ`` for the random walk)."""
        return self.proposal.parameter

    # tuner and adapter state, mirrored into the sampling state
    @property
    def tuner_iteration(self) -> int:
        return self._tuner.iteration

    @tuner_iteration.setter
    def tuner_iteration(self, value: int) -> None:
        self._tuner.iteration = int(value)

    @property
    def tuner_jumps(self) -> np.ndarray:
        return self._tuner.jumps

    @tuner_jumps.setter
    def tuner_jumps(self, value: np.ndarray) -> None:
        self._tuner.jumps = np.array(value, dtype=np.float64)

    @property
    def tuner_costs(self) -> np.ndarray:
        return self._tuner.costs

    @tuner_costs.setter
    def tuner_costs(self, value: np.ndarray) -> None:
        self._tuner.costs = np.array(value, dtype=np.float64)

    @property
    def tuner_accepts(self) -> np.ndarray:
        return self._tuner.accepts

    @tuner_accepts.setter
    def tuner_accepts(self, value: np.ndarray) -> None:
        self._tuner.accepts = np.array(value, dtype=np.float64)

    @property
    def adapter_iteration(self) -> int:
        return self._adapter.iteration if self._adapter is not None else 0

    @adapter_iteration.setter
    def adapter_iteration(self, value: int) -> None:
        if self._adapter is not None:
            self._adapter.iteration = int(value)

    def reset_tuning(self) -> None:
        """Restore the untuned parameter (PyMC calls this before each chain)."""
        self.proposal.parameter = self._initial_parameter
        self._tuner.reset()
        if self._adapter is not None:
            self._adapter.reset()

    def stop_tuning(self) -> None:
        """End of PyMC's tuning phase: freeze the proposal's parameter."""
        if self.tune and self._adapt and self._adapter is None:
            self.proposal.parameter = self._tuner.best(default=self._initial_parameter)
        self.tune = False

    def logp0(self, theta: np.ndarray) -> float:
        """``log p0(θ)``, cached for the current state so each iteration evaluates it once."""
        if self._cached_theta is not None and np.array_equal(theta, self._cached_theta):
            return self._cached_logp0
        value = self.likelihood.logp0(theta)
        self._cached_theta, self._cached_phi, self._cached_logp0 = theta.copy(), None, value
        return value

    def _laplace_start(self, pymc_start: np.ndarray) -> np.ndarray:
        """A draw from the Laplace approximation where the prior density is positive (a
        Potential or a bounded prior may cut the Gaussian); PyMC's start after 100 tries."""
        for _ in range(100):
            phi = self.laplace_centre + self.rng_proposal.standard_normal(self.likelihood.dim)
            theta = self.frame.unwhiten(phi)
            if np.isfinite(self.likelihood.logp0(theta)):
                return theta
        return pymc_start

    def _finite_or_reject(self, values: np.ndarray) -> np.ndarray:
        """Row terms for a kernel, NaN read as ``-inf`` (zero density: the proposal is
        rejected); any non-finite value is noted for the ``non_finite`` stat."""
        values = np.asarray(values)
        if not np.all(np.isfinite(values)):
            self._non_finite = True
            values = np.where(np.isnan(values), -np.inf, values)
        return values

    def _row_differences(
        self, theta: np.ndarray, theta_new: np.ndarray
    ) -> tuple[float, Callable[[np.ndarray], np.ndarray]]:
        """The per-row population a kernel reads for ``θ → θ'``, and its data-free part.

        With control variates: ``(Σ r̂_i, idx ↦ ξ_i)``, the estimate from ``G`` and ``H`` and
        the remainders; without: ``(0, idx ↦ ℓ_i(θ') − ℓ_i(θ))``. Either way the rows' values
        pass through :meth:`_finite_or_reject`.
        """
        cv = self.control_variate
        if cv is None:
            diff = self.likelihood.loglik_diff
            return 0.0, lambda idx: self._finite_or_reject(diff(theta, theta_new, idx))
        return cv.estimate_sum(theta, theta_new), lambda idx: self._finite_or_reject(
            cv.remainder(theta, theta_new, idx))

    def _phi(self, theta: np.ndarray) -> np.ndarray:
        if self._cached_phi is None or not np.array_equal(theta, self._cached_theta):
            self._cached_phi = self.frame.whiten(theta)
        return self._cached_phi

    def _sampled(self, q: np.ndarray) -> np.ndarray:
        """``θ`` in the sampled coordinates from PyMC's point ``q`` (the same but for
        non-centred effects); the state this step returned last maps back exactly."""
        if self.centring is None:
            return q
        if self._last_returned is not None and np.array_equal(q, self._last_returned[0]):
            return self._last_returned[1]
        return self.centring.to_twin(q)

    def _returned(self, theta: np.ndarray) -> np.ndarray:
        """PyMC's point for ``θ`` in the sampled coordinates."""
        if self.centring is None:
            return theta
        q = self.centring.to_user(theta)
        self._last_returned = (q, theta)
        return q

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, StatsType]:
        theta = self._sampled(q0.data)
        if not self.chain_started:
            self.likelihood.check_data_unchanged()
            self.chain_started = True
            if self.init == "laplace" and np.allclose(q0.data, self._pymc_default_start,
                                                      rtol=1e-6, atol=1e-12):
                theta = self._laplace_start(theta)
        esjd_tuning = self.tune and self._adapt and self._adapter is None
        if esjd_tuning:
            self.proposal.parameter = self._tuner.current()
        logp0_cur = self.logp0(theta)
        phi = self._phi(theta)
        phi_new, log_q_ratio = self.proposal.propose(self.rng_proposal, phi)
        theta_new = self.frame.unwhiten(phi_new)
        logp0_new = self.likelihood.logp0(theta_new)
        log_rest = logp0_new - logp0_cur + log_q_ratio
        # one policy for all steps: a NaN or infinite prior, proposal or row term rejects the
        # proposal (the kernels read NaN as zero density) and is counted in `non_finite`
        self._non_finite = not np.isfinite(log_rest)
        if np.isnan(log_rest):
            log_rest = -np.inf
        accepted, stats = self._decide(theta, theta_new, log_rest, phi, phi_new)
        stats["non_finite"] = self._non_finite
        if accepted:
            self._cached_theta, self._cached_phi = theta_new, phi_new
            self._cached_logp0 = logp0_new
        if esjd_tuning:
            jump = phi_new - phi
            self._tuner.record(float(jump @ jump) if accepted else 0.0, stats["n_data"],
                               accepted)
        elif self.tune and self._adapt:
            self.proposal.parameter = self._adapter.update(self.proposal.parameter, accepted)
        stats["accepted"] = accepted
        stats["scaling"] = self.proposal.parameter
        return RaveledVars(self._returned(theta_new if accepted else theta),
                           q0.point_map_info), [stats]

    def _decide(
        self,
        theta: np.ndarray,
        theta_new: np.ndarray,
        log_rest: float,
        phi: np.ndarray,
        phi_new: np.ndarray,
    ) -> tuple[bool, dict[str, Any]]:
        """Accept or reject ``θ → θ'``; ``log_rest = log p0 ratio + log q ratio``.

        ``φ``, ``φ'`` are the same points in the whitened frame.
        """
        raise NotImplementedError

    @staticmethod
    def competence(var, has_grad):
        # Usable for any continuous variable, but never chosen automatically over NUTS.
        if var.dtype in pm.discrete_types:
            return Competence.INCOMPATIBLE
        return Competence.COMPATIBLE

    # ------------------------------------------------------------------ progress bar
    #: Per-draw stats shown as moving averages: (progress field, sampler stat, column title).
    _progress_averages: tuple[tuple[str, str, str], ...] = (
        ("accept_rate", "accepted", "Accept"),
        ("rows", "n_data", "Rows/draw"),
    )

    @classmethod
    def _progressbar_config(cls, n_chains=1):
        columns = [
            TextColumn(f"{{task.fields[{field}]:0.{2 if field != 'rows' else 1}f}}",
                       table_column=Column(title, ratio=1))
            for field, _, title in cls._progress_averages
        ]
        columns.append(
            TextColumn("{task.fields[scaling]:0.2f}", table_column=Column("Scaling", ratio=1))
        )
        stats = {field: [0.0] * n_chains for field, _, _ in cls._progress_averages}
        stats["scaling"] = [0.0] * n_chains
        return columns, stats

    @classmethod
    def _make_progressbar_update_functions(cls):
        # Exponential moving averages: a readable, current picture of a noisy per-draw stat.
        averages = cls._progress_averages
        ema = {field: None for field, _, _ in averages}

        def update_stats(step_stats):
            for field, stat, _ in averages:
                value = float(step_stats[stat])
                ema[field] = value if ema[field] is None else 0.99 * ema[field] + 0.01 * value
            return {**ema, "scaling": step_stats["scaling"]}

        return (update_stats,)
