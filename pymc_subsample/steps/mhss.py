"""The ``MHSS`` step: exact subsampling Metropolis–Hastings inside ``pm.sample``."""

from __future__ import annotations

import functools
import logging
import math
import warnings
from typing import Any

import numpy as np
from pymc.blocking import RaveledVars, StatsType
from pymc.step_methods.state import dataclass_state
from threadpoolctl import ThreadpoolController

from pymc_subsample.bounds import (
    LevelBound,
    LevelRows,
    SharedScaleBound,
    SharedScaleRows,
    remainder_scale,
)
from pymc_subsample.bounds.choice import choose_rate_bound
from pymc_subsample.bounds.user import UserBound, check_user_bound, user_row_constants
from pymc_subsample.kernels.indexing import WeightedIndexSampler
from pymc_subsample.kernels.mhss import MHSSInfo, ScalarRates, ThinningRates, mhss_accept
from pymc_subsample.model.level_cubic import LevelCubic, level_cubic
from pymc_subsample.model.level_quartic import level_quartic
from pymc_subsample.model.levels import prior_derivatives, scale_coordinate
from pymc_subsample.model.setup import glm_data_pass
from pymc_subsample.proposals.proposal import BlockProposal, make_proposal
from pymc_subsample.steps.base import COMMON_STATS, Move, SubsamplingStep, SubsamplingStepState
from pymc_subsample.steps.crossed_moves import SecondFactorMoves, crossed_levels
from pymc_subsample.steps.hyper_moves import HyperMove, ScaleMove
from pymc_subsample.steps.level_moves import (
    CollapsedFixedProposal,
    LevelMoves,
    LevelSweep,
    level_structure,
    level_third_sums,
)

__all__ = ["MHSS", "UserBound"]

#: Share of moves (after tuning) decided on all rows above which a chain warns, and the draws
#: it waits for before judging.
FALLBACK_WARN_RATE, FALLBACK_WARN_AFTER = 0.01, 500

_log = logging.getLogger("pymc_subsample")

#: ``level_cv_order=None`` adds the fourth-order terms where ``G² ≥ QUARTIC_FROM · N`` (or the
#: rows are read from Zarr or Dask chunks): a sweep of the levels with the third-order terms
#: alone reads about ``1.4 G²/N`` rows (more levels of fewer rows each cost more), and in
#: memory, below about 40 of them, the fourth-order terms' pass and products cost more time
#: than the rows they save (``docs/benchmarks.md``, "Fourth-order terms for the level moves")
QUARTIC_FROM = 30.0

#: The level moves' stats of an iteration with none of them (or before they run).
NO_LEVEL_STATS = {"level_accept": np.nan, "level2_accept": np.nan, "level_rows": 0,
                  "hyper_accept": False, "scale_accept": False}


@functools.cache
def _blas_controller() -> ThreadpoolController:
    """The process's BLAS thread pools, found once (each worker process finds its own)."""
    return ThreadpoolController()


@dataclass_state
class MHSSState(SubsamplingStepState):
    draws_after_tuning: int
    fallbacks_after_tuning: int
    fallback_warned: bool


