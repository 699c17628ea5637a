r"""Bernoulli rows with a logit, probit or complementary log-log link.

=================  ========================  ======================  ======================
family             PyMC                      L1 ≥ sup abs f''        L2 ≥ sup abs f'''
=================  ========================  ======================  ======================
bernoulli_logit    ``logit_p=η``             1/4 (exact sup)         √3/18 (exact sup)
bernoulli_probit   ``p=invprobit(η)``        1 (as η → ∓∞)           0.3 (sup ≈ 0.29572)
bernoulli_cloglog  ``p=1 - exp(-exp(η))``    y=1: 0.4126; y=0: e^η   y=1: 0.4261; y=0: e^η
=================  ========================  ======================  ======================

The logit and probit constants are Theorem 3 and Remark 3 of Prado, Nemeth & Sherlock (2024).
For the complementary log-log link, :math:`u = e^\eta`:
:math:`f = \log(1 - e^{-u})` when :math:`y = 1`, with :math:`f' = u / (e^u - 1)`,
:math:`f'' = f' - u^2 / ((e^u - 1)(1 - e^{-u}))`, bounded on the whole line (suprema
0.412532 at η = 0.6208 and 0.426055 at η = 1.4267, found with 40-digit arithmetic; the
constants are rounded up); and :math:`f = -u` when :math:`y = 0`, whose derivatives are all
:math:`-e^\eta`, unbounded: on :math:`[\eta_-, \eta_+]` the supremum is :math:`e^{\eta_+}`, so
the family's constants hold on a region of the Laplace frame.
"""

from __future__ import annotations

import math

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import grad
from pytensor.scalar.math import Sigmoid
from pytensor.tensor.random.basic import BernoulliRV
from scipy.special import log_ndtr

from pymc_subsample.bounds.family import Family, register
from pymc_subsample.links import (
    cloglog_predictor,
    cloglog_row_logp,
    probit_predictor,
    probit_row_logp,
    scalar_op,
)

__all__ = [
    "BernoulliCloglog",
    "cloglog_predictor",
    "cloglog_row_logp",
    "BernoulliLogit",
    "BernoulliProbit",
    "probit_predictor",
    "probit_row_logp",
]

# sup_eta |f''| and sup_eta |f'''| (Theorem 3 and Remark 3 of Prado et al. 2024)
_LOGIT_L = {1: 0.25, 2: math.sqrt(3.0) / 18.0}
_PROBIT_L = {1: 1.0, 2: 0.3}
# complementary log-log, y = 1: numerical suprema 0.412532 and 0.426055, rounded up
_CLOGLOG_L = {1: 0.4126, 2: 0.4261}



def _check_binary(name: str, y: np.ndarray) -> np.ndarray:
    if not np.all((y == 0.0) | (y == 1.0)):
        raise ValueError(f"family {name!r} needs y in {{0, 1}}")
    return y


class _Bernoulli(Family):
    rv_op = BernoulliRV

    def check_y(self, y):
        return _check_binary(self.name, super().check_y(y))


@register
class BernoulliLogit(_Bernoulli):
    """Bernoulli with the logistic link: ``f = yη − log(1 + e^η)``."""

    name = "bernoulli_logit"
    description = "Bernoulli with logit_p=eta or p=sigmoid(eta)"

    def read(self, dist_params):
        (p,) = dist_params
        return (p.owner.inputs[0], ()) if isinstance(scalar_op(p), Sigmoid) else None

    def terms(self, eta, y):
        # f' = y − σ(η), f'' = −σ(η)σ(−η)
        p = pt.sigmoid(eta)
        return y * eta - pt.softplus(eta), y - p, -p * pt.sigmoid(-eta)

    def loglik(self, eta, y):
        return -np.logaddexp(0.0, (1.0 - 2.0 * y) * eta)

    def derivative_sup(self, order, y, *, lower=-math.inf, upper=math.inf):
        return np.full(np.shape(y), _LOGIT_L[order])


@register
class BernoulliProbit(_Bernoulli):
    """Bernoulli with the probit link: ``f = log Φ((2y − 1)η)``."""

    name = "bernoulli_probit"
    description = "Bernoulli with p=pm.math.invprobit(eta)"
    # SciPy's log Φ is exact to rounding; the model's (PyMC's normal_lcdf, an asymptotic series
    # below −1) differs by up to 1e-6 relative in the remainders
    loglik_is_model = False

    def read(self, dist_params):
        eta = probit_predictor(dist_params[0])
        return None if eta is None else (eta, ())

    def terms(self, eta, y):
        # autodiff of the stable log Φ(±η) (the likelihood layer's own row terms)
        f = probit_row_logp(eta, y)
        f1 = grad(f.sum(), eta)
        return f, f1, grad(f1.sum(), eta)

    def loglik(self, eta, y):
        return log_ndtr((2.0 * y - 1.0) * eta)

    def derivative_sup(self, order, y, *, lower=-math.inf, upper=math.inf):
        return np.full(np.shape(y), _PROBIT_L[order])


@register
class BernoulliCloglog(_Bernoulli):
    """Bernoulli with the complementary log-log link: ``p = 1 − exp(−e^η)``."""

    name = "bernoulli_cloglog"
    description = "Bernoulli with p=1 - exp(-exp(eta))"
    region_only = True

    def read(self, dist_params):
        eta = cloglog_predictor(dist_params[0])
        return None if eta is None else (eta, ())

    def terms(self, eta, y):
        u = pt.exp(eta)
        em1 = pt.expm1(u)
        # y = 1: f = log(1 − e^{−u}), f' = u/(e^u − 1), f'' = f' − u²/((e^u − 1)(1 − e^{−u}))
        f1_one = u / em1
        f2_one = f1_one - u**2 / (em1 * -pt.expm1(-u))
        one = pt.eq(y, 1.0)
        return cloglog_row_logp(eta, y), pt.switch(one, f1_one, -u), pt.switch(one, f2_one, -u)

    def loglik(self, eta, y):
        u = np.exp(eta)
        with np.errstate(divide="ignore"):
            return np.where(y == 1.0, np.log(-np.expm1(-u)), -u)

    def derivative_sup(self, order, y, *, lower=-math.inf, upper=math.inf):
        with np.errstate(over="ignore"):
            return np.where(np.asarray(y) == 1.0, _CLOGLOG_L[order], np.exp(upper))
