r"""Moves of a grouping factor's levels, one MHSS decision per level (``docs/methods/mhss.md``,
"Moves of the levels").

With ``G`` levels ``u`` (random intercepts, ``η_i = x_{F,i}ᵀθ_F + t_i u_{k_i}``) one joint move of
all ``d = d_F + G`` coordinates is accepted less and less often as ``G`` grows: each level's
posterior departs a little from its Laplace approximation and the departures add up in one
acceptance ratio. Given the fixed coordinates ``θ_F`` the levels are independent
(:class:`~pymc_subsample.model.levels.LevelPrior`, and each row reads one level), so
:class:`LevelMoves` moves all of them at once with ``G`` separate decisions. For level ``k``:

- *proposal*: pCN (``ρ_L``, default 0: an independence draw) around the Gaussian of its
  conditional given ``θ_F`` that the order-2 control variates and a second-order expansion of
  its prior term give (mean ``m_k``, precision ``P_k``; for a Normal prior on ``u`` that is
  exactly the stage-1 target, which then accepts every proposal);
- *stage 1*: ``log α1_k = Δp_k + Σ_{i∈k} r̂_i + log q-ratio``, in ``O(d_F)`` from the per-level
  sums ``∂_kΣℓ̂``, ``H_kk``, ``H_{kF}`` of the arrow Hessian;
- *stage 2*: Poisson thinning of its own rows with the level bound's rates
  (:class:`~pymc_subsample.bounds.levels.LevelMoveRates`), or all its rows when the rates reach
  their number or a region family's move leaves the ball.

The step alternates this with a move of the fixed block (with the default pCN proposal
:class:`CollapsedFixedProposal`, the levels carried along with their conditional mean; with a
random walk, :class:`~pymc_subsample.proposals.proposal.BlockProposal` in ``φ_F`` with ``φ_L``
held), a prior-only
move of the group scale given the levels (:class:`~pymc_subsample.steps.hyper_moves.HyperMove`)
and, for ``u ~ Normal(0, s)``, a move of the scale with all levels, ``u/s`` held
(:class:`~pymc_subsample.steps.hyper_moves.ScaleMove`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import scipy.linalg

from pymc_subsample.bounds import LevelBound, LevelRows
from pymc_subsample.kernels.gram import scaled_gram
from pymc_subsample.kernels.mhss import LevelsInfo, mhss_accept_levels
from pymc_subsample.model.frame import LevelFrame
from pymc_subsample.model.level_cubic import LevelCubic
from pymc_subsample.model.levels import (
    MIN_SPLIT_LEVELS,
    LevelHessian,
    LevelLayout,
    LevelPrior,
    reads_levels,
)
from pymc_subsample.proposals.proposal import PCNProposal, checked_rho

__all__ = [
    "CollapsedFixedProposal",
    "LevelMoves",
    "LevelShear",
    "LevelStructure",
    "LevelSweep",
    "level_stage_one",
    "level_structure",
    "level_third_sums",
]


class LevelSweep(NamedTuple):
    """One move of the levels: the new ``θ`` and what the decisions did."""

    theta: np.ndarray
    info: LevelsInfo
    #: the levels moved (all, unless a fraction of them is moved each iteration)
    moved: np.ndarray


def level_stage_one(prior: LevelPrior, theta: np.ndarray, levels: np.ndarray,
                    x_new: np.ndarray, log_q_ratio: np.ndarray, grad: np.ndarray,
                    diag: np.ndarray, theta_hat: np.ndarray, order: int,
                    held: Callable[[], np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(θ', v' − v, log α₁)`` of the moves ``v_k → v'_k`` of one factor's ``levels``, each
    decided on its own: the levels' prior terms, the control variates' order-1 (``grad``) and
    order-2 terms (``diag``, and ``held()``, each level's Hessian coupling to the coordinates
    the move holds, times ``θ − θ̂`` there) and the proposal ratio ``log_q_ratio``."""
    x = theta[levels]
    theta_new = theta.copy()
    theta_new[levels] = x_new
    step = x_new - x
    cv = grad * step
    if order == 2:
        x_hat = theta_hat[levels]
        cv = cv + 0.5 * diag * ((x_new - x_hat) ** 2 - (x - x_hat) ** 2) + (step * held())
    with np.errstate(invalid="ignore"):
        log_alpha1 = prior.terms(theta_new) - prior.terms(theta) + cv + log_q_ratio
    return theta_new, step, log_alpha1


