r"""Normal rows: identity mean with a fixed σ, and the location–scale case (σ sampled).

``normal_identity``: :math:`f = -(y - \eta)^2 / (2\sigma^2) - \log\sigma - \tfrac12\log 2\pi`,
:math:`f'' = -1/\sigma^2` and :math:`f''' = 0` (the order-2 Taylor expansion is exact).

A Normal with a sampled σ has two predictors, the mean and :math:`\log\sigma`: its constants
are :func:`normal_scale_row_constants`, on a region.
"""

from __future__ import annotations

import math

import numpy as np
import pytensor.tensor as pt
from pytensor.tensor.random.basic import NormalRV

from pymc_subsample.bounds.family import (
    Family,
    LocationScaleFamily,
    combine_partials,
    register,
)
from pymc_subsample.bounds.remainder import check_region

__all__ = ["NormalIdentity", "NormalScale", "normal_scale_row_constants"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


@register
class NormalIdentity(Family):
    """Normal with mean ``η`` and a fixed (data or constant) ``σ``."""

    name = "normal_identity"
    description = "Normal with mu=eta and a fixed sigma"
    rv_op = NormalRV
    params = ("sigma",)

    def read(self, dist_params):
        mu, sigma = dist_params
        return mu, (sigma,)

    def terms(self, eta, y, sigma):
        inv_var = 1.0 / sigma**2
        resid = y - eta
        f = -0.5 * resid**2 * inv_var + 0.5 * pt.log(inv_var) - _HALF_LOG_2PI
        return f, resid * inv_var, -inv_var * pt.ones_like(eta)

    def loglik(self, eta, y, sigma):
        z = (y - eta) / sigma
        return -0.5 * z * z - np.log(sigma) - _HALF_LOG_2PI

    def derivative_sup(self, order, y, sigma, *, lower=-math.inf, upper=math.inf):
        value = 1.0 / np.asarray(sigma, dtype=np.float64) ** 2 if order == 1 else 0.0
        return np.broadcast_to(value, np.shape(y)).astype(np.float64)


def normal_scale_row_constants(
    order: int,
    s_mu: np.ndarray,
    s_log_sigma: np.ndarray,
    abs_resid_hat: np.ndarray,
    log_sigma_hat: np.ndarray,
    radius: float,
    cos: np.ndarray | None = None,
) -> np.ndarray:
    r"""Whitened constants of a Normal row with sampled σ, valid on ``R = {‖φ‖ ≤ r}``.

    The row is :math:`f(\mu_i, \lambda_i) = -\tfrac12 (y_i - \mu_i)^2 e^{-2\lambda_i} - \lambda_i`
    (up to a constant) with two predictors affine in θ: the mean :math:`\mu_i` and
    :math:`\lambda_i = \log\sigma_i`, whitened rows of lengths :math:`s_{\mu,i}` and
    :math:`s_{\lambda,i}`. With :math:`\rho = y - \mu` its derivatives are
    :math:`f_{\mu\mu} = -e^{-2\lambda}`, :math:`f_{\mu\lambda} = -2\rho e^{-2\lambda}`,
    :math:`f_{\lambda\lambda} = -2\rho^2 e^{-2\lambda}`, :math:`f_{\mu\mu\mu} = 0`,
    :math:`f_{\mu\mu\lambda} = 2e^{-2\lambda}`, :math:`f_{\mu\lambda\lambda} = 4\rho e^{-2\lambda}`,
    :math:`f_{\lambda\lambda\lambda} = 4\rho^2 e^{-2\lambda}`. On ``R`` they are at most
    :math:`E_i = e^{-2\hat\lambda_i + 2 r s_\lambda}` times :math:`1, 2P_i, 2P_i^2` (order 1)
    and :math:`0, 2, 4P_i, 4P_i^2` (order 2) in the order of
    :func:`~pymc_subsample.bounds.family.combine_partials`, with
    :math:`P_i = |y_i - \hat\mu_i| + r s_\mu`; without angle factors (``cos=None``)

    .. math::

        c_i^{(1)} = E_i\,(s_\mu^2 + 4 P_i s_\mu s_\lambda + 2 P_i^2 s_\lambda^2), \qquad
        c_i^{(2)} = E_i\,(6 s_\mu^2 s_\lambda + 12 P_i s_\mu s_\lambda^2 + 4 P_i^2 s_\lambda^3),

    for ``M`` without Lemma 1's angle factors (``remainder_scale(..., sharp=False)``). ``cos``:
    the cosine of the angle between the two whitened rows, which scales the mixed terms.
    """
    suprema = normal_scale_suprema(order, s_mu, s_log_sigma, abs_resid_hat, log_sigma_hat,
                                   radius)
    return combine_partials(order, suprema, s_mu, s_log_sigma, cos)


def normal_scale_suprema(
    order: int,
    s_mu: np.ndarray,
    s_log_sigma: np.ndarray,
    abs_resid_hat: np.ndarray,
    log_sigma_hat: np.ndarray,
    radius: float,
) -> dict[tuple[int, int], np.ndarray]:
    """``S_{a,b} ≥ sup |∂^a_μ ∂^b_λ f|`` on ``‖φ‖ ≤ r``, ``a + b = order + 1``
    (:func:`normal_scale_row_constants`)."""
    check_region(order, radius)
    s1 = np.asarray(s_mu, dtype=np.float64)
    s2 = np.asarray(s_log_sigma, dtype=np.float64)
    p = np.asarray(abs_resid_hat, dtype=np.float64) + radius * s1
    e = np.exp(-2.0 * np.asarray(log_sigma_hat, dtype=np.float64) + 2.0 * radius * s2)
    if order == 1:
        return {(2, 0): e, (1, 1): 2.0 * p * e, (0, 2): 2.0 * p**2 * e}
    return {(3, 0): 0.0 * e, (2, 1): 2.0 * e, (1, 2): 4.0 * p * e, (0, 3): 4.0 * p**2 * e}


@register
class NormalScale(LocationScaleFamily):
    """Normal with mean ``μ`` and a sampled ``σ`` (:func:`normal_scale_row_constants`)."""

    name = "normal_scale"
    description = "Normal with a sampled sigma (mean and log sigma affine)"
    rv_op = NormalRV

    def read(self, dist_params):
        mu, sigma = dist_params
        return mu, sigma, ()

    def logp(self, first, log_scale, y):
        return NormalIdentity().terms(first, y, pt.exp(log_scale))[0]

    def loglik(self, first, log_scale, y):
        return NormalIdentity().loglik(first, y, np.exp(log_scale))

    def suprema(self, order, s_mu, s_log_sigma, y, mu_hat, log_sigma_hat, radius):
        return normal_scale_suprema(order, s_mu, s_log_sigma, np.abs(y - mu_hat),
                                    log_sigma_hat, radius)
