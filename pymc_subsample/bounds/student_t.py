r"""Student-t rows with identity mean: ν and σ fixed, σ sampled, or ν (and σ) sampled.

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

**Sampled ν** (and σ sampled or fixed): three predictors, :math:`\mu`,
:math:`s = \log(\sigma\sqrt\nu) = \lambda + \kappa/2` and :math:`\kappa = \log\nu`, all affine
when :math:`\lambda = \log\sigma` and :math:`\kappa` are. With :math:`t = (y - \mu)e^{-s}` and
:math:`\Psi = \log(1 + t^2)`,

.. math::

    f = C(\kappa) - s + A(\kappa)\Psi(\mu, s), \qquad A = -\frac{e^\kappa + 1}2, \qquad
    C = D(e^\kappa) - \frac12\log\pi, \qquad
    D(\nu) = \log\Gamma\Bigl(\frac{\nu+1}2\Bigr) - \log\Gamma\Bigl(\frac\nu2\Bigr).

``κ`` enters ``Ψ`` through ``s`` only, which is a predictor of its own, so every partial of
order ``a + b + c ≥ 2`` is one term (or two):

.. math::

    \partial^a_\mu\partial^b_s\partial^c_\kappa f = [a = b = 0]\, C^{(c)}
    + A^{(c)} e^{-as} Q_{a,b}(t),

with :math:`\partial^a_\mu\partial^b_s\Psi = e^{-as}Q_{a,b}(t)`: :math:`Q_{a,b} = -2P_{a,b}`
for :math:`a + b \ge 2` (the recursion above, with :math:`\nu` fixed), :math:`|Q_{1,0}| \le 1`,
:math:`|Q_{0,1}| \le 2` and :math:`Q_{0,0} = \Psi`. On the box of the region
:math:`|A| \le (\nu_+ + 1)/2`, :math:`|A^{(c\ge1)}| = \nu/2 \le \nu_+/2`,
:math:`e^{-s} \le E = e^{-(\hat s - r s_s)}` and :math:`\Psi \le \log(1 + \bar t^2)`,
:math:`\bar t = (|y - \hat\mu| + r s_\mu)E`, with :math:`\nu_\pm = e^{\hat\kappa \pm r s_\kappa}`;
and since :math:`C'' = \nu D' + \nu^2 D''` and :math:`C''' = \nu D' + 3\nu^2 D'' + \nu^3 D'''`
with :math:`D^{(n)} = 2^{-n}[\psi^{(n-1)}(\tfrac{\nu+1}2) - \psi^{(n-1)}(\tfrac\nu2)]`, whose
absolute values decrease in ``ν`` (the polygamma functions are completely monotone),
:math:`|C^{(c)}| \le \sum_m b_{c,m}\nu_+^m |D^{(m)}(\nu_-)|` (:func:`student_t_nu_suprema`).
Taking ``λ`` for the second predictor instead would spread each ``κ``-derivative of ``Ψ`` over
``Σ_j C(c, j) 2^{-(c-j)}`` terms of ``∂_s``, bounded one by one: looser.
"""

from __future__ import annotations

import math

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Variable
from pytensor.tensor.random.basic import StudentTRV
from scipy.special import gammaln, polygamma

from pymc_subsample.bounds.family import (
    Family,
    LocationScaleFamily,
    combine_partials,
    multi_indices,
    register,
)
from pymc_subsample.bounds.remainder import check_region

__all__ = ["StudentT", "StudentTNu", "StudentTScale", "psi_partials", "student_t_nu_suprema",
           "student_t_scale_row_constants"]

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


