r"""Negative binomial rows with the log link and a fixed dispersion.

With mean :math:`\mu = e^\eta` and dispersion :math:`\alpha` (variance :math:`\mu + \mu^2/\alpha`),
PyMC's ``NegativeBinomial(mu=μ, alpha=α)`` is ``nbinom(n=α, p=α/(α + μ))``, and as a function
of :math:`t = \eta - \log\alpha`

.. math::

    f = y t - (y + \alpha)\log(1 + e^t) + \text{const}, \qquad
    f'' = -(y + \alpha)\,\sigma(t)\sigma(-t), \qquad
    f''' = -(y + \alpha)\,\sigma(t)\sigma(-t)(1 - 2\sigma(t)),

the logistic model's derivatives times :math:`y + \alpha`: :math:`L_1 = (y + \alpha)/4` and
:math:`L_2 = (y + \alpha)\sqrt3/18` hold on the whole line.
"""

from __future__ import annotations

import math

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import equal_computations
from pytensor.scalar.basic import Add, TrueDiv
from pytensor.tensor.random.basic import NegBinomialRV
from scipy.special import gammaln

from pymc_subsample.bounds.bernoulli import _scalar_op
from pymc_subsample.bounds.family import Family, register

__all__ = ["NegativeBinomialLog"]

_L = {1: 0.25, 2: math.sqrt(3.0) / 18.0}


def _mean_of(n, p):
    """``μ`` when ``p`` is ``n / (μ + n)`` by its graph (PyMC's ``mu, alpha`` form), else None."""
    if not isinstance(_scalar_op(p), TrueDiv):
        return None
    numerator, denominator = p.owner.inputs
    if not (equal_computations([numerator], [n]) and isinstance(_scalar_op(denominator), Add)):
        return None
    summands = list(denominator.owner.inputs)
    for j, s in enumerate(summands):
        if equal_computations([s], [n]):
            rest = summands[:j] + summands[j + 1 :]
            return rest[0] if len(rest) == 1 else pt.add(*rest)
    return None


@register
class NegativeBinomialLog(Family):
    """Negative binomial with mean ``e^η`` and a fixed dispersion ``alpha``."""

    name = "negative_binomial_log"
    description = "NegativeBinomial with mu=exp(eta) and alpha fixed"
    rv_op = NegBinomialRV
    params = ("alpha",)

    def read(self, dist_params):
        n, p = dist_params
        mu = _mean_of(n, p)
        return None if mu is None else (pt.log(mu), (n,))

    def check_y(self, y):
        y = super().check_y(y)
        if np.any(y < 0.0) or not np.all(y == np.floor(y)):
            raise ValueError(f"family {self.name!r} needs non-negative integer counts y")
        return y

    def terms(self, eta, y, alpha):
        t = eta - pt.log(alpha)
        s = pt.sigmoid(t)
        f = (pt.gammaln(y + alpha) - pt.gammaln(alpha) - pt.gammaln(y + 1.0)
             + y * t - (y + alpha) * pt.softplus(t))
        return f, y - (y + alpha) * s, -(y + alpha) * s * pt.sigmoid(-t)

    def loglik(self, eta, y, alpha):
        t = eta - np.log(alpha)
        return (gammaln(y + alpha) - gammaln(alpha) - gammaln(y + 1.0) + y * t
                - (y + alpha) * np.logaddexp(0.0, t))

    def derivative_sup(self, order, y, alpha, *, lower=-math.inf, upper=math.inf):
        return _L[order] * (np.asarray(y, dtype=np.float64) + alpha)
