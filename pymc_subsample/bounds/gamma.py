r"""Gamma rows with the log link and a fixed shape.

With mean :math:`\mu = e^\eta` and shape :math:`\alpha` (rate :math:`\alpha/\mu`),

.. math::

    f = \alpha\log\alpha - \alpha\eta + (\alpha - 1)\log y - \alpha y e^{-\eta}
        - \log\Gamma(\alpha), \qquad f' = \alpha(y e^{-\eta} - 1),

    f'' = -\alpha y e^{-\eta} = -f''',

unbounded as :math:`\eta \to -\infty`; on :math:`[\eta_-, \eta_+]` both are at most
:math:`\alpha y e^{-\eta_-}`, so the constants hold on a region of the Laplace frame. The
predictor is :math:`\log(\alpha \cdot \text{scale})` simplified: ``beta=alpha / exp(η)``,
``beta=alpha * exp(-η)`` and an offset are all read.

**Sampled shape**, :math:`\lambda = \log\alpha` a second predictor. With
:math:`w = y e^{-\eta}` and :math:`h(w) = \log w - w`, the row is
:math:`f = \alpha(\log w + \lambda) - \alpha w - \log\Gamma(\alpha) - \log y`, and

.. math::

    \partial^2_\eta f = -\partial^3_\eta f = \partial^2_\eta\partial_\lambda f = -\alpha w,
    \qquad \partial_\eta\partial_\lambda f = \partial_\eta\partial^2_\lambda f
    = \alpha(w - 1),

    \partial^2_\lambda f = \alpha\,(h(w) + 2 - g_2(\alpha)), \qquad
    \partial^3_\lambda f = \alpha\,(h(w) + 3 - g_3(\alpha)),

with :math:`g_2 = \psi(\alpha) + \alpha\psi'(\alpha) - \log\alpha` (decreasing, from
:math:`+\infty` to 1) and :math:`g_3 = \psi + 3\alpha\psi' + \alpha^2\psi'' - \log\alpha`
(one interior extremum, at :data:`G3_CRITICAL`, then to 2). On the region's box,
:math:`\alpha \in [\alpha_-, \alpha_+]` and :math:`w \in [w_-, w_+]`, so
:func:`gamma_scale_suprema` takes :math:`\alpha_+ w_+`, :math:`\alpha_+\max|w_\pm - 1|`, and
:math:`\alpha_+` times the largest :math:`|h + c - g|` over the ranges of ``h`` (concave, its
maximum −1 at ``w = 1``) and of ``g``.
"""

from __future__ import annotations

import math

import numpy as np
import pytensor.tensor as pt
from pytensor.tensor.random.basic import GammaRV
from scipy.optimize import brentq
from scipy.special import digamma, gammaln, polygamma

from pymc_subsample.bounds.family import (
    Family,
    LocationScaleFamily,
    combine_partials,
    register,
)
from pymc_subsample.bounds.remainder import check_region

__all__ = [
    "G3_CRITICAL",
    "GammaLog",
    "GammaScale",
    "gamma_scale_row_constants",
    "gamma_scale_suprema",
]


@register
class GammaLog(Family):
    """Gamma with mean ``e^η`` and a fixed shape ``alpha``."""

    name = "gamma_log"
    description = "Gamma with alpha fixed and beta=alpha / exp(eta)"
    rv_op = GammaRV
    params = ("alpha",)
    region_only = True
    link_hint = "its Gamma mean alpha/beta is not exp(eta) with eta affine in the parameters"

    def read(self, dist_params):
        alpha, scale = dist_params  # PyMC's Gamma(alpha, beta) is gamma(shape, 1/beta)
        return pt.log(alpha * scale), (alpha,)

    def check_y(self, y):
        y = super().check_y(y)
        if np.any(y <= 0.0):
            raise ValueError(f"family {self.name!r} needs positive y")
        return y

    def terms(self, eta, y, alpha):
        w = alpha * y * pt.exp(-eta)
        f = (alpha * pt.log(alpha) - alpha * eta + (alpha - 1.0) * pt.log(y) - w
             - pt.gammaln(alpha))
        return f, w - alpha, -w

    def loglik(self, eta, y, alpha):
        return (alpha * np.log(alpha) - alpha * eta + (alpha - 1.0) * np.log(y)
                - alpha * y * np.exp(-eta) - gammaln(alpha))

    def derivative_sup(self, order, y, alpha, *, lower=-math.inf, upper=math.inf):
        with np.errstate(over="ignore"):
            return alpha * np.asarray(y, dtype=np.float64) * np.exp(-np.asarray(lower))


def _g2(alpha):
    return digamma(alpha) + alpha * polygamma(1, alpha) - np.log(alpha)


def _g3(alpha):
    return (digamma(alpha) + 3.0 * alpha * polygamma(1, alpha)
            + alpha**2 * polygamma(2, alpha) - np.log(alpha))


