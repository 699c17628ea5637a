r"""Student-t rows with identity mean and fixed ν and σ.

With :math:`r = y - \eta` and :math:`s^2 = \nu\sigma^2`,
:math:`f = -\tfrac{\nu+1}{2}\log(1 + r^2/s^2) + \text{const}`,

.. math::

    f'' = -(\nu + 1)\frac{s^2 - r^2}{(s^2 + r^2)^2}, \qquad
    f''' = 2(\nu + 1)\frac{r (r^2 - 3 s^2)}{(s^2 + r^2)^3}.

:math:`|f''|` is largest at :math:`r = 0`: :math:`L_1 = (\nu + 1)/s^2`. With :math:`r = s t`,
:math:`|f'''| = 2(\nu + 1) s^{-3} |t(t^2 - 3)|/(1 + t^2)^3`, largest where
:math:`t^4 - 6t^2 + 1 = 0`, at :math:`t = \sqrt2 - 1`:
:math:`L_2 = 2 h^* (\nu + 1)/s^3` with :math:`h^* = t(3 - t^2)/(1 + t^2)^3 \approx 0.728553`.
Both hold on the whole line.

**Sampled σ** (ν fixed), ``λ = log σ`` a second predictor: the row is
:math:`f = g(q) - \lambda` with :math:`q = (y - \mu) e^{-\lambda}/\sqrt\nu` and
:math:`g(q) = -\tfrac{\nu+1}{2}\log(1 + q^2)`. Since :math:`\partial_\mu` acts on
:math:`F(q)e^{-a\lambda}` as :math:`-F'(q)e^{-(a+1)\lambda}/\sqrt\nu` and
:math:`\partial_\lambda` as :math:`(-qF' - aF)e^{-a\lambda}`, every mixed partial of order
``a + b ≥ 2`` is

.. math::

    \partial^a_\mu \partial^b_\lambda f = (\nu + 1)\,\nu^{-a/2} e^{-a\lambda} P_{a,b}(q),

with :math:`P_{a,b}` rational functions of ``q`` alone that vanish as :math:`|q| \to \infty`:
:math:`P_{2,0} = (q^2 - 1)/(1 + q^2)^2`, :math:`P_{1,1} = -2q/(1 + q^2)^2`,
:math:`P_{0,2} = -2q^2/(1 + q^2)^2`, :math:`P_{3,0} = 2q(q^2 - 3)/(1 + q^2)^3`,
:math:`P_{2,1} = -2(3q^2 - 1)/(1 + q^2)^3`, :math:`P_{1,2} = -4q(q^2 - 1)/(1 + q^2)^3`,
:math:`P_{0,3} = -4q^2(q^2 - 1)/(1 + q^2)^3`. Their suprema over ``q``
(:data:`SCALE_SUPREMA`: 1, 3√3/8, 1/2; 2h*, 2, 0.869619, 2√3/9) hold for every residual, so
on the region only :math:`e^{-a\lambda} \le e^{-a(\hat\lambda - r s_\lambda)}` needs the box:
:func:`student_t_scale_row_constants`.
"""

from __future__ import annotations

import math

import numpy as np
import pytensor.tensor as pt
from pytensor.tensor.random.basic import StudentTRV
from scipy.special import gammaln

from pymc_subsample.bounds.family import (
    Family,
    LocationScaleFamily,
    combine_partials,
    register,
)
from pymc_subsample.bounds.remainder import check_region

__all__ = ["StudentT", "StudentTScale", "student_t_scale_row_constants"]

_T = math.sqrt(2.0) - 1.0
#: sup over t of |t (t² − 3)| / (1 + t²)³, attained at t = √2 − 1
H_STAR = _T * (3.0 - _T**2) / (1.0 + _T**2) ** 3
#: sup over q of |P_{a,b}(q)| (module docstring), keyed by (a, b); 0.869619 is the numerical
#: supremum 0.8696190 (30 digits) rounded up
SCALE_SUPREMA = {
    (2, 0): 1.0, (1, 1): 3.0 * math.sqrt(3.0) / 8.0, (0, 2): 0.5,
    (3, 0): 2.0 * H_STAR, (2, 1): 2.0, (1, 2): 0.869619, (0, 3): 2.0 * math.sqrt(3.0) / 9.0,
}


