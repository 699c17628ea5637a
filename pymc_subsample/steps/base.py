"""What every subsampling step shares: PyMC's step protocol around one ``_decide``.

A subclass implements :meth:`SubsamplingStep._decide`, which wires a :class:`Move` to one of the
pure acceptance kernels (:mod:`pymc_subsample.kernels`) and returns the decision and its stats.
What the kernels need from the model is built once, by :mod:`pymc_subsample.model.setup`. The
chain moves in the whitened coordinates ``φ = L⁻¹(θ − θ̂)`` of the Laplace frame.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any, NamedTuple

import numpy as np
import pymc as pm
from pymc.blocking import RaveledVars, StatsType
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence
from pymc.util import RandomGenerator, get_random_generator

from pymc_subsample.model.build_progress import BuildProgress
from pymc_subsample.model.reference import MODE_TOLERANCE
from pymc_subsample.model.setup import Setup, build_setup, default_data_pass
from pymc_subsample.steps.coordinates import Coordinates
from pymc_subsample.steps.progress import ProgressBar
from pymc_subsample.steps.state import SubsamplingStepState, TunedProposal

__all__ = ["COMMON_STATS", "Move", "SubsamplingStep", "SubsamplingStepState"]

#: Sampler stats of every step, beside each class's own (``stats_dtypes_shapes``).
COMMON_STATS = {
    "accepted": (bool, []),
    "n_data": (np.int64, []),
    "non_finite": (bool, []),
    "scaling": (np.float64, []),
}

#: Setup fields the step keeps as private attributes (the others under their own names).
_PRIVATE = frozenset({"reference_pass", "adapter", "tuner", "pymc_default_start"})


class Move(NamedTuple):
    """One proposed move, as ``_decide`` reads it: ``θ → θ'``, the same points ``φ``, ``φ'``
    in the whitened frame (None where the step's rates read points of their own: MHSS's
    level moves), and ``log_rest = log p0(θ') − log p0(θ) + log q ratio``."""

    theta: np.ndarray
    theta_new: np.ndarray
    phi: np.ndarray | None
    phi_new: np.ndarray | None
    log_rest: float


class SubsamplingStep(ProgressBar, TunedProposal, Coordinates, ArrayStepShared):
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
    progressbar : bool
        Show the build's phase while it runs (and a bar over the rows of a pass that takes
        more than a second) and one line with its seconds per phase at the end, on standard
        error (:mod:`pymc_subsample.model.build_progress`); ``False``: nothing.
    model : pymc.Model, optional
    rng : RandomGenerator, optional
        Seed or generator; ``pm.sample(random_seed=...)`` replaces it per chain.
    blocked, initial_point
        Accepted for PyMC's step protocol; the step always samples all variables as one block
        and starts chains as ``init`` says.

    Attributes
    ----------
    setup : Setup
        What was read off the model (:class:`~pymc_subsample.model.setup.Setup`); its fields
        are also the step's attributes: ``frame`` (``θ̂`` and the whitening), ``reference``
        (how ``θ̂`` was found), ``setup_profile`` (seconds per phase, ``full_data_passes``), …
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
        progressbar: bool = True,
        model: pm.Model | None = None,
        rng: RandomGenerator = None,
        blocked: bool = True,
        initial_point: dict | None = None,
    ) -> None:
        #: everything read off the model before the first draw (:mod:`pymc_subsample.model.setup`)
        with BuildProgress(type(self).__name__, enabled=progressbar):
            self.setup = build_setup(
                vars, model=model, cv_order=cv_order, temperature=temperature,
                proposal=self.default_proposal if proposal is None else proposal,
                map_point=map_point, proposal_cov=proposal_cov, scaling=scaling, df=df,
                target_accept=target_accept, default_target_accept=self.default_target_accept,
                row_cost=row_cost, init=init, map_tolerance=map_tolerance,
                compile_kwargs=compile_kwargs, needs_reference_point=self.needs_reference_point,
                data_pass=self._data_pass, bound_order=self._bound_order(cv_order),
            )
        for field in fields(Setup):
            name = field.name
            setattr(self, f"_{name}" if name in _PRIVATE else name, getattr(self.setup, name))
        self.n_rows = self.likelihood.n_rows
        self._initial_parameter = self.proposal.parameter
        self.tune = self._adapt = bool(tune)
        self._clear_caches()
        self._non_finite = False
        self.chain_started = False
        super().__init__(self.user_vars, {}, blocked=blocked, rng=rng)
        self.set_rng(self.rng)

    def _data_pass(self, likelihood, cv_order):
        """The pass over the data for the reference fit (the GLM pass when the model is one)."""
        return default_data_pass(likelihood, cv_order)

    def _bound_order(self, cv_order: int | None) -> int | None:
        """Taylor order of the whitened row constants the reference fit should compute."""
        return None

    def set_rng(self, rng: RandomGenerator) -> None:
        """Start a chain: proposal/index/accept streams, fresh tuning. PyMC calls this for
        every chain with any ``cores`` (:meth:`reset_tuning` only sequentially)."""
        self.rng = get_random_generator(rng, copy=False)
        self.rng_proposal, self.rng_index, self.rng_accept = self.rng.spawn(3)
        self.tune = self._adapt
        self.reset_tuning()
        self.chain_started = False
        self._cached_theta = None

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
        """``(data-free part, idx ↦ row values)`` for ``θ → θ'``
        (:meth:`~pymc_subsample.model.setup.Setup.row_differences`), non-finite values noted."""
        return self.setup.row_differences(theta, theta_new, self._finite_or_reject)

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, StatsType]:
        theta = self._sampled(q0.data)
        if not self.chain_started:
            self.likelihood.check_data_unchanged()
            self.chain_started = True
            if self.init == "laplace" and np.allclose(q0.data, self._pymc_default_start,
                                                      rtol=1e-6, atol=1e-12):
                theta = self.setup.laplace_draw(self.rng_proposal, theta)
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
        accepted, stats = self._decide(Move(theta, theta_new, phi, phi_new, log_rest))
        stats["non_finite"] = self._non_finite
        if accepted:
            self._cached_theta, self._cached_phi = theta_new, phi_new
            self._cached_logp0 = logp0_new
        if esjd_tuning:
            self._tuner.record(self._jump_sq(phi, phi_new) if accepted else 0.0,
                               stats["n_data"], accepted)
        elif self.tune and self._adapt:
            self.proposal.parameter = self._adapter.update(self.proposal.parameter, accepted)
        stats["accepted"] = accepted
        stats["scaling"] = self.proposal.parameter
        return RaveledVars(self._returned(theta_new if accepted else theta),
                           q0.point_map_info), [stats]

    def _jump_sq(self, phi: np.ndarray, phi_new: np.ndarray) -> float:
        """The squared jump the tuner credits an accepted move with: ``‖φ' − φ‖²``."""
        jump = phi_new - phi
        return float(jump @ jump)

    def _decide(self, move: Move) -> tuple[bool, dict[str, Any]]:
        """Accept or reject the move; the stats of the class's own ``stats_dtypes_shapes``
        (and ``n_data``)."""
        raise NotImplementedError

    @staticmethod
    def competence(var, has_grad):
        # Usable for any continuous variable, but never chosen automatically over NUTS.
        if var.dtype in pm.discrete_types:
            return Competence.INCOMPATIBLE
        return Competence.COMPATIBLE