#: Where ``g_3`` turns, its only extremum (``4ψ′ + 5αψ″ + α²ψ‴ = 1/α``), near 0.472.
G3_CRITICAL = brentq(
    lambda a: 4.0 * polygamma(1, a) + 5.0 * a * polygamma(2, a) + a**2 * polygamma(3, a) - 1.0 / a,
    0.2, 1.0, xtol=1e-14,
)
#: Absolute margin on the suprema for the rounding of ``g_2``, ``g_3`` at large α.
_ROUNDING = 1e-8


def gamma_scale_suprema(
    order: int, y: np.ndarray, eta_range: tuple, log_alpha_range: tuple
) -> dict[tuple[int, int], np.ndarray]:
    """``S_{a,b} ≥ sup |∂^a_η ∂^b_λ f|`` over the box, for ``a + b = order + 1`` (module
    docstring); ``eta_range`` and ``log_alpha_range`` are ``(lower, upper)`` pairs."""
    y = np.asarray(y, dtype=np.float64)
    eta_lo, eta_hi = (np.asarray(v, dtype=np.float64) for v in eta_range)
    lam_lo, lam_hi = (np.asarray(v, dtype=np.float64) for v in log_alpha_range)
    alpha_lo, alpha_hi = np.exp(lam_lo), np.exp(lam_hi)
    w_lo, w_hi = y * np.exp(-eta_hi), y * np.exp(-eta_lo)
    aw = alpha_hi * w_hi
    mixed = alpha_hi * np.maximum(np.abs(w_lo - 1.0), np.abs(w_hi - 1.0))

    def h(w):
        return np.log(w) - w

    h_max, h_min = h(np.clip(1.0, w_lo, w_hi)), np.minimum(h(w_lo), h(w_hi))
    if order == 1:
        g_lo, g_hi = _g2(alpha_hi), _g2(alpha_lo)  # g_2 decreases
        pure = alpha_hi * (np.maximum(np.abs(h_max + 2.0 - g_lo), np.abs(h_min + 2.0 - g_hi))
                           + _ROUNDING)
        return {(2, 0): aw, (1, 1): mixed, (0, 2): pure}
    ends = np.stack(np.broadcast_arrays(_g3(alpha_lo), _g3(alpha_hi)))
    inside = (alpha_lo <= G3_CRITICAL) & (G3_CRITICAL <= alpha_hi)
    turn = np.where(inside, _g3(G3_CRITICAL), ends[0])
    g_lo = np.minimum(ends.min(axis=0), turn)
    g_hi = np.maximum(ends.max(axis=0), turn)
    pure = alpha_hi * (np.maximum(np.abs(h_max + 3.0 - g_lo), np.abs(h_min + 3.0 - g_hi))
                       + _ROUNDING)
    return {(3, 0): aw, (2, 1): aw, (1, 2): mixed, (0, 3): pure}


def gamma_scale_row_constants(
    order: int,
    s_eta: np.ndarray,
    s_log_alpha: np.ndarray,
    y: np.ndarray,
    eta_hat: np.ndarray,
    log_alpha_hat: np.ndarray,
    radius: float,
    cos: np.ndarray | None = None,
) -> np.ndarray:
    """Whitened constants of Gamma rows with a sampled shape, on ``‖φ‖ ≤ r``:
    :func:`~pymc_subsample.bounds.family.combine_partials` (``Σ_{a+b=k+1} C(k+1, a) S_{a,b}
    s_η^a s_λ^b`` times angle factors for ``cos``) with :func:`gamma_scale_suprema` on the
    region's box, for use with ``M`` without Lemma 1's angle factors."""
    sup = _region_suprema(order, s_eta, s_log_alpha, y, eta_hat, log_alpha_hat, radius)
    return combine_partials(order, sup, s_eta, s_log_alpha, cos)


def _region_suprema(order, s_eta, s_log_alpha, y, eta_hat, log_alpha_hat, radius):
    """:func:`gamma_scale_suprema` on the box of ``‖φ‖ ≤ r``."""
    check_region(order, radius)
    s1 = np.asarray(s_eta, dtype=np.float64)
    s2 = np.asarray(s_log_alpha, dtype=np.float64)
    eta_hat = np.asarray(eta_hat, dtype=np.float64)
    lam_hat = np.asarray(log_alpha_hat, dtype=np.float64)
    return gamma_scale_suprema(order, y, (eta_hat - radius * s1, eta_hat + radius * s1),
                               (lam_hat - radius * s2, lam_hat + radius * s2))


@register
class GammaScale(LocationScaleFamily):
    """Gamma with mean ``e^η`` and a sampled shape ``alpha`` (``log α`` affine)."""

    name = "gamma_scale"
    description = "Gamma with beta=alpha / exp(eta) and a sampled alpha (log alpha affine)"
    rv_op = GammaRV

    def read(self, dist_params):
        alpha, scale = dist_params
        return pt.log(alpha * scale), alpha, ()

    def logp(self, first, log_scale, y):
        return GammaLog().terms(first, y, pt.exp(log_scale))[0]

    def loglik(self, first, log_scale, y):
        return GammaLog().loglik(first, y, np.exp(log_scale))

    def suprema(self, order, s_eta, s_log_alpha, y, eta_hat, log_alpha_hat, radius):
        return _region_suprema(order, s_eta, s_log_alpha, y, eta_hat, log_alpha_hat, radius)
