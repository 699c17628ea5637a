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

**Sampled dispersion**, :math:`\lambda = \log\alpha` a second predictor: in the predictors
:math:`t = \eta - \lambda` and :math:`\lambda` (both affine in θ when η and log α are),

.. math::

    f = B(\lambda) + y t - (y + e^\lambda)\,\mathrm{softplus}(t) - \log y!, \qquad
    B(\lambda) = \log\Gamma(y + e^\lambda) - \log\Gamma(e^\lambda)
               = \sum_{j<y} \log(e^\lambda + j),

so :math:`\partial_\lambda B = \sum_{j<y} u_j` with :math:`u_j = \alpha/(\alpha + j)` and
:math:`\partial_\lambda u_j = u_j(1 - u_j)`: :math:`0 \le \partial^2_\lambda B \le y/4`
and :math:`|\partial^3_\lambda B| \le y\sqrt3/18`. The other partials are
:math:`\partial^a_t f = -(y + \alpha)\,\mathrm{softplus}^{(a)}(t)` (:math:`a \ge 2`),
:math:`\partial_t\partial^b_\lambda f = -\alpha\sigma(t)`,
:math:`\partial^2_t\partial_\lambda f = -\alpha\sigma(t)\sigma(-t)` and
:math:`\partial^b_\lambda f = \partial^b_\lambda B - \alpha\,\mathrm{softplus}(t)`
(:math:`b \ge 2`). On the region, with :math:`\alpha_+ = e^{\hat\lambda + r s_\lambda}` and
:math:`t_+ = \hat t_i + r s_{t,i}` (σ and softplus increase),
:func:`negative_binomial_scale_row_constants` sums
:math:`\binom{k+1}{a} S_{a,b} s_t^a s_\lambda^b` with
:math:`S_{2,0} = (y + \alpha_+)/4`, :math:`S_{1,1} = \alpha_+\sigma(t_+)`,
:math:`S_{0,2} = \max(y/4, \alpha_+\mathrm{softplus}(t_+))` (the two parts have opposite
signs);
:math:`S_{3,0} = (y + \alpha_+)\sqrt3/18`, :math:`S_{2,1} = S_{1,2} = \alpha_+\sigma(t_+)`,
:math:`S_{0,3} = y\sqrt3/18 + \alpha_+\mathrm{softplus}(t_+)`.
"""

from __future__ import annotations

import math

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import equal_computations
from pytensor.scalar.basic import Add, TrueDiv
from pytensor.tensor.random.basic import NegBinomialRV
from scipy.special import expit, gammaln

from pymc_subsample.bounds.family import (
    Family,
    LocationScaleFamily,
    combine_partials,
    register,
    scalar_op,
)
from pymc_subsample.bounds.remainder import check_region

__all__ = [
    "NegativeBinomialLog",
    "NegativeBinomialScale",
    "negative_binomial_scale_row_constants",
]

_L = {1: 0.25, 2: math.sqrt(3.0) / 18.0}


def _mean_of(n, p):
    """``μ`` when ``p`` is ``n / (μ + n)`` by its graph (PyMC's ``mu, alpha`` form), else None."""
    if not isinstance(scalar_op(p), TrueDiv):
        return None
    numerator, denominator = p.owner.inputs
    if not (equal_computations([numerator], [n]) and isinstance(scalar_op(denominator), Add)):
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


def scale_suprema(
    order: int, y: np.ndarray, t_upper: np.ndarray, alpha_upper: np.ndarray
) -> dict[tuple[int, int], np.ndarray]:
    """``S_{a,b} ≥ sup |∂^a_t ∂^b_λ f|`` over a box with ``t ≤ t_upper``, ``α ≤ alpha_upper``,
    for ``a + b = order + 1`` (module docstring)."""
    y = np.asarray(y, dtype=np.float64)
    mixed = alpha_upper * expit(t_upper)
    pure = alpha_upper * np.logaddexp(0.0, t_upper)
    if order == 1:
        # ∂²_λ B ∈ [0, y/4] and −α softplus(t) ≤ 0: the larger of the two bounds the sum
        return {(2, 0): (y + alpha_upper) * _L[1], (1, 1): mixed,
                (0, 2): np.maximum(y * _L[1], pure)}
    return {(3, 0): (y + alpha_upper) * _L[2], (2, 1): mixed, (1, 2): mixed,
            (0, 3): y * _L[2] + pure}


def negative_binomial_scale_row_constants(
    order: int,
    s_t: np.ndarray,
    s_log_alpha: np.ndarray,
    y: np.ndarray,
    t_hat: np.ndarray,
    log_alpha_hat: np.ndarray,
    radius: float,
    cos: np.ndarray | None = None,
) -> np.ndarray:
    r"""Whitened constants of negative binomial rows with a sampled dispersion, on ``‖φ‖ ≤ r``.

    :func:`~pymc_subsample.bounds.family.combine_partials` (``Σ_{a+b=k+1} C(k+1, a) S_{a,b}
    s_t^a s_λ^b`` times angle factors for ``cos``) with the predictors ``t = η − log α`` and
    ``λ = log α`` and :func:`scale_suprema` on the region's box (module docstring); for use with
    ``M`` without Lemma 1's angle factors.
    """
    sup = _region_suprema(order, s_t, s_log_alpha, y, t_hat, log_alpha_hat, radius)
    return combine_partials(order, sup, s_t, s_log_alpha, cos)


def _region_suprema(order, s_t, s_log_alpha, y, t_hat, log_alpha_hat, radius):
    """:func:`scale_suprema` on the box of ``‖φ‖ ≤ r``."""
    check_region(order, radius)
    s1 = np.asarray(s_t, dtype=np.float64)
    s2 = np.asarray(s_log_alpha, dtype=np.float64)
    alpha_upper = np.exp(np.asarray(log_alpha_hat, dtype=np.float64) + radius * s2)
    t_upper = np.asarray(t_hat, dtype=np.float64) + radius * s1
    return scale_suprema(order, y, t_upper, alpha_upper)


@register
class NegativeBinomialScale(LocationScaleFamily):
    """Negative binomial with mean ``e^η`` and a sampled dispersion ``alpha``.

    Its two predictors are ``t = η − log α`` (returned as the location) and ``log α``.
    """

    name = "negative_binomial_scale"
    description = "NegativeBinomial with mu=exp(eta) and a sampled alpha (log alpha affine)"
    rv_op = NegBinomialRV

    def read(self, dist_params):
        n, p = dist_params
        mu = _mean_of(n, p)
        if mu is None:
            return None
        return pt.log(mu) - pt.log(n), n, ()

    def logp(self, first, log_scale, y):
        return NegativeBinomialLog().terms(first + log_scale, y, pt.exp(log_scale))[0]

    def loglik(self, first, log_scale, y):
        return NegativeBinomialLog().loglik(first + log_scale, y, np.exp(log_scale))

    def suprema(self, order, s_t, s_log_alpha, y, t_hat, log_alpha_hat, radius):
        return _region_suprema(order, s_t, s_log_alpha, y, t_hat, log_alpha_hat, radius)