def psi_partials(mu: Variable, s: Variable, y: Variable) -> tuple[Variable, ...]:
    r""":math:`\Psi = \log(1 + t^2)`, :math:`t = (y - \mu)e^{-s}`, and its partials in
    :math:`(\mu, s)` to order 2 (module docstring: :math:`e^{-as}Q_{a,b}(t)`):
    ``(Ψ, Ψ_μ, Ψ_s, Ψ_μμ, Ψ_μs, Ψ_ss)``, written with :math:`w = 1/(1 + t^2)` and
    :math:`g = tw`,

    .. math::

        \Psi_\mu = -2e^{-s}g, \quad \Psi_s = -2tg, \quad
        \Psi_{\mu\mu} = 2e^{-2s}(w^2 - g^2), \quad \Psi_{\mu s} = 4e^{-s}gw, \quad
        \Psi_{ss} = 4g^2.
    """
    e = pt.exp(-s)
    t = (y - mu) * e
    w = 1.0 / (1.0 + t * t)
    g = t * w
    return (pt.log1p(t * t), -2.0 * e * g, -2.0 * t * g, 2.0 * e * e * (w * w - g * g),
            4.0 * e * g * w, 4.0 * g * g)


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

    def loglik(self, first, log_scale, y, nu):
        return StudentT().loglik(first, y, nu, np.exp(log_scale))

    def row_terms(self, predictors, y, params):
        """Closed forms (:func:`psi_partials`): with ``s = λ + ½ log ν``, ``f = const − λ +
        AΨ(μ, s)``, ``A = −(ν + 1)/2``, so ``f_μ = AΨ_μ``, ``f_λ = −1 + AΨ_s``, ``f_μμ =
        AΨ_μμ``, ``f_μλ = AΨ_μs``, ``f_λλ = AΨ_ss``."""
        (mu, log_sigma), (nu,) = predictors, params
        psi, p_m, p_s, p_mm, p_ms, p_ss = psi_partials(mu, log_sigma + 0.5 * pt.log(nu), y)
        a = -0.5 * (nu + 1.0)
        return (self.row_logp(predictors, y, params), (a * p_m, a * p_s - 1.0),
                (a * p_mm, a * p_ms, a * p_ss))

    def suprema(self, order, s_mu, s_log_sigma, y, mu_hat, log_sigma_hat, radius, nu):
        return student_t_scale_suprema(order, s_log_sigma, log_sigma_hat, radius, nu)


#: sup |Q_{a,b}| over t for a + b = 1 (module docstring); Q_{0,0} = Ψ depends on the box
_LOW_ORDER_Q = {(1, 0): 1.0, (0, 1): 2.0}
#: C^{(c)} = Σ_m b_{c,m} ν^m D^{(m)}(ν), m = 1, 2, 3: the coefficients b_{c,m}
_C_COEFFICIENTS = {2: (1.0, 1.0, 0.0), 3: (1.0, 3.0, 1.0)}


def student_t_nu_suprema(
    order: int,
    s_mu: np.ndarray,
    s_log_scale: np.ndarray,
    s_log_nu: np.ndarray,
    y: np.ndarray,
    mu_hat: np.ndarray,
    log_scale_hat: np.ndarray,
    log_nu_hat: np.ndarray,
    radius: float,
) -> dict[tuple[int, int, int], np.ndarray]:
    r"""``S_{a,b,c} ≥ sup |∂^a_μ ∂^b_s ∂^c_κ f|`` per row on the box ``‖φ‖ ≤ radius`` allows,
    ``a + b + c = order + 1``, in the predictors ``μ``, ``s = log(σ√ν)`` and ``κ = log ν``
    (module docstring):

    .. math::

        S_{a,b,0} = \frac{\nu_+ + 1}2 E^a \bar Q_{a,b}, \qquad
        S_{a,b,c\ge1} = [a = b = 0]\, \bar C_c + \frac{\nu_+}2 E^a \bar Q_{a,b},

    :math:`\bar Q_{0,0} = \log(1 + \bar t^2)`, :math:`\bar Q_{1,0} = 1`, :math:`\bar Q_{0,1} = 2`,
    :math:`\bar Q_{a,b} = 2\bar P_{a,b}` (:data:`SCALE_SUPREMA`) for :math:`a + b \ge 2` and
    :math:`\bar C_c = \sum_m b_{c,m}\nu_+^m |D^{(m)}(\nu_-)|`.
    """
    check_region(order, radius)
    s_mu, s_s, s_nu, y, mu_hat, s_hat, nu_hat = (
        np.asarray(v, dtype=np.float64)
        for v in (s_mu, s_log_scale, s_log_nu, y, mu_hat, log_scale_hat, log_nu_hat))
    e_bar = np.exp(-(s_hat - radius * s_s))
    nu_lo, nu_hi = np.exp(nu_hat - radius * s_nu), np.exp(nu_hat + radius * s_nu)
    t_bar = (np.abs(y - mu_hat) + radius * s_mu) * e_bar
    q_bar = {(0, 0): np.log1p(t_bar**2), **_LOW_ORDER_Q,
             **{key: 2.0 * value for key, value in SCALE_SUPREMA.items()}}
    # |D^{(m)}(ν)| = 2^{-m} |ψ^{(m-1)}((ν+1)/2) − ψ^{(m-1)}(ν/2)|, largest at ν_−
    d_abs = [np.abs(polygamma(m - 1, 0.5 * (nu_lo + 1.0)) - polygamma(m - 1, 0.5 * nu_lo))
             / 2.0**m for m in (1, 2, 3)]
    shape = np.broadcast(y, mu_hat, s_mu, s_s, s_nu, s_hat, nu_hat).shape
    out = {}
    for a, b, c in multi_indices(3, order + 1):
        a_bar = (nu_hi + 1.0) / 2.0 if c == 0 else nu_hi / 2.0
        total = a_bar * e_bar**a * q_bar[(a, b)]
        if a == b == 0:
            total = total + sum(coef * nu_hi ** (m + 1) * d_abs[m]
                                for m, coef in enumerate(_C_COEFFICIENTS[c]))
        out[(a, b, c)] = np.broadcast_to(total, shape).astype(np.float64)
    return out


