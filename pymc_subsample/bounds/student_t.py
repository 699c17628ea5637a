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
"""

from __future__ import annotations

import math

import numpy as np
import pytensor.tensor as pt
from pytensor.tensor.random.basic import StudentTRV
from scipy.special import gammaln

from pymc_subsample.bounds.family import Family, register

__all__ = ["StudentT"]

_T = math.sqrt(2.0) - 1.0
#: sup over t of |t (t² − 3)| / (1 + t²)³, attained at t = √2 − 1
H_STAR = _T * (3.0 - _T**2) / (1.0 + _T**2) ** 3


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