@register
class StudentT(Family):
    """Student-t with location ``η`` and fixed ``nu`` and ``sigma``."""

    name = "student_t"
    description = "StudentT with mu=eta and nu, sigma fixed"
    rv_op = StudentTRV
    params = ("nu", "sigma")

    def read(self, dist_params):
        nu, mu, sigma = dist_params
        return mu, (nu, sigma)

    def terms(self, eta, y, nu, sigma):
        s2 = nu * sigma**2
        r = y - eta
        q = s2 + r**2
        f = (pt.gammaln(0.5 * (nu + 1.0)) - pt.gammaln(0.5 * nu) - 0.5 * pt.log(np.pi * s2)
             - 0.5 * (nu + 1.0) * pt.log1p(r**2 / s2))
        return f, (nu + 1.0) * r / q, -(nu + 1.0) * (s2 - r**2) / q**2

    def loglik(self, eta, y, nu, sigma):
        s2 = nu * sigma**2
        r = y - eta
        return (gammaln(0.5 * (nu + 1.0)) - gammaln(0.5 * nu) - 0.5 * np.log(np.pi * s2)
                - 0.5 * (nu + 1.0) * np.log1p(r**2 / s2))

    def derivative_sup(self, order, y, nu, sigma, *, lower=-math.inf, upper=math.inf):
        s2 = nu * sigma**2
        value = (nu + 1.0) / s2 if order == 1 else 2.0 * H_STAR * (nu + 1.0) / s2**1.5
        return np.broadcast_to(value, np.shape(y)).astype(np.float64)


def student_t_scale_row_constants(
    order: int,
    s_mu: np.ndarray,
    s_log_sigma: np.ndarray,
    log_sigma_hat: np.ndarray,
    radius: float,
    nu: np.ndarray | float,
    cos: np.ndarray | None = None,
) -> np.ndarray:
    r"""Whitened constants of Student-t rows with fixed ν and sampled σ, on ``‖φ‖ ≤ r``.

    :func:`~pymc_subsample.bounds.family.combine_partials` of
    :math:`S_{a,b} = (\nu + 1) \bar P_{a,b} \bigl(e^{-(\hat\lambda_i - r s_{\lambda,i})}/\sqrt\nu
    \bigr)^a`, :math:`\bar P_{a,b}` from :data:`SCALE_SUPREMA` (module docstring); without
    angle factors (``cos=None``)

    .. math::

        c_i = (\nu + 1) \sum_{a+b=k+1} \binom{k+1}{a} \bar P_{a,b}
              \bigl(e^{-(\hat\lambda_i - r s_{\lambda,i})}/\sqrt\nu\bigr)^a
              s_{\mu,i}^a s_{\lambda,i}^b,

    for use with ``M`` without Lemma 1's angle factors.
    """
    suprema = student_t_scale_suprema(order, s_log_sigma, log_sigma_hat, radius, nu)
    return combine_partials(order, suprema, s_mu, s_log_sigma, cos)


def student_t_scale_suprema(
    order: int, s_log_sigma: np.ndarray, log_sigma_hat: np.ndarray, radius: float,
    nu: np.ndarray | float,
) -> dict[tuple[int, int], np.ndarray]:
    """``S_{a,b} = (ν + 1) P̄_{a,b} (e^{-(λ̂ - r s_λ)}/√ν)^a`` for ``a + b = order + 1``
    (:func:`student_t_scale_row_constants`)."""
    check_region(order, radius)
    s2 = np.asarray(s_log_sigma, dtype=np.float64)
    nu = np.asarray(nu, dtype=np.float64)
    scale = np.exp(-(np.asarray(log_sigma_hat, dtype=np.float64) - radius * s2)) / np.sqrt(nu)
    k = order + 1
    return {(a, k - a): (nu + 1.0) * SCALE_SUPREMA[(a, k - a)] * scale**a for a in range(k + 1)}


@register
class StudentTScale(LocationScaleFamily):
    """Student-t with location ``μ``, a sampled ``σ`` and a fixed ``nu``."""

    name = "student_t_scale"
    description = "StudentT with a sampled sigma (mu and log sigma affine, nu fixed)"
    rv_op = StudentTRV
    params = ("nu",)

    def read(self, dist_params):
        nu, mu, sigma = dist_params
        return mu, sigma, (nu,)

    def logp(self, first, log_scale, y, nu):
        return StudentT().terms(first, y, nu, pt.exp(log_scale))[0]

    def suprema(self, order, s_mu, s_log_sigma, y, mu_hat, log_sigma_hat, radius, nu):
        return student_t_scale_suprema(order, s_log_sigma, log_sigma_hat, radius, nu)
