r"""Poisson rows with mean ``softplus(η)`` or ``e^η`` (the log link).

``poisson_softplus`` (Prado, Nemeth & Sherlock 2024, Appendix A.4): :math:`|f^{(k)}| \le
|\mu^{(k)}| + y\,|c_k|` with :math:`\mu = \log(1 + e^\eta)`; :math:`\sup|\mu''| = 1/4` and
:math:`\sup|\mu'''| = \sqrt3/18` as for the logistic model, and the y-coefficients have
numerical suprema 0.16710 and 0.060913, below the paper's 0.168 and 0.061, so
:math:`L_1 = 1/4 + 0.168\,y` and :math:`L_2 = \sqrt3/18 + 0.061\,y`.

``poisson_log``: :math:`f = y\eta - e^\eta - \log y!`, whose second and third derivatives are
both :math:`-e^\eta`: unbounded, and :math:`e^{\eta_+}` on :math:`[\eta_-, \eta_+]`. Its
predictor is :math:`\log\mu` simplified, so an exposure offset ``mu = t * exp(η)`` is read as
``η + log t``.
"""

from __future__ import annotations

import math

import numpy as np
import pytensor.tensor as pt
from pytensor.scalar.math import Softplus
from pytensor.tensor.random.basic import PoissonRV
from scipy.special import gammaln

from pymc_subsample.bounds.family import Family, register, scalar_op

__all__ = ["PoissonLog", "PoissonSoftplus"]

_SOFTPLUS_L = {1: (0.25, 0.168), 2: (math.sqrt(3.0) / 18.0, 0.061)}


class _Poisson(Family):
    rv_op = PoissonRV

    def check_y(self, y):
        y = super().check_y(y)
        if np.any(y < 0.0) or not np.all(y == np.floor(y)):
            raise ValueError(f"family {self.name!r} needs non-negative integer counts y")
        return y


def _log_softplus(eta: np.ndarray) -> np.ndarray:
    """log(log(1 + e^eta)) without underflow for very negative eta."""
    eta = np.asarray(eta, dtype=np.float64)
    out = np.empty_like(eta)
    low = eta < -30.0
    # log(log1p(t)) = log(t) - t/2 + O(t^2) with t = e^eta < 1e-13.
    out[low] = eta[low] - 0.5 * np.exp(eta[low])
    out[~low] = np.log(np.logaddexp(0.0, eta[~low]))
    return out


@register
class PoissonSoftplus(_Poisson):
    """Poisson with mean ``log(1 + e^η)`` (``pm.math.log1pexp``), Sec. 5.3 of Prado et al."""

    name = "poisson_softplus"
    description = "Poisson with mu=pm.math.log1pexp(eta)"

    def read(self, dist_params):
        (mu,) = dist_params
        return (mu.owner.inputs[0], ()) if isinstance(scalar_op(mu), Softplus) else None

    def terms(self, eta, y):
        # μ = softplus(η), μ' = σ(η), μ'' = σ(η)σ(−η); f = y log μ − μ − log y!
        mu, s = pt.softplus(eta), pt.sigmoid(eta)
        r = y / mu - 1.0
        f = pt.switch(pt.eq(y, 0), 0.0, y * pt.log(mu)) - mu - pt.gammaln(y + 1.0)
        return f, r * s, r * s * pt.sigmoid(-eta) - y * (s / mu) ** 2

    def loglik(self, eta, y):
        mu = np.logaddexp(0.0, eta)
        return np.where(y > 0.0, y * _log_softplus(eta), 0.0) - mu - gammaln(y + 1.0)

    def derivative_sup(self, order, y, *, lower=-math.inf, upper=math.inf):
        base, slope = _SOFTPLUS_L[order]
        return base + slope * np.asarray(y, dtype=np.float64)


@register
class PoissonLog(_Poisson):
    """Poisson with mean ``e^η``: constants on a region only."""

    name = "poisson_log"
    description = "Poisson with mu=pm.math.exp(eta)"
    region_only = True
    link_hint = ("its Poisson mean is not softplus(eta) or exp(eta) with eta affine in the "
                 "parameters")

    def read(self, dist_params):
        (mu,) = dist_params
        return pt.log(mu), ()

    def terms(self, eta, y):
        # f = yη − e^η − log y!, f' = y − e^η, f'' = −e^η
        mu = pt.exp(eta)
        return y * eta - mu - pt.gammaln(y + 1.0), y - mu, -mu

    def loglik(self, eta, y):
        return y * eta - np.exp(eta) - gammaln(y + 1.0)

    def derivative_sup(self, order, y, *, lower=-math.inf, upper=math.inf):
        with np.errstate(over="ignore"):
            return np.broadcast_to(np.exp(upper), np.shape(y)).astype(np.float64)
