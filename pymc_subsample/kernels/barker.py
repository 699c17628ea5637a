"""The minibatch Barker acceptance test (Seita, Pan, Chen & Canny 2017, Algorithm 1).

The Barker test accepts ``θ'`` with probability ``S(Δ) = 1/(1 + e^{−Δ})``, i.e. iff
``Δ + X_log > 0`` for a standard logistic ``X_log`` (paper, eq. 10), where

    Δ = Σ_i l_i + log p0(θ') − log p0(θ) + log q(θ|θ') − log q(θ'|θ),   l_i = ℓ_i(θ') − ℓ_i(θ).

A minibatch of ``b`` rows drawn without replacement gives ``Δ* = N·mean(l_batch) + rest``,
approximately ``N(Δ, s²)``. Writing ``X_log = X_norm + X_corr`` with ``X_norm ~ N(0, σ²)`` and
``X_corr`` from :mod:`pymc_subsample.kernels.barker_correction` (eq. 12), the test
``Δ* + X_nc + X_corr > 0`` with ``X_nc ~ N(0, σ² − s²)`` is the Barker test as long as
``s² < σ²`` (eq. 13; the paper fixes ``σ = 1``). The batch grows by ``batch_size`` rows until
that holds (and, optionally, until the Corollary 1 error estimate is at most ``delta``).

Variance estimate. Rows are drawn without replacement, so (Cochran 1977, Thms 2.2 and 2.4)
``Var(mean_b) = (S²/b)(1 − b/N)`` with ``S²`` the population variance (divisor ``N − 1``), which
the sample variance with divisor ``b − 1`` estimates without bias. Hence

    s² = N² · var(l_batch, ddof=1) / b · (1 − b/N),

unbiased for ``Var(Δ*)`` and exactly 0 when all ``N`` rows are read (then ``Δ* = Δ``). The
finite-population factor is needed for correctness, not only for economy: ``s²`` sets the
variance ``σ² − s²`` of the added noise ``X_nc``, and dropping the factor would overstate the
variance of ``Δ*`` by ``1/(1 − b/N)``, leaving the total noise short of ``σ²``.

The kernel is pure NumPy and knows nothing about PyMC: the caller supplies the per-row
differences as a function of row indices (divided by the temperature, and replaced by the
control-variate residuals ``ξ_i`` with ``Σ r̂_i`` moved into ``log_ratio_rest`` when control
variates are used; see ``docs/methods/barker.md``, "Control variates").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..errors import positive_int
from .barker_correction import SIGMA_MAX, CorrectionDistribution
from .indexing import WithoutReplacementSampler

__all__ = [
    "validate_barker_step_knobs",
    "BarkerResult",
    "barker_error_estimate",
    "barker_minibatch_test",
    "validate_barker_knobs",
]

# Novak's constants in Lemma 3 / Corollary 1 of Seita et al. (2017), eq. 18.
_NOVAK_THIRD = 6.4
_NOVAK_FIRST = 2.0
# For standardised terms (E Z² = 1) Cauchy–Schwarz, E Z² ≤ (E|Z|·E|Z|³)^½, gives E|Z|³ ≥ 1/E|Z|,
# and E|Z| ≤ 1, so 6.4·E|Z|³ + 2·E|Z| ≥ 6.4/a + 2a ≥ 8.4 (a = E|Z|): the estimate is ≥ 8.4/√b.
_MIN_ERROR_NUMERATOR = _NOVAK_THIRD + _NOVAK_FIRST


def _no_spread(sd: float, max_abs: float) -> bool:
    """True when a standard deviation is zero up to the rounding of values of size ``max_abs``."""
    return sd <= 8 * np.finfo(np.float64).eps * max_abs


class BarkerResult(NamedTuple):
    """Outcome of one minibatch Barker test.

    Attributes
    ----------
    accepted : bool
        Whether the proposal is accepted.
    n_data : int
        Rows read: the final minibatch size ``b`` (0 if the test was decided without data).
    s2 : float
        Estimated variance of ``Δ*`` at the decision (0 when all rows were read).
    error_bound : float
        Corollary 1 estimate of the error of this test's acceptance probability, for the final
        minibatch (0 when all rows were read).
    """

    accepted: bool
    n_data: int
    s2: float
    error_bound: float


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def validate_barker_knobs(batch_size: int, n_total: int, delta: float | None) -> None:
    """Check the settings of :func:`barker_minibatch_test`, raising ``ValueError`` if invalid.

    Parameters
    ----------
    batch_size : int
        Rows added per step, ``m`` in Algorithm 1; at least 2 (a variance needs two rows). It may
        exceed ``n_total``, in which case all rows are read and the test is the exact Barker test.
    n_total : int
        Number of rows ``N``, at least 1.
    delta : float or None
        Bound on the Corollary 1 error estimate, in ``(0, 1)``, or ``None`` for no bound. The
        estimate is never below ``8.4/√b``, so ``delta`` forces ``b ≥ (8.4/delta)²`` rows unless
        all rows are read.
    """
    if not _is_int(batch_size) or batch_size < 2:
        raise ValueError(
            f"batch_size must be an integer >= 2 (the variance of the minibatch needs two rows), "
            f"got batch_size={batch_size!r}"
        )
    if not _is_int(n_total) or n_total < 1:
        raise ValueError(f"n_total must be a positive integer, got n_total={n_total!r}")
    if delta is not None:
        try:
            value = float(delta)
        except (TypeError, ValueError):
            raise ValueError(f"delta must be a number in (0, 1) or None, got {delta!r}") from None
        if not (0.0 < value < 1.0):
            raise ValueError(
                f"delta must be in (0, 1) (it bounds a difference of probabilities; use None for "
                f"no bound), got delta={delta!r}"
            )


def barker_error_estimate(l_batch: np.ndarray, n_total: int) -> float:
    """Corollary 1 error estimate ``(6.4·E|Z|³ + 2·E|Z|)/√b`` of Seita et al. (2017), eq. 20.

    ``Z`` are the standardised terms ``(l_i − l̄)/sd(l)`` of the minibatch (moments of the
    empirical distribution, so ``E Z² = 1``), estimating the Kolmogorov distance between the law
    of ``Δ*`` and ``N(Δ, s²)`` and hence (Corollary 2) the error of the acceptance probability.
    The estimate does not depend on the scale of ``l`` and is at least ``8.4/√b``.

    Parameters
    ----------
    l_batch : array_like, shape (b,)
        The minibatch values ``l_i`` (or control-variate residuals).
    n_total : int
        Number of rows ``N``; when ``b >= N`` the sum is exact and the estimate is 0.

    Returns
    -------
    float
        The estimate; 0 when ``b >= N`` or when the batch has no spread beyond rounding
        (nothing to approximate).
    """
    values = np.asarray(l_batch, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError("l_batch must be a non-empty 1-d array")
    if not _is_int(n_total) or n_total < values.size:
        raise ValueError(
            f"n_total must be an integer >= len(l_batch) = {values.size}, got {n_total!r}"
        )
    if values.size >= n_total:
        return 0.0
    if not np.all(np.isfinite(values)):
        raise ValueError("l_batch must be finite")
    b = values.size
    scale = float(np.max(np.abs(values)))
    if scale == 0.0:
        return 0.0
    scaled = values / scale  # the estimate is scale-free; this avoids overflow and underflow
    centred = scaled - scaled.sum() / b
    sd = math.sqrt(float(np.dot(centred, centred)) / b)
    if _no_spread(sd, 1.0):
        return 0.0  # nothing for the normal approximation to miss
    abs_z = np.abs(centred) / sd
    abs_first = float(abs_z.sum()) / b  # E|Z|
    abs_third = float(np.dot(abs_z * abs_z, abs_z)) / b  # E|Z|³
    return (_NOVAK_THIRD * abs_third + _NOVAK_FIRST * abs_first) / math.sqrt(b)


def barker_minibatch_test(
    row_diffs: Callable[[np.ndarray], np.ndarray],
    n_total: int,
    log_ratio_rest: float,
    *,
    batch_size: int,
    correction: CorrectionDistribution,
    rng: np.random.Generator,
    delta: float | None = None,
) -> BarkerResult:
    """Run one minibatch Barker acceptance test (Seita et al. 2017, Algorithm 1).

    Parameters
    ----------
    row_diffs : callable
        ``row_diffs(idx)`` returns ``l_i = (ℓ_i(θ') − ℓ_i(θ))/K`` for the row indices ``idx`` (an
        int64 array), or the residuals ``ξ_i = l_i − r̂_i`` when control variates are used.
        ``−inf`` entries decide the test (reject; ``+inf``: accept); NaN is an error.
    n_total : int
        Number of rows ``N``.
    log_ratio_rest : float
        ``log p0(θ') − log p0(θ) + log q(θ|θ') − log q(θ'|θ)`` (plus ``Σ r̂_i`` with control
        variates). ``−inf`` rejects without reading data.
    batch_size : int
        Rows added per step (``m``); the first minibatch has this size too.
    correction : CorrectionDistribution
        Law of ``X_corr``; its ``sigma`` is the ``σ`` of ``X_norm`` (1 in the paper).
    rng : numpy.random.Generator
        Used for the row indices, ``X_nc`` and ``X_corr`` (give the kernel its own stream).
    delta : float, optional
        If given, also grow the batch while :func:`barker_error_estimate` exceeds it.

    Returns
    -------
    BarkerResult

    Notes
    -----
    ``Δ* = N·mean(l_batch) + log_ratio_rest`` and ``s² = N²·var(l_batch, ddof=1)/b·(1 − b/N)``
    (module docstring). The batch grows while ``s² ≥ σ²`` (or the error estimate exceeds
    ``delta``); then ``X_nc ~ N(0, σ² − s²)``, ``X_corr ~ correction``, and the proposal is
    accepted iff ``Δ* + X_nc + X_corr > 0``. With all rows read, ``s² = 0`` and this is the exact
    Barker test up to the correction table's CDF error. Mean and variance are updated batch by
    batch (Chan, Golub & LeVeque 1979); with ``delta`` the estimate costs O(b) per step once
    ``b ≥ (8.4/delta)²``.
    """
    validate_barker_knobs(batch_size, n_total, delta)
    rest = float(log_ratio_rest)
    if math.isnan(rest):
        raise ValueError("log_ratio_rest is NaN")
    if math.isinf(rest):
        return BarkerResult(rest > 0, 0, 0.0, 0.0)

    sigma2 = float(correction.sigma) ** 2
    n_total = int(n_total)
    sampler = WithoutReplacementSampler(n_total, rng)
    values = np.empty(min(n_total, 4 * batch_size))
    n = 0
    mean = 0.0
    m2 = 0.0  # sum of squared deviations from the mean
    max_abs = 0.0
    while True:
        idx, batch = sampler.next_values(batch_size, row_diffs)
        if not np.all(np.isfinite(batch)):
            has_pos, has_neg = bool(np.any(batch == np.inf)), bool(np.any(batch == -np.inf))
            if np.any(np.isnan(batch)) or (has_pos and has_neg):
                raise ValueError("row_diffs returned NaN (or both +inf and -inf)")
            # An infinite term makes the full sum Δ infinite: the exact test is decided.
            return BarkerResult(has_pos, n + batch.size, 0.0, 0.0)

        k = batch.size
        batch_mean = float(batch.sum()) / k
        dev = batch - batch_mean
        batch_m2 = float(np.dot(dev, dev))
        shift = batch_mean - mean
        total = n + k
        mean += shift * k / total
        m2 += batch_m2 + shift * shift * n * k / total
        if total > values.size:
            values = np.resize(values, min(n_total, max(total, 2 * values.size)))
        values[n:total] = batch
        n = total
        max_abs = max(max_abs, float(np.max(np.abs(batch))))

        if n >= n_total:
            s2, error = 0.0, 0.0
            break
        s2 = n_total * (n_total - n) / n * (m2 / (n - 1))
        if s2 >= sigma2:
            continue
        if delta is None:
            error = barker_error_estimate(values[:n], n_total)
            break
        if _MIN_ERROR_NUMERATOR / math.sqrt(n) > delta and not _no_spread(
            math.sqrt(m2 / n), max_abs
        ):
            continue  # with any spread the estimate is at least 8.4/√n: too large yet
        error = barker_error_estimate(values[:n], n_total)
        if error <= delta:
            break

    delta_star = n_total * mean + rest
    x_nc = math.sqrt(sigma2 - s2) * float(rng.standard_normal())
    x_corr = float(correction.sample(rng))
    return BarkerResult(bool(delta_star + x_nc + x_corr > 0.0), n, float(s2), float(error))

def validate_barker_step_knobs(batch_size, delta, sigma, temperature) -> None:
    """BarkerMinibatch's knobs, checked before the (costly) model setup: ``batch_size``,
    ``delta``, ``sigma`` (of ``X_norm``, below the logistic sd) and ``temperature``."""
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
