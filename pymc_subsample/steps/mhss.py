"""The ``MHSS`` step: exact subsampling Metropolis–Hastings inside ``pm.sample``."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from pymc.step_methods.state import dataclass_state

from pymc_subsample.bounds import (
    LevelBound,
    LevelRows,
    SharedScaleBound,
    SharedScaleRows,
    remainder_scale,
)
from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.kernels.indexing import WeightedIndexSampler
from pymc_subsample.kernels.mhss import ScalarRates, ThinningRates, mhss_accept
from pymc_subsample.model.glm import detect_location_scale_terms
from pymc_subsample.model.passes import GLMPass, LocationScalePass
from pymc_subsample.steps.base import SubsamplingStep, SubsamplingStepState

__all__ = ["MHSS", "UserBound"]

#: Pairs of points, rows per pair and seed of the probe of a user's bound at construction.
USER_BOUND_PAIRS, USER_BOUND_ROWS, USER_BOUND_SEED = 64, 2048, 20240611

#: Share of moves (after tuning) decided on all rows above which a chain warns, and the draws
#: it waits for before judging.
FALLBACK_WARN_RATE, FALLBACK_WARN_AFTER = 0.01, 500

#: Pairs of points and seed with which a rate bound and Corollary 2's are compared.
RATE_CHOICE_PAIRS, RATE_CHOICE_SEED = 64, 20261125


@dataclass_state
class MHSSState(SubsamplingStepState):
    draws_after_tuning: int
    fallbacks_after_tuning: int
    fallback_warned: bool


@dataclass(frozen=True)
class UserBound:
    """A user-supplied MHSS bound ``|ξ_i(θ, θ')| ≤ c_i · M(θ, θ')`` (Prado et al., eq. (3)).

    Use it for likelihoods without an automatic bound (``examples/logistic_errors_userbound.py``).
    A wrong bound breaks exactness: the step probes it at construction on random pairs of
    points and rows and refuses one that is violated (:meth:`MHSS._check_user_bound`), and the
    ``clipped`` sampler stat counts violations that sampling meets; neither can prove a bound.

    Parameters
    ----------
    row_constants : array or callable
        ``c_i ≥ 0`` for all N rows (already divided by the temperature), or a function
        ``theta_hat -> c`` evaluated once at the reference point.
    remainder_scale : callable
        ``(theta, theta_new, theta_hat) -> M``, symmetric in ``theta`` and ``theta_new``.
        Defaults to the GLM ``M`` of the step's ``cv_order`` (Corollary 2).
    """

    row_constants: np.ndarray | Callable[[np.ndarray], np.ndarray]
    remainder_scale: Callable[[np.ndarray, np.ndarray, np.ndarray], float] | None = None


class MHSS(SubsamplingStep):
    """Exact Metropolis–Hastings with scalable subsampling (Prado, Nemeth & Sherlock 2024).

    A random-walk proposal is screened with Taylor control variates (stage 1, no data) and
    then corrected exactly by Poisson thinning on a few rows drawn in proportion to bound
    constants ``c_i`` (stage 2); the chain targets the true posterior. For the Gaussian-linear
    case with ``cv_order=2`` the control variates are exact and no row is ever read.

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
    **kwargs
        ``temperature``, ``map_point``, ``proposal_cov``, ``scaling`` (κ, default 1.5),
        ``target_accept`` (default 0.45), ``tune``, ``compile_kwargs``, ``model``, ``rng``:
        see :class:`~pymc_subsample.steps.base.SubsamplingStep`.

    Notes
    -----
    Sampler stats per draw: ``accepted``, ``accept_stage1``, ``n_data`` (rows whose likelihood
    was evaluated), ``expected_rows`` (``C·M``, or ``Σ_i B_i`` of a :attr:`rate_bound`; NaN
    when stage 1 rejected),
    ``full_data_fallback`` (all rows used: ``C·M ≥ N``, or a move with an end outside the
    region ``‖φ‖ ≤ r`` of a family whose bounds hold on a region only; a chain warns once when
    this exceeds 1% of its moves after tuning, and the progress bar shows it), ``clipped``
    (thinning rates clipped beyond rounding: a bound violation if ever > 0), ``scaling`` (κ),
    ``non_finite`` (the prior, proposal ratio or a row term read was NaN or infinite: the
    proposal was rejected).

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
    _progress_averages = (
        *SubsamplingStep._progress_averages,
        ("fallback", "full_data_fallback", "Full-data"),
    )
    default_proposal = "pcn"
    needs_reference_point = True
    stats_dtypes_shapes = {
        "accepted": (bool, []),
        "accept_stage1": (bool, []),
        "n_data": (np.int64, []),
        "expected_rows": (np.float64, []),
        "full_data_fallback": (bool, []),
        "clipped": (np.int64, []),
        "non_finite": (bool, []),
        "scaling": (np.float64, []),
    }

    def __init__(self, vars=None, *, cv_order: int = 2, bound: UserBound | None = None, **kwargs):
        if cv_order is None:
            raise ValueError(
                "MHSS needs control variates: cv_order must be 1 or 2 (got None). Use "
                "AusterityMH or BarkerMinibatch for subsampling without control variates."
            )
        self.bound = bound
        #: ``r`` of the region ``‖φ‖ ≤ r`` where the row constants hold (``inf``: everywhere)
        self.region_radius = math.inf
        #: Lemma 1's angle factors in M (one linear predictor per row); False for rows with
        #: two predictors (a sampled σ, dispersion or shape)
        self.sharp_angles = True
        super().__init__(vars, cv_order=cv_order, **kwargs)
        lik = self.likelihood
        #: the bound with per-row rates, when one applies and it expects fewer rows than
        #: Corollary 2's: the level bound (rows that touch one level of a grouping factor) or
        #: the shared-scale bound (two predictors, one sampled scale for all rows); else None
        self.rate_bound: LevelBound | SharedScaleBound | None = None
        if bound is None:
            # whitened constants from the reference fit's last pass, M from whitened points
            consts = self.reference.row_constants
            self._remainder_scale = self._whitened_remainder_scale
            # families with unbounded derivatives: constants valid for ‖φ‖, ‖φ'‖ ≤ r only
            self.region_radius = self._reference_pass.region_radius
            self.sharp_angles = self._reference_pass.sharp_angles
            if isinstance(consts, (LevelRows, SharedScaleRows)):
                consts = self._choose_rate_bound(consts)
        else:
            consts = bound.row_constants
            if callable(consts):
                consts = consts(self.theta_hat)
            consts = np.asarray(consts, dtype=np.float64)
            if consts.shape != (lik.n_rows,):
                raise SubsamplingModelError(
                    f"UserBound.row_constants must have one entry per row, shape "
                    f"({lik.n_rows},); got {consts.shape}"
                )
            user_scale = bound.remainder_scale
            self._remainder_scale = (
                self._euclidean_remainder_scale
                if user_scale is None
                else (lambda t, t_new, p, p_new: float(user_scale(t, t_new, self.theta_hat)))
            )
            if np.any(consts < 0.0) or not np.all(np.isfinite(consts)):
                raise SubsamplingModelError(
                    "UserBound.row_constants must be finite and non-negative; got "
                    f"{np.count_nonzero(~(consts >= 0.0) | ~np.isfinite(consts))} rows that are not"
                )
            self._check_user_bound(consts)
        self.sampler = (WeightedIndexSampler(consts) if self.rate_bound is None
                        else self.rate_bound.sampler)
        #: ``c_i`` as the sampler holds them (float32 rounded up): the thinning reads the same
        #: (the fixed weights ``c̄_i`` of a :attr:`rate_bound`)
        self.row_constants = self.sampler.weights
        self._reset_fallback_count()

    def _choose_rate_bound(self, rows: LevelRows | SharedScaleRows) -> np.ndarray | None:
        """Keep a bound with per-row rates or Corollary 2's constants, whichever expects fewer
        rows.

        Both are valid. The level bound wins when many level coordinates make ``‖φ‖`` long
        (random intercepts), Corollary 2, with Lemma 1's angle factors, when the levels are
        few; the shared-scale bound replaces Cauchy–Schwarz on the scale's predictor by its
        exact displacement. The expected rows ``Λ`` of each are averaged over
        :data:`RATE_CHOICE_PAIRS` pairs of the Laplace approximation, a draw and a pCN move from
        it with ``ρ = 0.9`` (seeded: the choice is deterministic), and recorded in
        ``setup_profile`` (``rate_bound_rows``, ``corollary2_rows``). Returns Corollary 2's
        constants, or ``None`` with :attr:`rate_bound` set; the pieces not kept are dropped.
        """
        if isinstance(rows, SharedScaleRows) and rows.shared_row is None:
            self.reference.row_constants = rows.plain  # a scale that differs by row
            return rows.plain
        dim, order = self.likelihood.dim, self.cv_order
        bound = (LevelBound(rows, dim) if isinstance(rows, LevelRows)
                 else SharedScaleBound(rows, dim))
        plain_total = float(np.sum(rows.plain, dtype=np.float64))
        rng = np.random.default_rng(RATE_CHOICE_SEED)
        rate_rows = plain_rows = 0.0
        for _ in range(RATE_CHOICE_PAIRS):
            phi = rng.standard_normal(dim)
            phi_new = 0.9 * phi + math.sqrt(1.0 - 0.81) * rng.standard_normal(dim)
            rate_rows += bound.rates(phi, phi_new).expected
            plain_rows += plain_total * remainder_scale(phi, phi_new, np.zeros(dim), order,
                                                        sharp=self.sharp_angles)
        self.setup_profile["rate_bound_rows"] = rate_rows / RATE_CHOICE_PAIRS
        self.setup_profile["corollary2_rows"] = plain_rows / RATE_CHOICE_PAIRS
        if rate_rows < plain_rows:
            self.rate_bound = bound
            self.reference.row_constants = None
            return None
        self.reference.row_constants = rows.plain
        return rows.plain

    def _check_user_bound(self, consts: np.ndarray) -> None:
        """Refuse a user's bound that a probe finds violated: ``|ξ_i| > c_i M`` on some row.

        :data:`USER_BOUND_PAIRS` pairs ``(θ, θ')`` around ``θ̂`` in the Laplace frame, at
        distances from 0.1 to 4 posterior sds and steps from small to as large as the distance,
        each on :data:`USER_BOUND_ROWS` random rows. A bound that passes may still be wrong
        elsewhere (the ``clipped`` stat counts what sampling meets); one that fails is wrong.
        """
        lik, cv = self.likelihood, self.control_variate
        rng = np.random.default_rng(USER_BOUND_SEED)
        rows = np.sort(rng.choice(lik.n_rows, size=min(USER_BOUND_ROWS, lik.n_rows),
                                  replace=False)).astype(np.int64)
        for k in range(USER_BOUND_PAIRS):
            size = 0.1 * 40.0 ** (k / (USER_BOUND_PAIRS - 1))  # 0.1 to 4 sds
            phi = size * rng.standard_normal(lik.dim) / np.sqrt(lik.dim)
            phi_new = phi + size * rng.uniform(0.01, 1.0) * rng.standard_normal(lik.dim) / np.sqrt(
                lik.dim)
            theta, theta_new = self.frame.unwhiten(phi), self.frame.unwhiten(phi_new)
            m = self._remainder_scale(theta, theta_new, phi, phi_new)
            xi = np.asarray(cv.remainder(theta, theta_new, rows))
            ok = np.abs(xi) <= consts[rows] * m * (1.0 + 1e-9) + 1e-12 * (1.0 + np.abs(xi))
            bad = np.flatnonzero(np.isfinite(xi) & ~ok)
            if bad.size:
                i = int(bad[np.argmax(np.abs(xi[bad]) - consts[rows][bad] * m)])
                raise SubsamplingModelError(
                    f"UserBound is violated: on row {int(rows[i])} the control-variate error "
                    f"|ξ| = {abs(xi[i]):.6g} exceeds c_i·M = {consts[rows][i] * m:.6g} at a pair "
                    f"{np.linalg.norm(phi):.3g} and {np.linalg.norm(phi_new):.3g} posterior sds "
                    "from the reference point. MHSS would not be exact with it: check c_i (after "
                    "dividing by the temperature) and M (symmetric in θ, θ'), or use AusterityMH "
                    "or BarkerMinibatch."
                )

    def _reset_fallback_count(self) -> None:
        self.draws_after_tuning = self.fallbacks_after_tuning = 0
        self.fallback_warned = False

    def set_rng(self, rng) -> None:
        super().set_rng(rng)
        self._reset_fallback_count()

    def _data_pass(self):
        # MHSS without a UserBound needs the GLM structure: its detection names what is missing
        if self.bound is not None:
            return super()._data_pass()
        terms = detect_location_scale_terms(self.likelihood)
        if terms:
            return LocationScalePass(self.likelihood, terms)
        data_pass = GLMPass(self.likelihood)
        data_pass.check_curvature_size()
        return data_pass

    def _bound_order(self) -> int | None:
        return self.cv_order if self.bound is None else None

    def _outside_region(self, phi: np.ndarray, phi_new: np.ndarray) -> bool:
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
        if self.rate_bound is None or self._outside_region(phi, phi_new):
            return ScalarRates(self._remainder_scale(theta, theta_new, phi, phi_new),
                               self.sampler)
        return self.rate_bound.rates(phi, phi_new)

    def _euclidean_remainder_scale(self, theta, theta_new, phi, phi_new) -> float:
        return remainder_scale(theta, theta_new, self.theta_hat, self.cv_order)

    def _decide(
        self,
        theta: np.ndarray,
        theta_new: np.ndarray,
        log_rest: float,
        phi: np.ndarray,
        phi_new: np.ndarray,
    ) -> tuple[bool, dict[str, Any]]:
        cv_sum, remainder = self._row_differences(theta, theta_new)
        info = mhss_accept(
            log_rest + cv_sum,
            self._thinning_rates(theta, theta_new, phi, phi_new),
            remainder=remainder,
            n_rows=self.row_constants.size,
            # the counted full-data fallback: the same remainders, chunk by chunk over all rows
            full_remainder_sum=lambda: self.likelihood.sum_over_rows(remainder),
            rng_index=self.rng_index,
            rng_accept=self.rng_accept,
        )
        stats = {
            "accept_stage1": info.accept_stage1,
            "n_data": info.n_data,
            "expected_rows": info.expected_rows,
            "full_data_fallback": info.full_data_fallback,
            "clipped": info.clipped,
        }
        if not self.tune:
            self._count_fallback(info.full_data_fallback)
        return info.accepted, stats

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
