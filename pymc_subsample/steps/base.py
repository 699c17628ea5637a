"""What every subsampling step shares: model analysis, reference point, proposal, tuning, RNG.

A subclass implements :meth:`SubsamplingStep._decide`, which calls one of the pure acceptance
kernels (:mod:`pymc_subsample.mhss`, :mod:`~pymc_subsample.austerity`,
:mod:`~pymc_subsample.barker`) and returns the decision and the stats declared in its
``stats_dtypes_shapes``. Everything the kernels need from the model is compiled once here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pymc as pm
from pymc.blocking import RaveledVars, StatsType
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import RandomGenerator, RandomGeneratorState, get_random_generator
from pytensor.gradient import grad, jacobian
from rich.progress import TextColumn
from rich.table import Column

from pymc_subsample.control_variates import (
    TaylorControlVariate,
    loglik_sums,
    validate_cv_order,
)
from pymc_subsample.likelihood import SubsampledLikelihood
from pymc_subsample.proposals import RandomWalkProposal, laplace_covariance
from pymc_subsample.tuning import ScaleAdapter

__all__ = ["SubsamplingStep", "SubsamplingStepState"]

_log = logging.getLogger("pymc_subsample")


@dataclass_state
class SubsamplingStepState(StepMethodState):
    scale: float
    tune: bool
    adapter_iteration: int
    rng_proposal: RandomGeneratorState
    rng_index: RandomGeneratorState
    rng_accept: RandomGeneratorState


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
    map_point : dict, optional
        Reference point ``θ̂`` (a PyMC point, e.g. from ``pm.find_MAP()``). Computed with
        ``pm.find_MAP`` on the full data when needed and not given.
    proposal_cov : array, optional
        Covariance of the random-walk step, used as given (scale 1, tuned if ``tune``). By
        default the Laplace covariance at ``θ̂`` scaled by ``κ/√d``.
    scaling : float
        ``κ`` for the Laplace proposal (default 1.5, Prado et al. 2024, Sec. 4.4); ignored when
        ``proposal_cov`` is given.
    target_accept : float, optional
        Acceptance rate the scale is tuned toward during PyMC's tuning phase.
    tune : bool
        Adapt the scale during tuning.
    init : {"laplace", "pymc"}
        Where each chain starts. ``"laplace"`` (default, when a reference point exists): a draw
        from the Laplace approximation ``N(θ̂, V)`` (``V`` the proposal covariance), like NUTS's
        jittered initialisation; PyMC's own initial point is often so far from the posterior
        of tall data that the first thousands of iterations would read all rows. ``"pymc"``:
        PyMC's initial point (``initvals``).
    compile_kwargs : dict, optional
        Passed to PyTensor compilation, e.g. ``{"mode": "NUMBA"}``.
    model : pymc.Model, optional
    rng : RandomGenerator, optional
        Seed or generator; ``pm.sample(random_seed=...)`` replaces it per chain.
    blocked, initial_point
        Accepted for PyMC's step protocol; the step always samples all variables as one block
        and starts chains as ``init`` says.
    """

    name = "subsampling"
    default_blocked = True
    default_target_accept = 0.45
    needs_reference_point = False
    _state_class = SubsamplingStepState

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        cv_order: int | None = None,
        temperature: float = 1.0,
        map_point: dict[str, Any] | None = None,
        proposal_cov: np.ndarray | None = None,
        scaling: float = 1.5,
        target_accept: float | None = None,
        tune: bool = True,
        init: str = "laplace",
        compile_kwargs: dict | None = None,
        model: pm.Model | None = None,
        rng: RandomGenerator = None,
        blocked: bool = True,
        initial_point: dict | None = None,
    ) -> None:
        model = pm.modelcontext(model)
        if cv_order is not None:
            cv_order = validate_cv_order(cv_order)
        if not np.isfinite(scaling) or scaling <= 0:
            raise ValueError(f"scaling must be a positive number; got {scaling!r}")
        if init not in ("laplace", "pymc"):
            raise ValueError(f'init must be "laplace" or "pymc"; got {init!r}')
        if vars is not None:
            vars = pm.util.get_value_vars_from_user_vars(vars, model)
        self.likelihood = lik = SubsampledLikelihood(
            model, vars, temperature=temperature, compile_kwargs=compile_kwargs
        )
        self.n_rows = lik.n_rows
        self.cv_order = cv_order

        needs_reference = (
            cv_order is not None or proposal_cov is None or self.needs_reference_point
        )
        self.theta_hat = self._reference_point(model, map_point) if needs_reference else None
        self.control_variate = (
            TaylorControlVariate(lik, self.theta_hat, cv_order) if cv_order is not None else None
        )
        if proposal_cov is None:
            self._scale_per_kappa = 1.0 / np.sqrt(lik.dim)
            cov = laplace_covariance(self._negative_hessian())
        else:
            self._scale_per_kappa = 1.0
            cov = proposal_cov
            scaling = 1.0
        self.proposal = RandomWalkProposal(cov, scaling * self._scale_per_kappa)
        if self.proposal.dim != lik.dim:
            raise ValueError(
                f"proposal_cov has shape {np.shape(cov)} but the model has {lik.dim} sampled "
                "coordinates (the raveled free variables)"
            )
        self.target_accept = (
            self.default_target_accept if target_accept is None else float(target_accept)
        )
        self._adapter = ScaleAdapter(self.target_accept)
        self._initial_scale = self.proposal.scale
        self.tune = bool(tune)
        self._adapt = bool(tune)
        self._cached_theta: np.ndarray | None = None
        self._cached_logp0 = 0.0
        self.init = init if self.theta_hat is not None else "pymc"
        self._chain_started = False
        super().__init__(lik.value_vars, {}, blocked=blocked, rng=rng)
        self.set_rng(self.rng)

    # ------------------------------------------------------------------ setup helpers
    def _reference_point(self, model: pm.Model, map_point) -> np.ndarray:
        lik = self.likelihood
        if map_point is None:
            _log.info("Finding the reference point with pm.find_MAP on all %d rows", lik.n_rows)
            map_point = pm.find_MAP(model=model, progressbar=False)
        missing = [name for name, _ in lik._ravel_info if name not in map_point]
        if missing:
            raise ValueError(
                f"map_point lacks the value variables {missing}; pass a full point such as the "
                "output of pm.find_MAP() (it includes the transformed variables)."
            )
        theta_hat = lik.ravel(map_point)
        if not np.all(np.isfinite(theta_hat)):
            raise ValueError("map_point contains NaN or infinite values")
        return theta_hat

    def _negative_hessian(self) -> np.ndarray:
        """``−∇² log π(θ̂)`` with priors and Jacobians included (Laplace, ALGORITHMS.md §0)."""
        lik = self.likelihood
        if self.control_variate is not None:
            hess_lik = self.control_variate.hess_sum
        else:
            hess_lik = loglik_sums(lik, self.theta_hat)[2]
        g0 = grad(lik.logp0_graph, lik.theta)
        hess_prior = lik.compile([lik.theta], jacobian(g0, lik.theta, vectorize=True))
        return -(hess_lik + hess_prior(self.theta_hat))

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
        self._chain_started = False

    @property
    def scale(self) -> float:
        return self.proposal.scale

    @scale.setter
    def scale(self, value: float) -> None:
        self.proposal.scale = float(value)

    @property
    def adapter_iteration(self) -> int:
        return self._adapter.iteration

    @adapter_iteration.setter
    def adapter_iteration(self, value: int) -> None:
        self._adapter.iteration = int(value)

    def reset_tuning(self) -> None:
        """Restore the untuned scale (PyMC calls this before each chain)."""
        self.scale = self._initial_scale
        self._adapter.reset()

    @property
    def kappa(self) -> float:
        """Current ``κ`` (the scale relative to ``1/√d`` for the Laplace proposal)."""
        return self.scale / self._scale_per_kappa

    def logp0(self, theta: np.ndarray) -> float:
        """``log p0(θ)``, cached for the current state so each iteration evaluates it once."""
        if self._cached_theta is not None and np.array_equal(theta, self._cached_theta):
            return self._cached_logp0
        value = self.likelihood.logp0(theta)
        self._cached_theta, self._cached_logp0 = theta.copy(), value
        return value

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, StatsType]:
        theta = q0.data
        if not self._chain_started:
            self._chain_started = True
            if self.init == "laplace":
                z = self.rng_proposal.standard_normal(self.likelihood.dim)
                theta = self.theta_hat + self.proposal.chol @ z
        theta_new, log_q_ratio = self.proposal.propose(self.rng_proposal, theta)
        logp0_cur = self.logp0(theta)
        logp0_new = self.likelihood.logp0(theta_new)
        accepted, stats = self._decide(theta, theta_new, logp0_new - logp0_cur + log_q_ratio)
        if accepted:
            self._cached_theta, self._cached_logp0 = theta_new, logp0_new
        if self.tune and self._adapt:
            self.scale = self._adapter.update(self.scale, accepted)
        stats["accepted"] = accepted
        stats["scaling"] = self.kappa
        return RaveledVars(theta_new if accepted else theta, q0.point_map_info), [stats]

    def _decide(
        self, theta: np.ndarray, theta_new: np.ndarray, log_rest: float
    ) -> tuple[bool, dict[str, Any]]:
        """Accept or reject ``θ → θ'``; ``log_rest = log p0 ratio + log q ratio``."""
        raise NotImplementedError

    @staticmethod
    def competence(var, has_grad):
        # Usable for any continuous variable, but never chosen automatically over NUTS.
        if var.dtype in pm.discrete_types:
            return Competence.INCOMPATIBLE
        return Competence.COMPATIBLE

    # ------------------------------------------------------------------ progress bar
    @staticmethod
    def _progressbar_config(n_chains=1):
        columns = [
            TextColumn("{task.fields[accept_rate]:0.2f}", table_column=Column("Accept", ratio=1)),
            TextColumn("{task.fields[rows]:0.1f}", table_column=Column("Rows/draw", ratio=1)),
            TextColumn("{task.fields[scaling]:0.2f}", table_column=Column("Scaling", ratio=1)),
        ]
        stats = {"accept_rate": [0.0] * n_chains, "rows": [0.0] * n_chains,
                 "scaling": [0.0] * n_chains}
        return columns, stats

    @staticmethod
    def _make_progressbar_update_functions():
        # Exponential moving averages: a readable, current picture of a noisy per-draw stat.
        ema = {"accept_rate": None, "rows": None}

        def update_stats(step_stats):
            for key, value in (("accept_rate", float(step_stats["accepted"])),
                               ("rows", float(step_stats["n_data"]))):
                ema[key] = value if ema[key] is None else 0.99 * ema[key] + 0.01 * value
            return {**ema, "scaling": step_stats["scaling"]}

        return (update_stats,)
