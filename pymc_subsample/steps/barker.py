"""The ``BarkerMinibatch`` step: the minibatch Barker test of Seita et al. (2017) in ``pm.sample``.

The step only wires the model to the pure kernel
:func:`pymc_subsample.kernels.barker.barker_minibatch_test`: it forms the data-free part of
``Δ`` (prior and proposal terms, plus ``Σ r̂_i`` with control variates) and hands the kernel a
function returning the per-row terms of a batch of rows.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from pymc_subsample.kernels.barker import (
    BarkerResult,
    barker_minibatch_test,
    validate_barker_step_knobs,
)
from pymc_subsample.kernels.barker_correction import load_correction
from pymc_subsample.steps.base import COMMON_STATS, Move, SubsamplingStep
from pymc_subsample.steps.rows_warning import RowsReadCounter, barker_rows_advice

__all__ = ["BarkerMinibatch"]



class BarkerMinibatch(RowsReadCounter, SubsamplingStep):
    r"""Minibatch Barker test with a correction variable (Seita, Pan, Chen & Canny 2017).

    Each iteration proposes ``θ'`` and runs Algorithm 1 of the paper: on a minibatch of
    ``b`` rows drawn without replacement,

    .. math::

        Δ^* = \frac{N}{b}\sum_{i∈B} l_i + \log\frac{p_0(θ')}{p_0(θ)}
              + \log\frac{q(θ|θ')}{q(θ'|θ)},\qquad l_i = \frac{ℓ_i(θ') − ℓ_i(θ)}{K}

    (eq. 8) and its variance estimate ``s² = N²·var(l_batch)/b·(1 − b/N)``. The batch grows by
    ``batch_size`` rows while ``s² ≥ σ²`` (and, if ``delta`` is given, while the Corollary 1
    error estimate exceeds ``delta``); then ``X_nc ~ N(0, σ² − s²)`` and ``X_corr ~ C_σ`` are
    drawn and ``θ'`` is accepted iff ``Δ* + X_nc + X_corr > 0`` (eq. 13). In the limit where
    ``Δ*`` is normal this is Barker's test, acceptance probability ``1/(1 + e^{−Δ})``, which
    satisfies detailed balance (Lemma 2); the error of each test is at most the Corollary 1
    bound (Corollary 2) plus the correction table's CDF error (5.6e-4 for the shipped ``σ = 1``
    table; 8.9e-4 in the paper's Table 3). When all ``N`` rows are read, ``s² = 0`` and the test
    is the exact Barker test up to that table error. The Corollary 1 estimate is a worst-case
    bound, at least ``8.4/√b`` and so above 0.8 for ``b ≤ 100``: reported, not enforced, unless
    ``delta`` is given.

    With ``cv_order`` set, ``l_i`` is replaced by the control-variate remainder
    ``ξ_i = l_i − r̂_i`` and ``Σ_i r̂_i`` moves into the data-free part (``docs/methods/barker.md``):
    near the mode ``var(ξ)`` is orders of magnitude below ``var(l)``, so ``s² < σ²`` holds for
    the first minibatch even at temperature 1 and efficient step sizes.

    Parameters
    ----------
    vars : list, optional
        Must be all free variables of the model (the default).
    batch_size : int
        ``m`` in Algorithm 1: the size of the first minibatch and of each increment, in
        ``[2, N]`` (a variance needs two rows). ``batch_size = N`` reads all rows: the exact
        Barker test.
    temperature : float
        ``K > 0``; every ``ℓ_i`` is divided by ``K``. ``s²`` scales as ``1/K²`` (Sec. 1).
    cv_order : {2, 1, None}
        Taylor control variates at the reference point (``docs/methods/mhss.md``), order 2 by
        default; ``None`` for none (the paper's setting, which suits tempered likelihoods:
        at temperature 1 the batch then grows to a large share of the rows).
    delta : float, optional
        If given, in ``(0, 1)``: also grow the batch while the Corollary 1 estimate
        ``(6.4·E|Z|³ + 2·E|Z|)/√b`` exceeds it. The estimate is never below ``8.4/√b``, so
        ``delta`` forces at least ``(8.4/delta)²`` rows per test (7056 for ``delta = 0.1``)
        unless all rows are read. ``None`` (the paper's experiments) bounds only ``s²``.
    proposal : {None, "pcn", "independence", "random_walk"}
        ``None`` (default): ``"pcn"``, or ``"random_walk"`` when ``proposal_cov`` is given.
        ``"pcn"`` and ``"independence"`` are the proposals around the Laplace approximation
        shared with :class:`~pymc_subsample.MHSS` (:mod:`pymc_subsample.proposals`), their
        parameter chosen during tuning by jump distance per row read; ``"random_walk"`` is
        tuned toward ``target_accept``.
    proposal_cov : array, optional
        Covariance of the random walk, used as given (scale 1, still tuned if ``tune``). By
        default the Laplace covariance at the MAP, scaled by ``κ/√d``.
    sigma : float
        Standard deviation ``σ`` of ``X_norm``; ``0 < σ < π/√3``. The paper uses 1 (shipped
        table). Other values compute their correction table on construction (about 10 s).
    **kwargs
        ``map_point``, ``scaling`` (the proposal's initial parameter), ``df``
        (independence), ``target_accept`` (random walk only; default 0.2), ``tune``,
        ``compile_kwargs``, ``model``, ``rng``: see
        :class:`~pymc_subsample.steps.base.SubsamplingStep`.

    Attributes
    ----------
    batch_size, delta, sigma : int, float or None, float
        The knobs, validated.
    correction : CorrectionDistribution
        The law of ``X_corr``.

    Notes
    -----
    Sampler stats per draw: the README's table (also in ``docs/getting-started.md``).

    Target acceptance. Barker's acceptance ``1/(1 + e^{−Δ})`` is below Metropolis's
    ``min(1, e^Δ)`` everywhere (it tends to 1/2, not 1, as ``Δ → 0``), so the same step accepts
    less often and 0.234 is the wrong target. For a random walk on i.i.d. product targets the
    optimal Barker acceptance rate is 0.158 as ``d → ∞`` (Agrawal, Vats, Łatuszyński & Roberts
    2023), at about the same step as Metropolis's 0.234; in low dimensions the optimum is higher
    (expected squared jump distance on a standard normal target, computed for this choice:
    0.27 at d = 1, 0.22 at d = 2, 0.20 at d = 3, 0.17 at d = 10), as 0.234 rises to 0.44 for
    Metropolis at d = 1. Moreover ``s²`` grows with the squared step, so without control
    variates larger steps read more rows. The default ``target_accept = 0.2`` sits between the
    asymptotic optimum and the low-dimensional ones, on the side of smaller (cheaper) steps;
    the efficiency curve is flat there.

    Tuning pCN. Jump distance per row read chooses ``ρ`` among the candidates accepted at
    least ``min_accept`` of the time during tuning. pCN's floor, 0.7, is a Metropolis rate:
    Barker accepts a move that Metropolis accepts with probability ``a = e^Δ ≤ 1`` with
    probability ``a/(1 + a)``, and accepts at most about half of any proposal close to the
    target, so no ``ρ`` would reach 0.7 and tuning fell back to the most accepted, the largest
    ``ρ`` (0.93: an effective sample size of 31 in 3000 draws on 10⁵ × 10 logistic data).
    The step uses ``0.7/(1 + 0.7) ≈ 0.41`` instead.

    A chain whose tests read more than 10% of the rows per iteration on average, over at least
    500 draws after tuning, warns once, naming the knob that would lower it.

    A proposal whose ``Δ`` is NaN (a NaN prior, or a NaN per-row term) is rejected, as PyMC's
    Metropolis does; ``−∞`` rejects and ``+∞`` accepts (the exact test is then decided).

    All randomness of the test (row indices, ``X_nc``, ``X_corr``) comes from one child stream
    of the step's generator; proposals from another.

    References
    ----------
    Seita, D., Pan, X., Chen, H. & Canny, J. (2017). An efficient minibatch acceptance test for
    Metropolis–Hastings. *UAI*. arXiv:1610.06848.
    Barker, A. A. (1965). Monte-Carlo calculations of the radial distribution functions for a
    proton–electron plasma. *Aust. J. Phys.* 18:119–133.
    Agrawal, S., Vats, D., Łatuszyński, K. & Roberts, G. O. (2023). Optimal scaling of MCMC
    beyond Metropolis. *Adv. Appl. Probab.* 55(2):492–509. doi:10.1017/apr.2022.37.

    Examples
    --------
    .. code-block:: python

        import pymc as pm
        import pymc_subsample as pms

        with pm.Model():
            X = pm.Data("X", X_np)
            b = pm.Normal("b", 0, 10, shape=X_np.shape[1])
            pm.Bernoulli("y", logit_p=X @ b, observed=y_np)
            step = pms.BarkerMinibatch()  # pCN, cv_order=2
            idata = pm.sample(step=step, random_seed=1)
        idata.sample_stats["n_data"].mean()
    """

    name = "barker_minibatch"
    default_proposal = "pcn"
    default_target_accept = 0.2
    needs_reference_point = False
    stats_dtypes_shapes = {
        **COMMON_STATS,
        "s2": (np.float64, []),
        "error_bound": (np.float64, []),
    }

    def __init__(
        self,
        vars=None,
        *,
        batch_size: int = 100,
        temperature: float = 1.0,
        cv_order: int | None = 2,
        delta: float | None = None,
        proposal: str | None = None,
        proposal_cov: np.ndarray | None = None,
        sigma: float = 1.0,
        **kwargs,
    ):
        validate_barker_step_knobs(batch_size, delta, sigma, temperature)
        if proposal is None and proposal_cov is not None:
            proposal = "random_walk"  # a user's random-walk covariance asks for the random walk
        super().__init__(
            vars, cv_order=cv_order, temperature=temperature, proposal=proposal,
            proposal_cov=proposal_cov, **kwargs,
        )
        floor = self._tuner.min_accept
        if floor is not None:  # a Metropolis acceptance floor, in Barker's terms (Notes)
            self._tuner.min_accept = floor / (1.0 + floor)
        batch_size = operator.index(batch_size)
        if batch_size > self.n_rows:
            raise ValueError(
                f"batch_size must be at most the number of data rows N = {self.n_rows}; got "
                f"batch_size={batch_size}. batch_size = N reads every row (the exact Barker test)."
            )
        self.batch_size = batch_size
        self.delta = None if delta is None else float(delta)
        self.sigma = float(sigma)
        self.correction = load_correction(self.sigma)

    def barker_test(
        self,
        theta: np.ndarray,
        theta_new: np.ndarray,
        log_rest: float,
        *,
        rng: np.random.Generator | None = None,
    ) -> BarkerResult:
        """Run Algorithm 1 for one ``(θ, θ')``; ``log_rest`` = log p0 ratio + log q ratio.

        Returns the kernel's :class:`~pymc_subsample.kernels.barker.BarkerResult`. ``rng``
        overrides the step's test stream (for checks on a fixed pair).
        """
        if math.isnan(log_rest):
            log_rest = -math.inf  # NaN prior or proposal term: reject without reading data
        cv_sum, row_diffs = self._row_differences(theta, theta_new)  # NaN density: reject
        rest = log_rest + cv_sum

        return barker_minibatch_test(
            row_diffs,
            self.n_rows,
            rest,
            batch_size=self.batch_size,
            correction=self.correction,
            rng=self.rng_accept if rng is None else rng,
            delta=self.delta,
        )

    def _decide(self, move: Move) -> tuple[bool, dict[str, Any]]:
        result = self.barker_test(move.theta, move.theta_new, move.log_rest)
        self._count_rows(result.n_data)
        stats = {"n_data": result.n_data, "s2": result.s2, "error_bound": result.error_bound}
        return result.accepted, stats

    _rows_advice = barker_rows_advice