@register
class StudentTNu(StudentTScale):
    """Student-t with location ``μ``, a sampled ``nu`` and a sampled or fixed ``sigma``; its
    second predictor is ``s = log(σ√ν)``, its third ``log ν`` (module docstring). It reads the
    graph as :class:`StudentTScale` does, ``ν`` then being a predictor, not a fixed parameter."""

    name = "student_t_nu"
    description = "StudentT with a sampled nu (mu, log sigma and log nu affine)"
    params = ()
    log_params = ("nu",)

    def log_scale(self, scale, params):
        # log σ + log ν / 2, a sum (not log(σ√ν)): each log then simplifies on its own
        (nu,) = params
        return pt.log(scale) + 0.5 * pt.log(nu)

    def logp(self, first, log_scale, y, log_nu):
        # log_scale = log(σ√ν): σ = exp(log_scale − log_nu / 2)
        return StudentT().terms(first, y, pt.exp(log_nu), pt.exp(log_scale - 0.5 * log_nu))[0]

    def loglik(self, first, log_scale, y, log_nu):
        return StudentT().loglik(first, y, np.exp(log_nu), np.exp(log_scale - 0.5 * log_nu))

    def row_terms(self, predictors, y, params):
        """Closed forms in ``(μ, s, κ)`` (module docstring, :func:`psi_partials`):
        ``f_μ = AΨ_μ``, ``f_s = −1 + AΨ_s``, ``f_κ = C' + A'Ψ``; ``f_μμ = AΨ_μμ``,
        ``f_μs = AΨ_μs``, ``f_μκ = A'Ψ_μ``, ``f_ss = AΨ_ss``, ``f_sκ = A'Ψ_s``,
        ``f_κκ = C'' + A'Ψ``, with ``A' = A'' = −ν/2``, ``C' = νD'`` and ``C'' = νD' + ν²D''``.
        Autodiff of :meth:`logp` gives the same numbers from a graph three times the size,
        whose rewrites took 1.7 s of CPU at each setup (``docs/benchmarks.md``)."""
        mu, s, kappa = predictors
        nu = pt.exp(kappa)
        psi, p_m, p_s, p_mm, p_ms, p_ss = psi_partials(mu, s, y)
        a, a1 = -0.5 * (nu + 1.0), -0.5 * nu
        half, half1 = 0.5 * nu, 0.5 * (nu + 1.0)
        d1 = 0.5 * (pt.psi(half1) - pt.psi(half))
        # ψ' as polygamma(1, ·): an op NumPy calls on whole arrays (tri_gamma has no ufunc)
        d2 = 0.25 * (pt.polygamma(1, half1) - pt.polygamma(1, half))
        c1 = nu * d1
        return (self.row_logp(predictors, y, params),
                (a * p_m, a * p_s - 1.0, c1 + a1 * psi),
                (a * p_mm, a * p_ms, a1 * p_m, a * p_ss, a1 * p_s, c1 + nu * nu * d2 + a1 * psi))

    def suprema(self, order, s_mu, s_log_sigma, y, mu_hat, log_sigma_hat, radius, *, extra):
        ((s_log_nu, log_nu_hat),) = extra
        return student_t_nu_suprema(order, s_mu, s_log_sigma, s_log_nu, y, mu_hat,
                                    log_sigma_hat, log_nu_hat, radius)
