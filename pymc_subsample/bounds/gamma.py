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
"""

from __future__ import annotations

import math

import numpy as np
import pytensor.tensor as pt
from pytensor.tensor.random.basic import GammaRV
from scipy.special import gammaln

from pymc_subsample.bounds.family import Family, register

__all__ = ["GammaLog"]


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
