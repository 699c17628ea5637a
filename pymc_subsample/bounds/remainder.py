r"""The parameter part ``M(θ, θ')`` of the MHSS bound and the region on which region constants hold.

With :math:`a = \theta - \hat\theta`, :math:`a' = \theta' - \hat\theta`,
:math:`h = \theta' - \theta`, :math:`\omega = \cos\angle(a, h)` and
:math:`\omega' = \cos\angle(a', h)`, Corollary 2 of Prado, Nemeth & Sherlock (2024) gives

.. math::

    M_1 = \lVert h \rVert \max\bigl(\lVert a \rVert D_1(\omega),
                                    \lVert a' \rVert D_1(\omega')\bigr), \qquad
    M_2 = \tfrac12 \lVert h \rVert \bigl(\lVert h \rVert^2 / 6
          + \lVert a \rVert^2 D_2(\omega) + \lVert a' \rVert^2 D_2(\omega')\bigr),

with the angle factors of Lemma 1,

.. math::

    D_1(\omega) = \frac{1 + |\omega|}{2}, \qquad
    D_2(\omega) = \frac{(2 + |\omega| c)^{3/2}}{c \, 3^{3/2}}, \qquad
    c = \sqrt{2 + \omega^2 / 4} - |\omega| / 2,

the exact maxima of :math:`|u^\top \hat h| |u^\top \hat a|` and
:math:`|u^\top \hat h| (u^\top \hat a)^2` over unit vectors :math:`u`. ``M`` is symmetric in
:math:`(\theta, \theta')`, which MHSS relies on (Sec. 2).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import chi2

__all__ = [
    "REGION_TAIL",
    "angle_factor",
    "check_order",
    "check_region",
    "region_radius",
    "remainder_scale",
]

#: Probability, under the Laplace approximation, of a point outside the region (see
#: :func:`region_radius`).
REGION_TAIL = 1e-6

_SQRT27 = 3.0**1.5


def check_order(order: int) -> None:
    """Refuse a Taylor order other than 1 or 2."""
    if isinstance(order, bool) or order not in (1, 2):
        raise ValueError(f"order must be 1 or 2 (the Taylor control-variate order), got {order!r}")


def _d1(abs_omega: float) -> float:
    """Lemma 1 angle factor for order 1: max over unit u of |u.h||u.a| for unit h, a."""
    return 0.5 * (1.0 + abs_omega)


def _d2(abs_omega: float) -> float:
    """Lemma 1 angle factor for order 2: max over unit u of |u.h|(u.a)^2 for unit h, a."""
    c = math.sqrt(2.0 + 0.25 * abs_omega * abs_omega) - 0.5 * abs_omega
    return (2.0 + abs_omega * c) ** 1.5 / (c * _SQRT27)


def angle_factor(a: int, b: int, abs_cos: np.ndarray | float) -> np.ndarray:
    r"""``max |uᵀp̂|^a |uᵀq̂|^b`` over unit vectors ``u``, for unit ``p̂, q̂`` with
    ``|cos∠(p̂, q̂)| = abs_cos`` and ``a + b ≤ 3``: Lemma 1's factors, elementwise.

    ``D_1`` for ``(1, 1)``, ``D_2`` for ``(2, 1)`` and ``(1, 2)``, and 1 when ``a`` or ``b`` is
    0 (Cauchy–Schwarz). Rows with two predictors use it on each mixed term of their
    directional derivative (:func:`pymc_subsample.bounds.family.combine_partials`); the result
    carries a relative margin of 1e-12 for the rounding of ``abs_cos``.
    """
    w = np.clip(np.abs(np.asarray(abs_cos, dtype=np.float64)), 0.0, 1.0)
    if a == 0 or b == 0:
        return np.ones_like(w)
    if (a, b) == (1, 1):
        return 0.5 * (1.0 + w) * (1.0 + 1e-12)
    if (a, b) in ((2, 1), (1, 2)):
        c = np.sqrt(2.0 + 0.25 * w * w) - 0.5 * w
        return (2.0 + w * c) ** 1.5 / (c * _SQRT27) * (1.0 + 1e-12)
    raise ValueError(f"angle factors are known for a + b <= 3 only, got ({a}, {b})")


def remainder_scale(
    theta: np.ndarray,
    theta_prime: np.ndarray,
    theta_hat: np.ndarray,
    order: int,
    *,
    sharp: bool = True,
) -> float:
    r"""Parameter part :math:`M(\theta, \theta')` of the MHSS bound (Corollary 2).

    With :math:`a = \theta - \hat\theta`, :math:`a' = \theta' - \hat\theta`,
    :math:`h = \theta' - \theta`, :math:`\omega = \cos\angle(a, h)`,
    :math:`\omega' = \cos\angle(a', h)`:

    .. math::

        M_1 = \lVert h \rVert \max(\lVert a \rVert D_1(\omega), \lVert a' \rVert D_1(\omega')),
        \qquad
        M_2 = \tfrac12 \lVert h \rVert (\lVert h \rVert^2 / 6 + \lVert a \rVert^2 D_2(\omega)
              + \lVert a' \rVert^2 D_2(\omega')),

    with :math:`D_1, D_2` from Lemma 1 (see the module docstring). The angle of a zero vector
    is irrelevant (it multiplies a zero norm); ``M = 0`` when :math:`\theta' = \theta`.
    ``M`` is symmetric in :math:`(\theta, \theta')`.

    Called once per MCMC iteration, so it does one stacked subtraction and one 3x3 Gram product
    and the rest in scalar arithmetic (a few microseconds for d ~ 10).

    Parameters
    ----------
    theta, theta_prime, theta_hat : numpy.ndarray, shape (d,)
        Current point, proposal and control-variate centre (raveled, unconstrained).
    order : {1, 2}
        Order of the Taylor control variate.
    sharp : bool
        Lemma 1's angle factors (rows with one linear predictor); ``False`` sets
        :math:`D_1 = D_2 = 1`, their maximum, as rows with several predictors need
        (:func:`normal_scale_row_constants`).

    Returns
    -------
    float
        :math:`M_1` or :math:`M_2`, non-negative (NaN if an input is NaN).

    Raises
    ------
    ValueError
        If ``order`` is not 1 or 2, or the three vectors are not 1-d of the same length.
    """
    check_order(order)
    theta = np.asarray(theta, dtype=np.float64)
    theta_prime = np.asarray(theta_prime, dtype=np.float64)
    theta_hat = np.asarray(theta_hat, dtype=np.float64)
    if theta.ndim != 1 or theta.shape != theta_prime.shape or theta.shape != theta_hat.shape:
        raise ValueError(
            "theta, theta_prime and theta_hat must be 1-d arrays of the same length, got shapes "
            f"{theta.shape}, {theta_prime.shape}, {theta_hat.shape}"
        )
    # Rows: a, a', h. h is formed directly (not as a' - a) so that it keeps full relative
    # precision when theta' is close to theta far from theta_hat.
    v = np.subtract((theta, theta_prime, theta_prime), (theta_hat, theta_hat, theta))
    (aa, _, ah), (_, apap, aph), (_, _, hh) = v.dot(v.T).tolist()
    if hh <= 0.0:
        return 0.0
    norm_h = math.sqrt(hh)
    norm_a = math.sqrt(aa)
    norm_ap = math.sqrt(apap)
    # |cos| of the angles, clipped into [0, 1] against rounding; 0 for a zero vector.
    w = min(abs(ah) / (norm_a * norm_h), 1.0) if norm_a > 0.0 else 0.0
    wp = min(abs(aph) / (norm_ap * norm_h), 1.0) if norm_ap > 0.0 else 0.0
    if not sharp:
        w = wp = 1.0  # D_1(1) = D_2(1) = 1, the largest values
    if order == 1:
        return norm_h * max(norm_a * _d1(w), norm_ap * _d1(wp))
    return 0.5 * norm_h * (hh / 6.0 + aa * _d2(w) + apap * _d2(wp))



def check_region(order: int, radius: float) -> None:
    """Refuse a Taylor order other than 1 or 2, or a region radius that is not finite > 0."""
    check_order(order)
    if not (math.isfinite(radius) and radius > 0.0):
        raise ValueError(f"radius must be finite and positive, got {radius!r}")


def region_radius(dim: int, tail: float = REGION_TAIL, margin: float = 1.0) -> float:
    r"""Radius ``r`` of the region ``R = {θ : ‖φ‖ ≤ r}``, ``φ = L⁻¹(θ − θ̂)``.

    Under the Laplace approximation ``φ ~ N(μ, I)`` with ``‖μ‖`` below the mode tolerance
    (0.25 sd), so ``‖φ‖ ≤ ‖μ‖ + χ`` with ``χ² ~ χ²_d``: ``r = √(χ²_d(1 − tail)) + margin``
    leaves a point outside ``R`` with probability below ``tail`` (10⁻⁶), and a move leaves it
    at most twice as often. A larger ``r`` costs only a factor ``e^{r s_i}`` in ``c_i``,
    close to 1 on tall data where ``s_i = ‖Lᵀx_i‖`` is small (``docs/methods/mhss.md``).
    """
    return float(np.sqrt(chi2.isf(tail, dim)) + margin)
