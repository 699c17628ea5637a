r"""AusterityMH: the sequential t-test of Korattikara, Chen & Welling (2014), as a pure kernel.

The Metropolis–Hastings test "accept iff ``u < π(θ')q(θ|θ') / (π(θ)q(θ'|θ))``" is rewritten
(paper, Eq. 2) as a test of a population mean against a threshold::

    accept  iff  μ = (1/N) Σ_i l_i  >  μ0,      l_i = ℓ_i(θ') − ℓ_i(θ),
    μ0 = [log u − (log p0(θ') − log p0(θ)) − (log q(θ|θ') − log q(θ'|θ))] / N.

Algorithm 1 of the paper then tests ``H0: μ = μ0`` on a sample of the ``l_i`` that grows by
``m`` rows at a time, drawn without replacement. After each batch, with ``n`` rows read::

    l̄ = mean of the sample,   s_l² = Σ (l − l̄)² / (n − 1),
    s = s_l / √n · √(1 − (n − 1)/(N − 1))           (Eq. 3, finite-population correction)
    t = (l̄ − μ0) / s                               (Eq. 4)
    δ = 1 − F_{t, n−1}(|t|)                         (Student-t survival function)

and the test stops as soon as ``δ < ε``, accepting iff ``l̄ > μ0``. Once all ``N`` rows are read
``s = 0`` and the decision is the exact MH one. ``ε = 0`` is therefore exact MH; larger ``ε``
reads less data and biases the stationary distribution by at most ``Δmax / (1 − η)``
(Theorem 1). Since ``δ ≤ 1/2``, any ``ε > 1/2`` decides after the first batch (Sec. 5.4).

With control variates (``docs/methods/austerity.md``, "Control variates") the population is
``l_i − r̂_i`` and ``Σ_i r̂_i / N`` moves into ``μ0``; :func:`austerity_mu0` takes it as ``cv_sum``.

The finite-population factor follows ``docs/methods/austerity.md``,
``√(1 − (n − 1)/(N − 1))``; the paper's Eq. 3 writes ``√(1 − n/N)``. The two differ by a
factor ``√(N/(N − 1))`` at most (the form used here is the slightly larger, i.e. more
conservative, one) and both vanish at ``n = N``.

References
----------
Korattikara, A., Chen, Y. & Welling, M. (2014). Austerity in MCMC land: cutting the
Metropolis–Hastings budget. *ICML*, PMLR 32(1):181–189. https://proceedings.mlr.press/v32/korattikara14.html
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from scipy.special import stdtr

from pymc_subsample.kernels.indexing import WithoutReplacementSampler

__all__ = [
    "SequentialTestResult",
    "austerity_mu0",
    "sequential_mh_test",
    "validate_austerity_knobs",
]


class SequentialTestResult(NamedTuple):
    """Outcome of one sequential MH test (Korattikara et al. 2014, Algorithm 1).

    Attributes
    ----------
    accepted : bool
        Whether the proposal is accepted.
    n_data : int
        Number of rows read (``n`` when the test stopped).
    n_batches : int
        Number of batches read.
    p_value : float
        The final ``δ`` that stopped the test; ``0.0`` when the decision was made exactly
        (all rows read, or an infinite difference settled it).
    exact : bool
        True when all ``N`` rows were read, so the decision is the exact MH decision.
    """

    accepted: bool
    n_data: int
    n_batches: int
    p_value: float
    exact: bool


def validate_austerity_knobs(
    epsilon: float, batch_size: int, n_total: int
) -> tuple[float, int, int]:
    """Check the AusterityMH knobs and return them as ``(float, int, int)``.

    Parameters
    ----------
    epsilon : float
        Bound on the per-step p-value ``δ`` (Korattikara et al. 2014, Algorithm 1, line 13);
        must be in ``[0, 1)``.
    batch_size : int
        Rows added per step (``m`` in Algorithm 1); must be in ``[1, n_total]``.
    n_total : int
        Number of rows ``N``; must be at least 1.

    Returns
    -------
    tuple of (float, int, int)
        ``(epsilon, batch_size, n_total)``.

    Raises
    ------
    ValueError
        If a value is out of range; the message names the argument and the valid range.
    TypeError
        If ``batch_size`` or ``n_total`` is not an integer.
    """
    try:
        n_total = operator.index(n_total)
    except TypeError:
        raise TypeError(f"n_total must be an integer; got {n_total!r}") from None
    if n_total < 1:
        raise ValueError(f"n_total must be at least 1 (the number of data rows); got {n_total}")
    try:
        batch_size = operator.index(batch_size)
    except TypeError:
        raise TypeError(f"batch_size must be an integer; got {batch_size!r}") from None
    if not 1 <= batch_size <= n_total:
        raise ValueError(
            f"batch_size must be in [1, n_total] = [1, {n_total}]; got {batch_size}. "
            "It is the number of rows added at each step of the sequential test; "
            "batch_size = n_total reads all rows at once (exact MH)."
        )
    epsilon = float(epsilon)
    if not 0.0 <= epsilon < 1.0:  # also rejects NaN
        raise ValueError(
            f"epsilon must be in [0, 1); got {epsilon}. Use 0 for exact MH decisions "
            "(every test reads all rows); larger values read less data and add bias "
            "(Korattikara et al. 2014, Theorem 1); values above 0.5 always stop after "
            "the first batch."
        )
    return epsilon, batch_size, n_total


def austerity_mu0(
    log_u: float,
    log_prior_ratio: float,
    log_q_ratio: float,
    n_total: int,
    cv_sum: float = 0.0,
) -> float:
    r"""Threshold ``μ0`` of the sequential MH test (Korattikara et al. 2014, Eq. 2).

    .. math::

        μ_0 = \frac{1}{N}\Big[\log u - \big(\log p_0(θ') - \log p_0(θ)\big)
              - \big(\log q(θ\mid θ') - \log q(θ'\mid θ)\big) - \sum_i \hat r_i\Big]

    Parameters
    ----------
    log_u : float
        ``log u`` with ``u ~ Uniform(0, 1)``.
    log_prior_ratio : float
        ``log p0(θ') − log p0(θ)``: everything in the log target that does not grow with
        ``N`` (priors, Jacobians). The temperature divides the ``ℓ_i`` only, not this term.
    log_q_ratio : float
        ``log q(θ|θ') − log q(θ'|θ)``; 0 for symmetric proposals (Eq. 14 for SGLD).
    n_total : int
        Number of rows ``N``.
    cv_sum : float, optional
        ``Σ_i r̂_i``, the control-variate sum subtracted from the population
        (``docs/methods/austerity.md``); 0 without control variates.

    Returns
    -------
    float
        ``μ0``. ``-inf`` when ``u = 0`` (always accept); ``+inf`` when the proposal has zero
        prior density.
    """
    return (log_u - log_prior_ratio - log_q_ratio - cv_sum) / n_total


def sequential_mh_test(
    row_diffs: Callable[[np.ndarray], np.ndarray],
    n_total: int,
    mu0: float,
    *,
    epsilon: float,
    batch_size: int,
    rng: np.random.Generator,
) -> SequentialTestResult:
    """Approximate MH test by a sequential t-test (Korattikara et al. 2014, Algorithm 1).

    Rows are read ``batch_size`` at a time, without replacement
    (:class:`~pymc_subsample.kernels.indexing.WithoutReplacementSampler`). After each batch the
    standard error ``s`` of the sample mean (Eq. 3, with the finite-population correction
    ``√(1 − (n − 1)/(N − 1))``), the statistic ``t = (l̄ − μ0)/s`` (Eq. 4) and the p-value
    ``δ = 1 − F_{t,n−1}(|t|)`` are computed; the test stops when ``δ < ε`` and accepts iff
    ``l̄ > μ0``. When all ``N`` rows have been read the decision is exact: accept iff
    ``μ > μ0``.

    Parameters
    ----------
    row_diffs : callable
        ``row_diffs(idx)`` returns the population values ``l_i`` for the row indices ``idx``
        (an int64 array), as a float array of the same shape. The caller has already divided
        by the temperature and subtracted the control variates, if any.
    n_total : int
        Number of rows ``N``.
    mu0 : float
        Threshold from :func:`austerity_mu0`. Must not be NaN; ``±inf`` is allowed.
    epsilon : float
        Bound on ``δ``, in ``[0, 1)``. ``0`` reproduces the exact MH decision and always reads
        all ``N`` rows.
    batch_size : int
        Rows per batch (``m``), in ``[1, N]``. The t-approximation relies on the central limit
        theorem, so batches of a few hundred rows are the paper's choice (Sec. 5.5).
    rng : numpy.random.Generator
        Source of the row order.

    Returns
    -------
    SequentialTestResult
        Decision, rows and batches read, final ``δ`` and whether all rows were read.

    Raises
    ------
    ValueError
        On invalid knobs (see :func:`validate_austerity_knobs`), a NaN ``mu0``, a
        ``row_diffs`` result of the wrong shape, or NaN values in it.

    Notes
    -----
    Edge cases, all chosen so that ``ε = 0`` stays exact and no division by zero occurs:

    * ``n = 1`` (first batch of size 1): no variance estimate exists, so the test continues.
    * ``s = 0`` with ``n < N`` (every value read so far is equal): treated as the limit
      ``s → 0⁺`` of the t-test, i.e. ``δ = 0`` if ``l̄ ≠ μ0`` (decide when ``ε > 0``) and
      ``δ = 1`` if ``l̄ = μ0`` (read more). This keeps the test continuous in ``s`` (a rounding
      error's worth of spread would otherwise flip it) and lets genuinely constant
      populations — an exact control variate, a proposal that leaves the likelihood
      unchanged — decide after one batch instead of a full pass. The price is the paper's
      Sec. 5.5 caveat in its sharpest form: on very sparse populations (a few rare rows
      carry the mean) a batch that misses them looks constant; use larger batches there.
    * ``batch_size = N``: one batch, an exact decision.
    * An infinite difference (``l_i = -inf``: the proposal has zero likelihood for a row)
      settles the sum whatever the unread rows are, so the test stops at once: reject on
      ``-inf``, accept on ``+inf`` unless ``μ0 = +inf``; ``p_value`` is 0. ``exact`` is only
      True if all rows happened to be read.

    The running mean and the sum of squared deviations are combined batch by batch
    (Chan, Golub & LeVeque's pairwise update) rather than as raw sums of ``l`` and ``l²``:
    the raw form loses every digit of the variance when ``|l̄|`` is far larger than the
    spread, which is exactly the control-variate regime. ``δ`` is computed by
    ``scipy.special.stdtr(n − 1, −|t|)``, the function behind ``scipy.stats.t.sf``, without
    the distribution-object overhead.
    """
    epsilon, batch_size, n_total = validate_austerity_knobs(epsilon, batch_size, n_total)
    mu0 = float(mu0)
    if math.isnan(mu0):
        raise ValueError("mu0 is NaN; check the prior, proposal and log u terms of austerity_mu0")

    sampler = WithoutReplacementSampler(n_total, rng)
    n = 0  # rows read
    n_batches = 0
    total = 0.0  # Σ l over the rows read
    m2 = 0.0  # Σ (l − l̄)² over the rows read
    while True:
        idx, values = sampler.next_values(batch_size, row_diffs)
        nb = idx.size
        n_batches += 1
        b_sum = float(values.sum())
        if not math.isfinite(b_sum):
            if math.isnan(b_sum):
                raise ValueError(
                    "row_diffs returned NaN (or both +inf and -inf) log-likelihood differences"
                )
            n += nb
            accepted = b_sum > 0.0 and mu0 != math.inf
            return SequentialTestResult(accepted, n, n_batches, 0.0, n == n_total)
        b_mean = b_sum / nb
        dev = values - b_mean
        b_m2 = float(dev @ dev)
        if n:
            d = b_mean - total / n
            m2 += b_m2 + d * d * (n * nb / (n + nb))
        else:
            m2 = b_m2
        total += b_sum
        n += nb
        mean = total / n

        if n == n_total:  # s = 0: the exact MH decision (Sec. 4)
            return SequentialTestResult(mean > mu0, n, n_batches, 0.0, True)
        if epsilon == 0.0 or n == 1:  # δ ≥ 0 never beats ε = 0; n = 1 has no variance
            continue
        diff = mean - mu0
        var_mean = m2 / ((n - 1) * n) * ((n_total - n) / (n_total - 1))  # s², Eq. 3
        if var_mean > 0.0:
            delta = float(stdtr(n - 1, -abs(diff) / math.sqrt(var_mean)))
        else:  # limit s → 0⁺ (see Notes)
            delta = 0.0 if diff != 0.0 else 1.0
        if delta < epsilon:
            return SequentialTestResult(diff > 0.0, n, n_batches, delta, False)
