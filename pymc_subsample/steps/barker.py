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

from pymc_subsample.errors import positive_int
from pymc_subsample.kernels.barker import BarkerResult, barker_minibatch_test, validate_barker_knobs
from pymc_subsample.kernels.barker_correction import SIGMA_MAX, load_correction
from pymc_subsample.steps.base import COMMON_STATS, Move, SubsamplingStep

__all__ = ["BarkerMinibatch"]


def _check_cheap_knobs(batch_size, delta, sigma, temperature) -> None:
    """The checks that do not need the model, run before the (costly) base-class setup."""
    batch_size = positive_int(
        "batch_size", batch_size,
        "rows added at each growth step of the test, m in Seita et al. 2017, Algorithm 1",
    )
    validate_barker_knobs(batch_size, batch_size, delta)  # batch_size >= 2 and delta in (0, 1)
    try:
        sigma_value = float(sigma)
    except (TypeError, ValueError):
        raise ValueError(f"sigma must be a real number; got {sigma!r}") from None
    if not 0.0 < sigma_value < SIGMA_MAX:
        raise ValueError(
            f"sigma must satisfy 0 < sigma < pi/sqrt(3) ≈ {SIGMA_MAX:.4f}, the standard deviation "
            f"of the logistic distribution: X_norm ~ N(0, sigma²) must leave room for the "
            f"correction variable X_corr in X_log = X_norm + X_corr; got sigma={sigma!r}"
        )
    try:
        temp_value = float(temperature)
    except (TypeError, ValueError):
        raise ValueError(f"temperature must be a positive number; got {temperature!r}") from None
    if not (math.isfinite(temp_value) and temp_value > 0):
        raise ValueError(
            f"temperature must be a positive finite number; got {temperature!r}. "
            "Use temperature=1.0 for the true posterior."
        )


class BarkerMinibatch(SubsamplingStep):
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
    cv_order : {None, 1, 2}
        Taylor control variates at the reference point (``docs/methods/mhss.md``); ``None``
        for none.
    delta : float, optional
        If given, in ``(0, 1)``: also grow the batch while the Corollary 1 estimate
        ``(6.4·E|Z|³ + 2·E|Z|)/√b`` exceeds it. The estimate is never below ``8.4/√b``, so
        ``delta`` forces at least ``(8.4/delta)²`` rows per test (7056 for ``delta = 0.1``)
        unless all rows are read. ``None`` (the paper's experiments) bounds only ``s²``.
    proposal_cov : array, optional
        Covariance of the random walk, used as given (scale 1, still tuned if ``tune``). By
        default the Laplace covariance at the MAP, scaled by ``κ/√d``.
    sigma : float
        Standard deviation ``σ`` of ``X_norm``; ``0 < σ < π/√3``. The paper uses 1 (shipped
        table). Other values compute their correction table on construction (about 10 s).
    **kwargs
        ``map_point``, ``scaling`` (κ, default 1.5), ``target_accept`` (default 0.2),
        ``tune``, ``compile_kwargs``, ``model``, ``rng``: see
        :class:`~pymc_subsample.steps.base.SubsamplingStep`.

    Attributes
    ----------
    batch_size, delta, sigma : int, float or None, float
        The knobs, validated.
    correction : CorrectionDistribution
        The law of ``X_corr``.

    Notes
    -----
    Sampler stats per draw: ``accepted``; ``n_data`` (the final minibatch size ``b``: rows read
    by the test; 0 for a proposal of zero prior density, rejected without data); ``s2`` (the
    variance estimate of ``Δ*`` at the decision, 0 when all rows were read); ``error_bound``
    (the Corollary 1 estimate for the final minibatch, 0 when all rows were read); ``scaling``
    (κ: the scale relative to ``1/√d`` for the Laplace proposal, the scale itself for a given
    ``proposal_cov``); ``non_finite`` (the prior, proposal ratio or a row term read was NaN or
    infinite: the proposal was rejected).

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
            step = pms.BarkerMinibatch(batch_size=100, cv_order=2)
            idata = pm.sample(step=step, random_seed=1)
        idata.sample_stats["n_data"].mean()
    """

    name = "barker_minibatch"
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
        cv_order: int | None = None,
        delta: float | None = None,
        proposal_cov: np.ndarray | None = None,
        sigma: float = 1.0,
        **kwargs,
    ):
        _check_cheap_knobs(batch_size, delta, sigma, temperature)
        super().__init__(
            vars, cv_order=cv_order, temperature=temperature, proposal_cov=proposal_cov, **kwargs
        )
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
        stats = {"n_data": result.n_data, "s2": result.s2, "error_bound": result.error_bound}
        return result.accepted, stats