class MHSS(SubsamplingStep):
    """Exact Metropolis–Hastings with scalable subsampling (Prado, Nemeth & Sherlock 2024).

    A proposal (by default pCN around the Laplace approximation, its ``ρ`` tuned for the
    expected jump distance per row read) is screened with Taylor control variates (stage 1,
    no data) and then corrected exactly by Poisson thinning on a few rows drawn in proportion
    to bound constants ``c_i`` (stage 2); the chain targets the true posterior. For the
    Gaussian-linear case with ``cv_order=2`` the control variates are exact and no row is
    ever read.

    Parameters
    ----------
    vars : list, optional
        Must be all free variables of the model (the default).
    cv_order : {1, 2}
        Taylor order of the control variates; order 2 reads O(1) rows per iteration near the
        mode, order 1 O(√N) (Sec. 4.3).
    bound : UserBound, optional
        Bound for likelihoods other than the supported GLMs (see :mod:`pymc_subsample.model.glm`).
        Without one the step bounds the supported GLMs itself: Corollary 2's constants, or a
        bound with per-row rates when it expects fewer rows (:attr:`rate_bound`: rows that
        touch one level of a grouping factor, or one sampled scale for all rows).
    level_moves : bool, optional
        With a grouping factor of many levels (``u[g]``, 64 or more levels), alternate a move
        of the other coordinates (the proposal, in the whitened ``φ_F`` with the levels'
        ``φ_L`` held) with moves of the levels, one MHSS decision per level from its own rows
        (:attr:`level_moves`; ``docs/methods/mhss.md``, "Moves of the levels"). ``None``
        (default): whenever the model allows it; ``True``: refuse a model that does not (the
        error says why); ``False``: one joint move of all coordinates.
    level_fraction : float
        With level moves: the probability with which each level is moved in an iteration
        (independently; 1, the default: every level). Fewer rows an iteration, less mixing of
        the levels.
    level_cv_order : {None, 2, 3, 4}
        With level moves (and ``cv_order=2``), the Taylor order of the control variates of
        the moves that read rows (the levels', the fixed block's and the scale's): 3 adds the
        rows' third-order terms from per-level sums, 4 their fourth-order terms too (a pass
        over the data at setup, in place of the one for the fixed block's proposal; logistic
        rows of one factor, or at 3 of two crossed factors; ``docs/methods/mhss.md``,
        "Third-order terms for the level moves", the next section and "Third-order terms on
        two crossed factors"). ``None`` (default): wherever they apply, on one factor 4 for
        many levels of few rows each (``G² ≥ 30 N``, :data:`QUARTIC_FROM`) or rows read from
        Zarr or Dask and 3 for the others, on two crossed factors 3 for rows read from Zarr
        or Dask; else 2. The order used is :attr:`level_cv_order` after construction.
    **kwargs
        ``temperature``, ``proposal`` (default ``"pcn"``), ``map_point``, ``proposal_cov``,
        ``scaling`` (the proposal's parameter: ``ρ``, default 0.5, for pCN), ``target_accept``
        (random walk only; no default: tuned by jump distance per cost), ``tune``,
        ``compile_kwargs``, ``model``, ``rng``: see
        :class:`~pymc_subsample.steps.base.SubsamplingStep`.

    Notes
    -----
    Sampler stats per draw: the README's table (also in ``docs/getting-started.md``). A chain
    warns once when ``full_data_fallback`` exceeds 1% of its moves after tuning; the
    progress bar shows it.

    References
    ----------
    Prado, E. B., Nemeth, C. & Sherlock, C. (2024). Metropolis–Hastings with scalable
    subsampling. arXiv:2407.19602.

    Examples
    --------
    .. code-block:: python

        import pymc as pm
        import pymc_subsample as pms

        with pm.Model():
            X = pm.Data("X", X_np)
            b = pm.Normal("b", 0, 10, shape=X_np.shape[1])
            pm.Bernoulli("y", logit_p=X @ b, observed=y_np)
            idata = pm.sample(step=pms.MHSS(cv_order=2), random_seed=1)
        idata.sample_stats["n_data"].mean()
    """

    name = "mhss"
    _state_class = MHSSState
    default_proposal = "pcn"
    needs_reference_point = True
    stats_dtypes_shapes = {
        **COMMON_STATS,
        "accept_stage1": (bool, []),
        "expected_rows": (np.float64, []),
        "full_data_fallback": (bool, []),
        "clipped": (np.int64, []),
        "level_accept": (np.float64, []),
        "level_rows": (np.int64, []),
        "level2_accept": (np.float64, []),
        "hyper_accept": (bool, []),
        "scale_accept": (bool, []),
    }

    def __init__(self, vars=None, *, cv_order: int = 2, bound: UserBound | None = None,
                 level_moves: bool | None = None, level_fraction: float = 1.0,
                 level_cv_order: int | None = None, **kwargs):
        if cv_order is None:
            raise ValueError(
                "MHSS needs control variates: cv_order must be 1 or 2 (got None). Use "
                "AusterityMH or BarkerMinibatch for subsampling without control variates."
            )
        if not 0.0 < level_fraction <= 1.0:
            raise ValueError(f"level_fraction must be in (0, 1] (the probability that a level "
                             f"is moved in an iteration); got {level_fraction!r}")
        if level_cv_order is not None and (isinstance(level_cv_order, bool)
                                           or level_cv_order not in (2, 3, 4)):
            raise ValueError(f"level_cv_order must be None, 2, 3 or 4; got {level_cv_order!r}")
        if level_cv_order in (3, 4) and (cv_order != 2 or bound is not None
                                         or level_moves is False):
            raise ValueError(f"level_cv_order={level_cv_order} extends the level moves' "
                             "order-2 control variates: it needs cv_order=2, no UserBound and "
                             "level moves (level_moves None or True)")
        # as asked (None: 3 or 4 where they apply); the one used is level_cv_order
        self._asked_level_cv_order = level_cv_order
        self.bound = bound
        #: ``r`` of the region ``‖φ‖ ≤ r`` where the row constants hold (``inf``: everywhere)
        self.region_radius = math.inf
        #: Lemma 1's angle factors in M (one linear predictor per row); False for rows with
        #: two predictors (a sampled σ, dispersion or shape)
        self.sharp_angles = True
        #: two-stage (delayed) MHSS decisions; one decision on both ratios when the proposal
        #: follows a closer target than the control variates' (the fixed block's cubic shift)
        self.delayed = True
        #: the interweaving move of the group scale and all levels, with level moves (set
        #: before the base class starts a chain)
        self.scale_move: ScaleMove | None = None
        super().__init__(vars, cv_order=cv_order, **kwargs)
        lik = self.likelihood
        #: the bound with per-row rates, when one applies and it expects fewer rows than
        #: Corollary 2's: the level bound (rows that touch one level of a grouping factor) or
        #: the shared-scale bound (two predictors, one sampled scale for all rows); else None
        self.rate_bound: LevelBound | SharedScaleBound | None = None
        #: the moves of the levels (:mod:`pymc_subsample.steps.level_moves`), or None
        self.level_moves: LevelMoves | None = None
        #: the move of the coordinates no row reads (the group scale), with level moves
        self.hyper_move: HyperMove | None = None
        #: the moves of a second, crossed factor's levels (:mod:`.crossed_moves`), or None
        self.second_moves: SecondFactorMoves | None = None
        if bound is None:
            # whitened constants from the reference fit's last pass, M from whitened points
            consts = self.reference.row_constants
            self._remainder_scale = self._whitened_remainder_scale
            # families with unbounded derivatives: constants valid for ‖φ‖, ‖φ'‖ ≤ r only
            self.region_radius = self._reference_pass.region_radius
            self.sharp_angles = self._reference_pass.sharp_angles
            if level_moves is not False:
                required = bool(level_moves or level_cv_order in (3, 4))
                self._set_level_moves(consts, required=required, fraction=level_fraction)
            if self.level_moves is not None:
                # the level bound serves both moves: the fixed block's (φ_L held) too
                self.rate_bound = self.level_moves.bound
                consts = self.reference.row_constants = None
            elif isinstance(consts, (LevelRows, SharedScaleRows)):
                choice = choose_rate_bound(consts, lik.dim, self.cv_order, self.sharp_angles)
                if choice.rate_bound_rows is not None:
                    self.setup_profile["rate_bound_rows"] = choice.rate_bound_rows
                    self.setup_profile["corollary2_rows"] = choice.corollary2_rows
                # the pieces not kept are dropped
                self.rate_bound = choice.rate_bound
                consts = self.reference.row_constants = choice.constants
        else:
            if level_moves:
                raise ValueError("level_moves=True needs the step's own bound: a UserBound "
                                 "bounds rows with one M for all, not level by level.")
            consts = user_row_constants(bound, self.theta_hat, lik.n_rows)
            user_scale = bound.remainder_scale
            self._remainder_scale = (
                self._euclidean_remainder_scale
                if user_scale is None
                else (lambda t, t_new, p, p_new: float(user_scale(t, t_new, self.theta_hat)))
            )
            check_user_bound(consts, remainder=self.control_variate.remainder,
                             unwhiten=self.frame.unwhiten, remainder_scale=self._remainder_scale,
                             dim=lik.dim)
        self.sampler = (WeightedIndexSampler(consts) if self.rate_bound is None
                        else self.rate_bound.sampler)
        #: ``c_i`` as the sampler holds them (float32 rounded up): the thinning reads the same
        #: (the fixed weights ``c̄_i`` of a :attr:`rate_bound`)
        self.row_constants = self.sampler.weights
        self._reset_fallback_count()

    def _set_level_moves(self, rows, required: bool, fraction: float) -> None:
        """Build :attr:`level_moves` (and :attr:`hyper_move`) when the model allows them: the
        frame turned so that the coordinates no row reads are last in ``φ_F``, and the
        proposal moving the other fixed coordinates only (``φ_L`` and those held)."""
        found = level_structure(self, rows)
        if isinstance(found, str):
            asked = self._asked_level_cv_order
            if required and asked in (3, 4):
                raise ValueError(f"level_cv_order={asked} needs level moves, but {found}. Use "
                                 "level_cv_order=2.")
            if required:
                raise ValueError(f"level_moves=True, but {found}. Leave level_moves=None to "
                                 "move all coordinates jointly.")
            _log.debug("no level moves: %s", found)
            return
        lik, hyper = self.likelihood, found.hyper
        frame = self.frame.with_last(hyper)
        self.frame = self.setup.frame = frame
        self.laplace_centre = self.setup.laplace_centre = frame.whiten(self.reference.mode)

        # the higher-order terms extend order-2 control variates (asked for 3 or 4: checked
        # above), by default wherever they apply; a refusal of the asked ones names the
        # rows' reason
        asked = self._asked_level_cv_order
        crossed = crossed_levels(self, frame, hyper, asked)
        if isinstance(crossed, str):
            _log.debug("no second factor: %s", crossed)
            higher = (self._level_cubic(frame, hyper)
                      if asked in (3, 4) or (asked is None and self.cv_order == 2) else None)
        else:
            higher = crossed.cubic
        self.level_moves = LevelMoves(
            frame, found.prior, LevelBound(rows, lik.dim), self.control_variate.grad_sum,
            self.control_variate.hess_sum, self.cv_order, self.laplace_centre,
            self.region_radius, fraction=fraction, hyper=hyper, cubic=higher)
        if not isinstance(crossed, str):
            # both factors' levels bounded in their own coordinates (a row on two levels)
            self.level_moves.use_bound(crossed.bound, crossed.coords.point)
            self.second_moves = crossed.moves
        if hyper.size:
            self.hyper_move = HyperMove(prior_derivatives(lik, hyper), hyper, self.theta_hat)
        scale = scale_coordinate(lik, frame.layout, hyper)
        if isinstance(scale, str):
            _log.debug("no scale move: %s", scale)
        else:
            self.scale_move = ScaleMove(scale, slice(frame.layout.start, frame.layout.stop))
        g, kind = frame.n_levels, self.proposal_kind
        if kind == "pcn":
            # the levels carried along with their conditional mean at the current scale
            hess_sum = self.control_variate.hess_sum
            cubic = self.level_moves.cubic
            if cubic is not None:  # the same T_k and V_k, exact, from the cubic terms' pass
                third = (cubic.t_sum, cubic.v_sum)
            else:
                third = level_third_sums(self._reference_pass, self.theta_hat, hess_sum)
                self.setup_profile["full_data_passes"] += 1  # the third derivatives' pass
            proposal = CollapsedFixedProposal(
                frame, found.prior, self.control_variate.grad_sum, hess_sum,
                lik.logp0_and_grad(self.theta_hat)[1], hyper, rho=self.proposal.parameter,
                third=third)
            # its mean is shifted by the rows' cubic, which stage 1's quadratic does not see:
            # a stage-1 screen would reject what the shift gains (docs/methods/mhss.md)
            self.delayed = third is None
        else:  # the user's proposal on φ_F, φ_L and the hyperparameters held
            stop = lik.dim - hyper.size
            inner = make_proposal(
                kind, stop - g, parameter=self.proposal.parameter,
                df=self.proposal.df if kind == "independence" else None,
                centre=None if kind == "random_walk" else self.laplace_centre[g:stop])
            proposal = BlockProposal(inner, g, stop, lik.dim)
        self.proposal = self.setup.proposal = proposal
        self._tuner.min_accept = proposal.min_accept  # the tuner was made for the joint one

    @property
    def level_cv_order(self) -> int:
        """The level moves' control-variate order: 3 or 4 where they have the rows' terms of
        that order, else 2 (also without level moves)."""
        return 2 if self.level_moves is None or self.level_moves.cubic is None else (
            self.level_moves.cubic.order)

    def _level_cubic(self, frame, unread: np.ndarray) -> LevelCubic | None:
        """The level moves' third- (and fourth-) order terms (one more pass over the data);
        where they do not apply, refuse ``level_cv_order`` 3 or 4 or, for ``None``, none."""
        asked = self._asked_level_cv_order
        lik = self.likelihood
        # fourth order where the rows cost more than its terms: many levels of few rows, or
        # rows read from chunks (Zarr, Dask) rather than memory
        order = asked or (4 if not lik.rows_in_memory
                          or frame.n_levels**2 >= QUARTIC_FROM * lik.n_rows else 3)
        cubic = (level_cubic(self._reference_pass, frame) if order == 3 else
                 level_quartic(self._reference_pass, frame, unread))
        if isinstance(cubic, str):
            if asked in (3, 4):
                raise ValueError(f"level_cv_order={asked}, but {cubic}. Use "
                                 "level_cv_order=2.")
            _log.debug("level moves of order 2: %s", cubic)
            return None
        self.setup_profile["full_data_passes"] += 1
        return cubic

    def _jump_sq(self, phi: np.ndarray, phi_new: np.ndarray) -> float:
        # the fixed block's move: its jump in the metric of the coordinates it moves (its
        # shift of the levels would credit large ρ's small moves of b)
        if isinstance(self.proposal, CollapsedFixedProposal):
            return self.proposal.last_jump_sq
        return super()._jump_sq(phi, phi_new)

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, StatsType]:
        """One iteration: the proposal's move (of the fixed block, with level moves), then,
        with :attr:`level_moves`, one move of every level."""
        if self.level_moves is None:
            q, (stats,) = super().astep(q0)
            stats.update(NO_LEVEL_STATS)
            return q, [stats]
        # one BLAS thread: the O(G) vector products of these moves are far too small to
        # share, and a threaded BLAS on a busy machine took 5 ms for one dot product of 10⁴
        # numbers (2 µs on one thread)
        with _blas_controller().limit(limits=1, user_api="blas"):
            return self._astep_with_levels(q0)

    def _astep_with_levels(self, q0: RaveledVars) -> tuple[RaveledVars, StatsType]:
        q, (stats,) = super().astep(q0)
        stats.update(NO_LEVEL_STATS)  # each move below sets its own
        theta = self._sampled(q.data)
        if self.hyper_move is not None:
            theta, hyper_accepted = self.hyper_move.move(theta, self.logp0(theta),
                                                         self.rng_proposal, self.rng_accept)
            stats["hyper_accept"] = hyper_accepted
        self._non_finite = False
        if self.scale_move is not None:
            theta = self._scale_step(theta, stats)
        cv_remainder = self.control_variate.remainder

        def remainder(t: np.ndarray, t_new: np.ndarray, idx: np.ndarray) -> np.ndarray:
            return self._finite_or_reject(cv_remainder(t, t_new, idx))

        sweep = self.level_moves.sweep(
            theta, self.level_moves.rows_phi(theta), remainder,
            rng_proposal=self.rng_proposal, rng_index=self.rng_index,
            rng_accept=self.rng_accept)
        self._level_stats(sweep, stats, "level_accept")
        theta = sweep.theta
        if self.second_moves is not None:
            sweep = self.second_moves.sweep(
                theta, remainder, rng_proposal=self.rng_proposal, rng_index=self.rng_index,
                rng_accept=self.rng_accept)
            self._level_stats(sweep, stats, "level2_accept")
            theta = sweep.theta
        stats["non_finite"] = bool(stats["non_finite"] or self._non_finite)
        return RaveledVars(self._returned(theta), q.point_map_info), [stats]

    def _level_stats(self, sweep: LevelSweep, stats: dict[str, Any], accept: str) -> None:
        """A sweep of one factor's levels into the iteration's stats: its acceptance in
        ``accept``, its rows in ``level_rows`` and ``n_data``."""
        info = sweep.info
        moved = int(np.count_nonzero(sweep.moved))
        stats[accept] = (float(np.count_nonzero(info.accepted & sweep.moved)) / moved
                         if moved else np.nan)
        stats["level_rows"] += info.n_data
        self._count_move(stats, info.n_data, info.clipped, bool(info.fallbacks))

    def _count_move(self, stats: dict[str, Any], n_data: int, clipped: int,
                    fell_back: bool) -> None:
        """One more move of this iteration in its stats: its rows, its clipped rates, and
        whether it was decided on all rows (counted once an iteration after tuning)."""
        stats["n_data"] += n_data
        stats["clipped"] += clipped
        if fell_back and not stats["full_data_fallback"]:
            stats["full_data_fallback"] = True
            if not self.tune:  # one move of this iteration counted as decided on all rows
                self.fallbacks_after_tuning += 1

    def _scale_step(self, theta: np.ndarray, stats: dict[str, Any]) -> np.ndarray:
        """The scale move (:class:`ScaleMove`): ``log α1 = log p0(θ') − log p0(θ) + Gε +
        Σ_i r̂_i`` and the rows' remainders by MHSS with the level bound's per-category rates
        (valid for any pair), its rows counted in ``n_data``."""
        move = self.scale_move
        theta_new, log_jacobian = move.propose(theta, self.rng_proposal)
        info = self._scale_decision(theta, theta_new, log_jacobian)
        if self.tune and self._adapt:
            move.adapt(info.accepted)
        stats["scale_accept"] = info.accepted
        self._count_move(stats, info.n_data, info.clipped, bool(info.full_data_fallback))
        return theta_new if info.accepted else theta

    def _scale_decision(self, theta: np.ndarray, theta_new: np.ndarray,
                        log_jacobian: float) -> MHSSInfo:
        """The MHSS decision of the scale move ``θ → θ' = T_ε θ`` (``log_jacobian = Gε``)."""
        log_rest = self.likelihood.logp0(theta_new) - self.logp0(theta) + log_jacobian
        if not np.isfinite(log_rest):
            self._non_finite = True
            log_rest = -np.inf if np.isnan(log_rest) else log_rest
        # no φ: with level moves the rates read the rows' own points (_thinning_rates)
        return self._mhss_info(Move(theta, theta_new, None, None, log_rest))

    def _reset_fallback_count(self) -> None:
        self.draws_after_tuning = self.fallbacks_after_tuning = 0
        self.fallback_warned = False

    def set_rng(self, rng) -> None:
        super().set_rng(rng)
        self._reset_fallback_count()
        if self.scale_move is not None:
            self.scale_move.reset()

    def _data_pass(self, likelihood, cv_order):
        # MHSS without a UserBound needs the GLM structure: its detection names what is missing
        if self.bound is not None:
            return super()._data_pass(likelihood, cv_order)
        return glm_data_pass(likelihood, cv_order)

    def _bound_order(self, cv_order: int | None) -> int | None:
        return cv_order if self.bound is None else None

    def _outside_region(self, phi: np.ndarray, phi_new: np.ndarray) -> bool:
        if math.isinf(self.region_radius):
            return False
        return max(phi @ phi, phi_new @ phi_new) > self.region_radius**2

    def _whitened_remainder_scale(self, theta, theta_new, phi, phi_new) -> float:
        # M of Corollary 2 from a = φ, a' = φ', h = φ' − φ (docs/methods/mhss.md)
        if self._outside_region(phi, phi_new):
            # outside the region the constants do not hold: M = ∞ makes the kernel decide on
            # all rows (a counted full_data_fallback); the switch depends on the pair {θ, θ'}
            # only, so detailed balance holds (docs/methods/mhss.md#region-valid-bounds)
            return math.inf
        return remainder_scale(phi, phi_new, np.zeros_like(phi), self.cv_order,
                               sharp=self.sharp_angles)

    def _thinning_rates(self, theta, theta_new, phi, phi_new) -> ThinningRates:
        """The per-row rates of the move: the rate bound's, or ``c_i M`` with one ``M``."""
        if self.level_moves is not None:
            # the rows' own points: the coordinates no row reads at θ̂ (LevelMoves.rows_phi)
            phi, phi_new = self.level_moves.rows_phi(theta), self.level_moves.rows_phi(theta_new)
        if self.rate_bound is None or self._outside_region(phi, phi_new):
            return ScalarRates(self._remainder_scale(theta, theta_new, phi, phi_new),
                               self.sampler)
        if self.level_moves is not None:
            # the fixed block's move changes every level a little: each category's own
            # envelope, not the largest level's over all rows (order 3's bound with the
            # level moves' third-order terms)
            cubic = self.level_moves.cubic
            bound = self.rate_bound if cubic is None else cubic.bound
            return bound.category_rates(phi, phi_new)
        return self.rate_bound.rates(phi, phi_new)

    def _euclidean_remainder_scale(self, theta, theta_new, phi, phi_new) -> float:
        return remainder_scale(theta, theta_new, self.theta_hat, self.cv_order)

    def _decide(self, move: Move) -> tuple[bool, dict[str, Any]]:
        info = self._mhss_info(move)
        stats = {name: getattr(info, name) for name in (
            "accept_stage1", "n_data", "expected_rows", "full_data_fallback", "clipped")}
        if not self.tune:
            self._count_fallback(info.full_data_fallback)
        return info.accepted, stats

    def _mhss_info(self, move: Move) -> MHSSInfo:
        """The MHSS decision of a move (its prior, proposal and Jacobian terms in
        ``move.log_rest``)."""
        cv_sum, remainder = self._row_differences(move.theta, move.theta_new)
        cubic = None if self.level_moves is None else self.level_moves.cubic
        if cubic is not None:
            # the third-order terms of all rows: in stage 1, out of each row's remainder
            theta, theta_new, order2 = move.theta, move.theta_new, remainder
            cv_sum = cv_sum + cubic.total_terms(theta, theta_new)

            def remainder(idx: np.ndarray) -> np.ndarray:
                return order2(idx) - cubic.row_terms(theta, theta_new, idx)
        return mhss_accept(
            move.log_rest + cv_sum,
            self._thinning_rates(*move[:4]),
            remainder=remainder,
            n_rows=self.row_constants.size,
            # the counted full-data fallback: the same remainders, chunk by chunk over all rows
            full_remainder_sum=lambda: self.likelihood.sum_over_rows(remainder),
            rng_index=self.rng_index, rng_accept=self.rng_accept, delayed=self.delayed,
        )

    def _count_fallback(self, fallback: bool) -> None:
        """Warn once per chain when too many moves after tuning were decided on all rows."""
        self.draws_after_tuning += 1
        self.fallbacks_after_tuning += int(fallback)
        n, k = self.draws_after_tuning, self.fallbacks_after_tuning
        if self.fallback_warned or n < FALLBACK_WARN_AFTER or k <= FALLBACK_WARN_RATE * n:
            return
        self.fallback_warned = True
        where = (
            f"proposals left the region ‖φ‖ ≤ {self.region_radius:.3g} where the bounds hold, "
            "or " if math.isfinite(self.region_radius) else ""
        )
        warnings.warn(
            f"MHSS decided {k} of the first {n} moves after tuning on all N = "
            f"{self.row_constants.size} rows (full_data_fallback): {where}the bound C·M reached "
            "N. Each such move costs a pass over the data. Smaller moves help: a "
            "light-tailed proposal (no df=), a smaller scaling, cv_order=2; or check that "
            "the posterior is close to its Laplace approximation (map_point).",
            UserWarning,
            stacklevel=2,
        )