class LevelMoves:
    """Per-level MHSS moves of a grouping factor's levels (module docstring).

    Parameters
    ----------
    frame : LevelFrame
    prior : LevelPrior
    bound : LevelBound
        The level bound on all rows; no row in its "several levels" category.
    grad_sum : ndarray, shape (d,)
        ``Σ_i ∇ℓ_i(θ̂)``.
    hess_sum : LevelHessian
        ``Σ_i ∇²ℓ_i(θ̂)``.
    order : {1, 2}
        The control variates' order (stage 1 uses the Hessian only at order 2; the proposal
        always).
    centre : ndarray, shape (d,)
        ``μ``, the Laplace mode in ``φ``.
    region_radius : float
        ``r`` of the ball where the rows' constants hold (``inf``: everywhere).
    rho : float
        ``ρ_L`` of the levels' pCN.
    fraction : float
        Each level is moved in an iteration with this probability, independently of the
        others and of the state (a random scan: each choice of levels is a kernel that leaves
        ``π`` invariant, and so is their mixture); 1: every level.
    hyper : ndarray of int, optional
        The coordinates no row reads (the group scale): :meth:`rows_phi` puts them at ``θ̂``.
    cubic : LevelCubic, optional
        Third-order (a :class:`~pymc_subsample.model.level_quartic.LevelQuartic`: and
        fourth-order) control variates for these moves (with ``order`` 2): stage 1 adds the
        levels' terms, the rows' remainders lose theirs, the rates are the level bound's of
        that order (global: no ball), and each level's proposal takes one Newton step on the
        terms (``docs/methods/mhss.md``, "Fourth-order terms for the level moves").
    """

    def __init__(self, frame: LevelFrame, prior: LevelPrior, bound: LevelBound,
                 grad_sum: np.ndarray, hess_sum: LevelHessian, order: int,
                 centre: np.ndarray, region_radius: float, rho: float = 0.0,
                 fraction: float = 1.0, hyper: np.ndarray | None = None,
                 cubic: LevelCubic | None = None) -> None:
        self.frame, self.prior, self.bound = frame, prior, bound
        lay = frame.layout
        self.layout, self.n_levels = lay, lay.n_levels
        self._levels = slice(lay.start, lay.stop)
        self._fixed = lay.fixed
        self._grad = np.asarray(grad_sum, dtype=np.float64)[self._levels]
        self._diag, self._coupling = hess_sum.diag, hess_sum.coupling
        self._theta_hat = frame.theta_hat
        self.order, self.centre, self.region_radius = order, centre, region_radius
        if cubic is not None and order != 2:
            raise ValueError("higher-order level terms extend order-2 control variates; got "
                             f"cv_order={order}")
        self.cubic = cubic
        self.rho = checked_rho(rho)
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"level_fraction must be in (0, 1]; got {fraction!r}")
        self.fraction = float(fraction)
        self._hyper = (np.empty(0, dtype=np.int64) if hyper is None
                       else np.asarray(hyper, dtype=np.int64))
        #: ``θ ↦`` the bound's point, when it is not the frame's (:meth:`use_bound`)
        self._rows_map: Callable[[np.ndarray], np.ndarray] | None = None

    def use_bound(self, bound, rows_map: Callable[[np.ndarray], np.ndarray]) -> None:
        """Bound the rows with ``bound`` at the points ``rows_map(θ)`` instead of the level
        bound at :meth:`rows_phi`'s (a second, crossed factor:
        :mod:`pymc_subsample.steps.crossed_moves`). Its first ``G`` coordinates must be this
        factor's levels, moving by ``D^{1/2}δ`` as ``φ_L`` does."""
        self.bound, self._rows_map = bound, rows_map

    def rows_phi(self, theta: np.ndarray) -> np.ndarray:
        r"""The whitened point the level bound reads for ``θ``: ``φ`` of ``θ`` with the
        coordinates no row reads put at ``θ̂`` (``docs/methods/mhss.md``, "Moves of the levels").

        Every row's displacement ``a_i = x_iᵀ(θ − θ̂)`` is the same for both points (``x_i`` is
        zero on those coordinates), so ``a_i = x̃_iᵀφ`` holds for either and the bound holds
        with either; but the frame couples the levels to the group scale (``∂²log p0/∂u_k∂log s``
        at the joint mode), so in ``φ`` the scale's distance from its mode (the funnel: the
        posterior's scale lies well above the joint mode's) enters both ``‖φ_D‖`` and every
        ``φ_k`` and the triangle inequality loses their cancellation. A function of ``θ``
        alone, so rates from it stay symmetric in the pair."""
        if self._rows_map is not None:
            return self._rows_map(theta)
        if self._hyper.size == 0:
            return self.frame.whiten(theta)
        point = np.array(theta, dtype=np.float64)
        point[self._hyper] = self._theta_hat[self._hyper]
        return self.frame.whiten(point)

    def conditional_gaussian(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(m_k, P_k)``: the Gaussian in ``u_k`` given ``θ_F`` of the control variates'
        quadratic and the prior term expanded to second order at the Laplace conditional mean
        ``e_k`` (:meth:`LevelFrame.level_conditional`); where ``P_k`` is not positive (a
        likelihood or prior that is not log-concave there), the Laplace conditional itself."""
        e = self.frame.level_conditional(theta, self.centre)
        at_e = theta.copy()
        at_e[self._levels] = e
        p1, p2 = self.prior.derivatives(at_e)
        delta_fixed = theta[self._fixed] - self._theta_hat[self._fixed]
        x_hat = self._theta_hat[self._levels]
        # log π ≈ ½ A u² + B u in u_k: the control variates' H_kk, ∂_k and H_kF δ_F, the prior's
        # p'(e), p''(e)
        a = self._diag + p2
        b = self._grad + self._coupling @ delta_fixed - self._diag * x_hat + p1 - p2 * e
        precision = -a
        with np.errstate(invalid="ignore", divide="ignore"):
            ok = (precision > 0.0) & np.isfinite(precision) & np.isfinite(b)
            mean = np.where(ok, b / precision, e)
        laplace = self.frame.level_scale ** 2
        precision = np.where(ok, precision, laplace)
        if self.cubic is not None:
            return self.cubic.newton(theta, mean, precision)
        return mean, precision

    def sweep(self, theta: np.ndarray, phi: np.ndarray,
              remainder: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray], *,
              rng_proposal: np.random.Generator, rng_index: np.random.Generator,
              rng_accept: np.random.Generator) -> LevelSweep:
        """Move every level once: proposals, ``G`` decisions, the new ``θ``.

        ``phi`` is :meth:`rows_phi` of ``θ`` (or ``φ(θ)``: the bound holds for both);
        ``remainder(θ, θ', idx)`` the rows' ``ξ_i`` (with every level
        moved at once in ``θ'``, row ``i``'s is that of its own level's move)."""
        lv, g = self._levels, self.n_levels
        x = theta[lv]
        mean, precision = self.conditional_gaussian(theta)
        z = rng_proposal.standard_normal(g)
        x_new = mean + self.rho * (x - mean) + math.sqrt(1.0 - self.rho**2) * z / np.sqrt(
            precision)
        chosen = (rng_proposal.random(g) < self.fraction if self.fraction < 1.0
                  else np.ones(g, dtype=bool))
        x_new = np.where(chosen, x_new, x)
        log_q_ratio = np.where(chosen, 0.5 * precision * ((x_new - mean) ** 2 - (x - mean) ** 2),
                               0.0)
        theta_new, step, log_alpha1 = level_stage_one(
            self.prior, theta, lv, x_new, log_q_ratio, self._grad, self._diag,
            self._theta_hat, self.order,
            lambda: self._coupling @ (theta[self._fixed] - self._theta_hat[self._fixed]))
        phi_new = phi.copy()
        phi_new[:g] = phi[:g] + self.frame.level_scale * step
        cubic = self.cubic
        if cubic is not None:
            log_alpha1 = log_alpha1 + cubic.level_terms(theta, x_new)
            rates = cubic.bound.level_rates(phi, phi_new)

            def xi(idx: np.ndarray) -> np.ndarray:
                return (remainder(theta, theta_new, idx)
                        - cubic.row_terms(theta, theta_new, idx))
        else:
            rates = self.bound.level_rates(phi, phi_new)

            def xi(idx: np.ndarray) -> np.ndarray:
                return remainder(theta, theta_new, idx)
        if cubic is None and math.isfinite(self.region_radius):
            # a level's pair leaves the ball where the constants hold: all its rows (the
            # switch depends on the pair {θ, θ'} of that level's move only)
            norm2 = float(phi @ phi)
            moved = norm2 - phi[:g] ** 2 + phi_new[:g] ** 2
            rates.fallback = rates.fallback | (norm2 > self.region_radius**2) | (
                moved > self.region_radius**2)
        info = mhss_accept_levels(log_alpha1, rates, remainder=xi, rng_index=rng_index,
                                  rng_accept=rng_accept)
        out = theta.copy()
        out[lv] = np.where(info.accepted, x_new, x)
        return LevelSweep(out, info, chosen)


class LevelShear:
    """``D_s^{-1}C`` (levels × the fixed block's moved coordinates) as products with vectors,
    not formed: each O(G·d_b), and no ``G × d_b`` array an iteration."""

    def __init__(self, coupling: np.ndarray, diag: np.ndarray) -> None:
        self._coupling, self._diag = coupling, diag

    def __matmul__(self, v: np.ndarray) -> np.ndarray:
        """``D_s^{-1}Cv``."""
        return (self._coupling @ v) / self._diag

    def rmatvec(self, w: np.ndarray) -> np.ndarray:
        """``(D_s^{-1}C)ᵀw``."""
        return self._coupling.T @ (w / self._diag)


class CollapsedFixedProposal:
    r"""The proposal of the fixed block's move with level moves: pCN on the coordinates ``b``
    that rows read (the hyperparameters ``H`` held), the levels carried along with their
    conditional mean.

    Given ``θ_H`` the order-2 control variates, the levels' prior terms expanded to second
    order at ``û`` (exact for ``u ~ Normal``) and the prior of ``b`` at ``θ̂`` make a Gaussian
    in ``δ = θ − θ̂``: levels ``u`` with diagonal precision ``D_s`` (data and prior at the
    current scale), coupled to ``b`` by ``C``, ``b`` by ``A``. Write ``u = m(b) + v`` with
    ``m(b) = D_s^{-1}(r_L − Cδ_b)`` the levels' conditional mean; in that Gaussian ``b`` and
    ``v`` are independent, ``b ~ N(b̄, S^{-1})`` with ``S = A − CᵀD_s^{-1}C``. The move holds
    ``v`` and ``θ_H`` and moves ``b`` by pCN for ``N(b̄, S^{-1})``:
    ``δ_b' = b̄ + ρ(δ_b − b̄) + √(1−ρ²) L_S^{-⊤}z``, ``δ_L' = δ_L − D_s^{-1}C(δ_b' − δ_b)``.
    For fixed ``θ_H`` the map ``(b, u) ↦ (b, v)`` is a shear (unit Jacobian), so the proposal's
    log q-ratio is pCN's, ``log g(b) − log g(b')``; the Gaussian depends on ``θ_H`` (and, with
    the cubic below, on ``v``), which the move holds. The joint pCN around the Laplace frame at
    the joint mode cannot do this: in a centred hierarchy that mode's scale lies well below
    the posterior's (the funnel), and with it the levels' shrinkage the frame couples ``b`` to.

    *The rows' cubic* (``third``, from :func:`level_third_sums`). The Gaussian leaves out the
    rows' third-order terms ``(1/6)Σ_i f‴_i a_i³`` (``a_i = η_i − η̂_i``), and with the levels
    away from ``û`` (the funnel: at the posterior's larger scale they shrink less) their
    gradient along the move, ``½Σ_i f‴_i a_i² z_i`` (``z_i = ∂a_i/∂δ_b`` along the shear),
    adds up over all ``G`` levels to a nearly constant pull that puts ``N(b̄, S^{-1})`` off
    ``b``'s conditional by a distance growing like ``√G`` at fixed rows per level (1.3 sds at
    ``G = 10³``; at ``G = 10⁴`` the independence move's exact acceptance was 0.02). With
    ``a_i ≈ t_i c_k`` (the level's offset at ``b̄``, ``c = δ_L + D_s^{-1}C(δ_b − b̄)``) that
    gradient is ``g = ½Σ_k c_k²(V_k − T_k s_k)`` (``s_k`` the shear's row), and the proposal's
    mean is ``b̄ + S^{-1}g``: one Newton step on the cubic. ``c`` is a function of ``v`` and
    ``θ_H``, which the move holds (``c' = c``), so the Gaussian is still one fixed density of
    the move and the q-ratio pCN's.

    It speaks the proposals' interface in the frame's ``φ`` (:meth:`propose`, the tuned
    :attr:`parameter` ``ρ``), so the step's tuning and stats are those of a joint move; its
    MHSS decision is taken once on both stages' terms (``mhss_accept(delayed=False)``), since
    the shifted Gaussian is not stage 1's target.
    """

    symmetric = False
    parameter_symbol = "ρ"
    candidates = PCNProposal.candidates
    #: no acceptance floor (pCN's guards the joint move's tails on small data): the
    #: remainders summed over all levels keep the acceptance of small ``ρ`` moderate, and the
    #: tuner's jump criterion picks ``ρ`` (before the cubic shift, ``ρ = 0`` mixed ``b`` best
    #: at ``G = 1000``: 0.08 ESS an iteration, 0.03 at the floor's ``ρ = 0.85``)
    min_accept = None

    def __init__(self, frame: LevelFrame, prior: LevelPrior, grad_sum: np.ndarray,
                 hess_sum: LevelHessian, prior_grad: np.ndarray, hyper: np.ndarray,
                 rho: float = 0.5,
                 third: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        self.frame, self.prior, self.dim = frame, prior, frame.dim
        lay = frame.layout
        self._levels = slice(lay.start, lay.stop)
        fixed = lay.fixed
        moved = ~np.isin(fixed, hyper)
        self._moved = fixed[moved]
        theta_hat = frame.theta_hat
        self._theta_hat = theta_hat
        grad = np.asarray(grad_sum, dtype=np.float64)
        # data: −H's level diagonal, coupling (levels × b) and b block; b's prior at θ̂ (its
        # curvature from the frame's precision minus the data's)
        self._data_diag = -hess_sum.diag
        # Fortran order: the Schur complement's symmetric product reads it without a copy
        self._coupling = np.asfortranarray(-hess_sum.coupling[:, moved])
        block = np.ix_(moved, moved)
        self._block = frame.precision.block[block]  # data and prior
        self._r_levels_data = grad[self._levels]
        self._r_moved = grad[self._moved] + np.asarray(prior_grad, dtype=np.float64)[self._moved]
        #: ``(T, V)`` of the rows' cubic (:func:`level_third_sums`, ``V`` on the moved
        #: coordinates), or None: no correction of the mean
        self._third = None if third is None else (
            np.asarray(third[0], dtype=np.float64),
            np.asarray(third[1], dtype=np.float64)[:, moved])
        self.parameter = rho
        self.last_jump_sq = 0.0

    @property
    def parameter(self) -> float:
        return self.rho

    @parameter.setter
    def parameter(self, value: float) -> None:
        self.rho = checked_rho(value)

    def gaussian(self, theta: np.ndarray) -> tuple[LevelShear, np.ndarray, np.ndarray] | None:
        """``(D_s^{-1}C, b̄, L_S)`` of the Gaussian given ``θ_H``, or None."""
        at = self._theta_hat.copy()
        hyper = np.ones(self.dim, dtype=bool)
        hyper[self._levels] = False
        hyper[self._moved] = False
        at[hyper] = theta[hyper]  # θ̂ but for the held hyperparameters
        p1, p2 = self.prior.derivatives(at)
        diag = self._data_diag - p2
        if not (np.all(diag > 0.0) and np.all(np.isfinite(diag)) and np.all(np.isfinite(p1))):
            return None
        r_levels = self._r_levels_data + p1
        shear = LevelShear(self._coupling, diag)
        schur = self._block - scaled_gram(self._coupling, 1.0 / np.sqrt(diag))
        try:
            chol = np.linalg.cholesky(schur)
        except np.linalg.LinAlgError:
            return None
        mean = scipy.linalg.cho_solve((chol, True), self._r_moved - shear.rmatvec(r_levels),
                                      check_finite=False)
        return shear, mean, chol

    def cubic_shift(self, theta: np.ndarray, shear: LevelShear, mean: np.ndarray,
                    chol: np.ndarray) -> np.ndarray:
        """``S^{-1}g``: the Newton step of the rows' cubic on the proposal's mean (class
        docstring), a function of the held ``v`` and ``θ_H`` only."""
        t_sum, v_sum = self._third
        delta = theta[self._moved] - self._theta_hat[self._moved]
        c = theta[self._levels] - self._theta_hat[self._levels] + shear @ (delta - mean)
        c2 = c * c
        grad = 0.5 * (v_sum.T @ c2 - shear.rmatvec(t_sum * c2))
        shift = scipy.linalg.cho_solve((chol, True), grad, check_finite=False)
        return np.where(np.isfinite(shift), shift, 0.0)

    def propose(self, rng: np.random.Generator, phi: np.ndarray) -> tuple[np.ndarray, float]:
        """Return ``φ'`` and ``log g(b) − log g(b')`` (no move when the Gaussian fails)."""
        theta = self.frame.unwhiten(phi)
        z = rng.standard_normal(self._moved.size)
        found = self.gaussian(theta)
        self.last_jump_sq = 0.0
        if found is None:
            return phi, 0.0
        shear, mean, chol = found
        delta = theta[self._moved] - self._theta_hat[self._moved]
        if self._third is not None:
            mean = mean + self.cubic_shift(theta, shear, mean, chol)
        u = delta - mean
        u_new = self.rho * u + math.sqrt(1.0 - self.rho**2) * scipy.linalg.solve_triangular(
            chol, z, lower=True, trans="T", check_finite=False)
        theta_new = theta.copy()
        theta_new[self._moved] = self._theta_hat[self._moved] + mean + u_new
        theta_new[self._levels] = theta[self._levels] - shear @ (u_new - u)
        w, w_new = chol.T @ u, chol.T @ u_new
        #: ``‖L_Sᵀ(δ_b' − δ_b)‖²`` of the last proposal: the jump the tuner credits
        self.last_jump_sq = float((w_new - w) @ (w_new - w))
        return self.frame.whiten(theta_new), 0.5 * float(w_new @ w_new - w @ w)


def level_third_sums(data_pass, theta_hat: np.ndarray, hess_sum: LevelHessian,
                     step: float = 1e-4) -> tuple[np.ndarray, np.ndarray] | None:
    r"""Per-level sums of the rows' third derivatives at ``θ̂``, for the fixed block's
    proposal (:class:`CollapsedFixedProposal`): ``T_k = Σ_{i∈k} f‴_i t_i³`` and
    ``V_k = Σ_{i∈k} f‴_i t_i² x_{i,F}`` (``t_i = ∂η_i/∂u_k``), the derivatives of the level
    diagonal ``Σ f''_i t_i²`` and coupling ``Σ f''_i t_i x_{i,F}`` of the Hessian sums along all
    levels at once, by a forward difference of one more pass at ``θ̂ + ε·1_L``: ``(G,)`` and
    ``(G, d_F)``, or None when the pass does not give per-level sums or they are zero to
    rounding (``f‴ = 0``). Only the proposal reads
    them: an error in them lowers its acceptance, never the exactness."""
    lay = hess_sum.layout
    shifted = np.array(theta_hat, dtype=np.float64)
    shifted[lay.start:lay.stop] += step
    hess = data_pass.full(shifted).hess
    if not isinstance(hess, LevelHessian):
        return None
    d_diag, d_coupling = hess.diag - hess_sum.diag, hess.coupling - hess_sum.coupling
    if not (np.all(np.isfinite(d_diag)) and np.all(np.isfinite(d_coupling))):
        return None
    if (np.abs(d_diag).max(initial=0.0) <= 1e-12 * np.abs(hess_sum.diag).max(initial=0.0)
            and np.abs(d_coupling).max(initial=0.0)
            <= 1e-12 * np.abs(hess_sum.coupling).max(initial=0.0)):
        return None  # f‴ = 0 (a Normal family): no cubic, and the two-stage decision stays
    return d_diag / step, d_coupling / step


class LevelStructure(NamedTuple):
    """What the level moves need from the model: the levels' prior and the coordinates no
    row reads."""

    prior: LevelPrior
    hyper: np.ndarray


def level_structure(step, rows) -> LevelStructure | str:
    """The structure for level moves of an MHSS step under construction, or why there is
    none (for the log, and for ``level_moves=True``)."""
    frame, cv, lik = step.frame, step.control_variate, step.likelihood
    if not isinstance(frame, LevelFrame):
        return (f"the model has no grouping factor with {MIN_SPLIT_LEVELS} or more levels read "
                "as u[g]")
    if step.bound is not None:
        return "a UserBound bounds the rows"
    if not isinstance(rows, LevelRows):
        return "the rows are not bounded level by level (one predictor per row)"
    if np.any(rows.category == rows.n_levels + 1):
        return "some rows read several levels of the factor"
    if cv is None or not isinstance(cv.hess_sum, LevelHessian):
        return "the control variates' Hessian is not level-structured"
    if step.proposal_kind == "random_walk" and step.proposal.chol is not None:
        return "a proposal_cov was given (it shapes moves of all coordinates)"
    prior = LevelPrior.build(lik, frame.layout)
    if prior is None:
        return ("the levels' prior is not elementwise given the other parameters (or another "
                "prior term or potential reads the levels)")
    lay = frame.layout
    hyper = np.array([j for j in lay.fixed if not reads_levels(
        lik.terms, lik.theta, LevelLayout(int(j), int(j) + 1, lay.dim))], dtype=np.int64)
    return LevelStructure(prior, hyper)
