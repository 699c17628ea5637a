r"""Bounds on the control-variate error of generalised linear models, for MHSS.

MHSS (Prado, Nemeth & Sherlock 2024, Sec. 2) is exact only if every per-row control-variate error
obeys

.. math::

    |\xi_i(\theta, \theta')| \le c_i \, M(\theta, \theta'),
    \qquad \xi_i = r_i - \hat r_i,

where :math:`r_i = \ell_i(\theta') - \ell_i(\theta)` and :math:`\hat r_i` is the same difference
of the order-1 or order-2 Taylor expansion of :math:`\ell_i` around :math:`\hat\theta`. This module
gives the bounds of Sec. 4.2.2 of the paper for generalised linear models
:math:`\ell_i(\theta) = f(x_i^\top \theta; y_i)`. With :math:`a = \theta - \hat\theta`,
:math:`a' = \theta' - \hat\theta`, :math:`h = \theta' - \theta`,
:math:`\omega = \cos\angle(a, h)` and :math:`\omega' = \cos\angle(a', h)` (Corollary 2):

.. math::

    \text{order 1:}\quad c_i = L_1(y_i) \lVert x_i \rVert^2, \qquad
    M_1 = \lVert h \rVert \max\bigl(\lVert a \rVert D_1(\omega),
                                    \lVert a' \rVert D_1(\omega')\bigr),

    \text{order 2:}\quad c_i = L_2(y_i) \lVert x_i \rVert^3, \qquad
    M_2 = \tfrac12 \lVert h \rVert \bigl(\lVert h \rVert^2 / 6
          + \lVert a \rVert^2 D_2(\omega) + \lVert a' \rVert^2 D_2(\omega')\bigr),

with :math:`L_1(y) \ge \sup_\eta |f''(\eta; y)|`, :math:`L_2(y) \ge \sup_\eta |f'''(\eta; y)|`
(Theorem 2, eqs. 15-18) and the angle factors of Lemma 1,

.. math::

    D_1(\omega) = \frac{1 + |\omega|}{2}, \qquad
    D_2(\omega) = \frac{(2 + |\omega| c)^{3/2}}{c \, 3^{3/2}}, \qquad
    c = \sqrt{2 + \omega^2 / 4} - |\omega| / 2,

which are the exact maxima of :math:`|u^\top \hat h| |u^\top \hat a|` and
:math:`|u^\top \hat h| (u^\top \hat a)^2` over unit vectors :math:`u`.

``M`` is symmetric, :math:`M(\theta, \theta') = M(\theta', \theta)`: swapping the two points
swaps :math:`a` and :math:`a'` and flips the sign of :math:`h`, so :math:`|\omega|` and
:math:`|\omega'|` trade places and both formulas are unchanged. MHSS relies on this symmetry
(Sec. 2: the Poisson rates at :math:`(\theta', \theta)` are the primed rates at
:math:`(\theta, \theta')`).

The per-observation constants (Theorem 3, Remark 3 and Appendix A.4 of the paper) were
re-checked numerically for this package (``tests/test_bounds.py``):

================  ======================  ===============================  =====================
family            :math:`f(\eta; y)`      :math:`L_1(y)`                   :math:`L_2(y)`
================  ======================  ===============================  =====================
bernoulli_logit   Bernoulli, logit link   1/4 (exact sup)                  √3/18 (exact sup)
bernoulli_probit  Bernoulli, probit link  1 (sup, approached as η→∓∞)      0.3 (sup ≈ 0.29572)
poisson_softplus  Poisson, mean softplus  1/4 + 0.168 y (sup ≈ 0.167096)   √3/18 + 0.061 y
                                                                           (sup ≈ 0.0609127)
normal_identity   Normal, fixed σ         1/σ²                             0 (Taylor is exact)
poisson_log       Poisson, mean e^η       on a region only (see below)     on a region only
================  ======================  ===============================  =====================

The probit and Poisson values are numerical maxima in the paper, not proofs; the figures in
brackets are the suprema found here with 40-digit arithmetic, so the paper's constants are valid.

Families whose derivatives are unbounded (:data:`REGION_FAMILIES`) get constants valid on the
ball ``‖φ‖ ≤ r`` of the Laplace frame (:func:`region_row_constants`, :func:`region_radius`);
the step decides a move with either end outside it on all rows, which keeps the chain exact
because the switch depends on the pair ``{θ, θ'}`` only (``docs/methods/mhss.md``, "Region-valid
bounds").

References
----------
Prado, E. F., Nemeth, C. & Sherlock, C. (2024). Metropolis--Hastings with scalable subsampling.
arXiv:2407.19602.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import gammaln, log_ndtr
from scipy.stats import chi2

__all__ = [
    "FAMILIES",
    "REGION_FAMILIES",
    "derivative_bound",
    "glm_loglik",
    "glm_row_constants",
    "normal_scale_row_constants",
    "region_radius",
    "region_row_constants",
    "remainder_scale",
]

FAMILIES: tuple[str, ...] = (
    "bernoulli_logit",
    "bernoulli_probit",
    "poisson_softplus",
    "normal_identity",
    "poisson_log",
)

#: Families whose derivatives in ``η`` are unbounded: their constants hold on a region only
#: (:func:`region_radius`, :func:`region_row_constants`).
REGION_FAMILIES: tuple[str, ...] = ("poisson_log",)

#: Probability, under the Laplace approximation, of a point outside the region (see
#: :func:`region_radius`).
REGION_TAIL = 1e-6

# sup_eta |f''| and sup_eta |f'''| of the Bernoulli families (Theorem 3 and Remark 3).
_LOGIT_L1 = 0.25
_LOGIT_L2 = math.sqrt(3.0) / 18.0
_PROBIT_L1 = 1.0
_PROBIT_L2 = 0.3
# Poisson with mean softplus(eta): |f^(k)| <= |mu^(k)| + y * |coefficient of y| (Appendix A.4);
# sup |mu''| = 1/4 and sup |mu'''| = sqrt(3)/18 as for the logistic model, and the y-coefficients
# have numerical suprema 0.16710 and 0.060913, below the paper's 0.168 and 0.061.
_POISSON_L1 = (0.25, 0.168)
_POISSON_L2 = (math.sqrt(3.0) / 18.0, 0.061)

_SQRT27 = 3.0**1.5
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _check_family(family: str) -> None:
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}")


def _check_order(order: int) -> None:
    if isinstance(order, bool) or order not in (1, 2):
        raise ValueError(f"order must be 1 or 2 (the Taylor control-variate order), got {order!r}")


def _check_sigma(family: str, sigma: float | None) -> float:
    if family != "normal_identity":
        return math.nan
    if sigma is None:
        raise ValueError("family 'normal_identity' needs the fixed observation sigma")
    sigma = float(sigma)
    if not (math.isfinite(sigma) and sigma > 0.0):
        raise ValueError(f"sigma must be finite and positive, got {sigma!r}")
    return sigma


def _check_y(family: str, y: np.ndarray) -> np.ndarray:
    y = np.asarray(y, dtype=np.float64)
    if not np.all(np.isfinite(y)):
        raise ValueError("y must be finite")
    if family in ("bernoulli_logit", "bernoulli_probit"):
        if not np.all((y == 0.0) | (y == 1.0)):
            raise ValueError(f"family {family!r} needs y in {{0, 1}}")
    elif family in ("poisson_softplus", "poisson_log"):
        if np.any(y < 0.0) or not np.all(y == np.floor(y)):
            raise ValueError(f"family {family!r} needs non-negative integer counts y")
    return y


def derivative_bound(
    family: str,
    y: np.ndarray,
    order: int,
    sigma: float | None = None,
) -> np.ndarray:
    r"""Per-row bound on the order+1-th derivative of the GLM log-likelihood in :math:`\eta`.

    Returns :math:`L_1(y_i) \ge \sup_\eta |f''(\eta; y_i)|` for ``order=1`` and
    :math:`L_2(y_i) \ge \sup_\eta |f'''(\eta; y_i)|` for ``order=2``: the constants of
    Theorem 3 / Remark 3 of Prado, Nemeth & Sherlock (2024), which enter the conditions (15) and
    (17) of Theorem 2 through :math:`\nabla^k \ell_i = f^{(k)} x_i^{\otimes k}`.

    Parameters
    ----------
    family : str
        One of :data:`FAMILIES`.
    y : array_like, shape (N,)
        Observations: 0/1 for the Bernoulli families, non-negative integer counts for
        ``poisson_softplus``, any finite value for ``normal_identity``.
    order : {1, 2}
        Order of the Taylor control variate.
    sigma : float, optional
        Fixed observation standard deviation; required (and only used) for ``normal_identity``.

    Returns
    -------
    numpy.ndarray, shape of ``y``, float64
        ``bernoulli_logit``: 1/4 or √3/18; ``bernoulli_probit``: 1 or 0.3;
        ``poisson_softplus`` (mean :math:`\log(1 + e^\eta)`): 1/4 + 0.168 y or √3/18 + 0.061 y;
        ``normal_identity``: 1/σ² or 0.

    Raises
    ------
    ValueError
        Unknown family, order not in {1, 2}, missing or non-positive ``sigma`` for
        ``normal_identity``, or ``y`` outside the family's support.
    """
    _check_family(family)
    _check_order(order)
    if family in REGION_FAMILIES:
        raise ValueError(
            f"family {family!r} has no global derivative bound: use region_row_constants"
        )
    sigma = _check_sigma(family, sigma)
    y = _check_y(family, y)
    if family == "bernoulli_logit":
        value = _LOGIT_L1 if order == 1 else _LOGIT_L2
        return np.full(y.shape, value)
    if family == "bernoulli_probit":
        value = _PROBIT_L1 if order == 1 else _PROBIT_L2
        return np.full(y.shape, value)
    if family == "poisson_softplus":
        base, slope = _POISSON_L1 if order == 1 else _POISSON_L2
        return base + slope * y
    # normal_identity: f'' = -1/sigma^2, f''' = 0.
    value = 1.0 / sigma**2 if order == 1 else 0.0
    return np.full(y.shape, value)


def glm_row_constants(
    x_norm: np.ndarray,
    y: np.ndarray,
    family: str,
    order: int,
    sigma: float | None = None,
) -> np.ndarray:
    r"""Per-row MHSS constants :math:`c_i` for a GLM (Corollary 2).

    :math:`c_i = L_1(y_i) \lVert x_i \rVert^2` for ``order=1`` and
    :math:`c_i = L_2(y_i) \lVert x_i \rVert^3` for ``order=2``, so that
    :math:`|\xi_i(\theta, \theta')| \le c_i M(\theta, \theta')` with ``M`` from
    :func:`remainder_scale`.

    Parameters
    ----------
    x_norm : array_like, shape (N,)
        Euclidean norm of each covariate row :math:`x_i` (the row of :math:`\partial\eta_i /
        \partial\theta` restricted to the sampled block).
    y : array_like, shape (N,)
        Observations, as in :func:`derivative_bound`.
    family : str
        One of :data:`FAMILIES`.
    order : {1, 2}
        Order of the Taylor control variate.
    sigma : float, optional
        Fixed observation standard deviation for ``normal_identity``.

    Returns
    -------
    numpy.ndarray, float64
        Non-negative constants, broadcast shape of ``x_norm`` and ``y``.

    Raises
    ------
    ValueError
        As :func:`derivative_bound`, or if ``x_norm`` has negative or non-finite entries.
    """
    x_norm = np.asarray(x_norm, dtype=np.float64)
    if not np.all(np.isfinite(x_norm)) or np.any(x_norm < 0.0):
        raise ValueError("x_norm must be finite and non-negative")
    bound = derivative_bound(family, y, order, sigma)
    return bound * x_norm ** (order + 1)


def _d1(abs_omega: float) -> float:
    """Lemma 1 angle factor for order 1: max over unit u of |u.h||u.a| for unit h, a."""
    return 0.5 * (1.0 + abs_omega)


def _d2(abs_omega: float) -> float:
    """Lemma 1 angle factor for order 2: max over unit u of |u.h|(u.a)^2 for unit h, a."""
    c = math.sqrt(2.0 + 0.25 * abs_omega * abs_omega) - 0.5 * abs_omega
    return (2.0 + abs_omega * c) ** 1.5 / (c * _SQRT27)


def remainder_scale(
    theta: np.ndarray,
    theta_prime: np.ndarray,
    theta_hat: np.ndarray,
    order: int,
    *,
    sharp: bool = True,
) -> float:
    r"""Parameter part :math:`M(\theta, \theta')` of the MHSS bound (Corollary 2).

    With :math:`a = \theta - \hat\theta`, :math:`a' = \theta' - \hat\theta`,
    :math:`h = \theta' - \theta`, :math:`\omega = \cos\angle(a, h)`,
    :math:`\omega' = \cos\angle(a', h)`:

    .. math::

        M_1 = \lVert h \rVert \max(\lVert a \rVert D_1(\omega), \lVert a' \rVert D_1(\omega')),
        \qquad
        M_2 = \tfrac12 \lVert h \rVert (\lVert h \rVert^2 / 6 + \lVert a \rVert^2 D_2(\omega)
              + \lVert a' \rVert^2 D_2(\omega')),

    with :math:`D_1, D_2` from Lemma 1 (see the module docstring). The angle of a zero vector
    is irrelevant (it multiplies a zero norm); ``M = 0`` when :math:`\theta' = \theta`.
    ``M`` is symmetric in :math:`(\theta, \theta')`.

    Called once per MCMC iteration, so it does one stacked subtraction and one 3x3 Gram product
    and the rest in scalar arithmetic (a few microseconds for d ~ 10).

    Parameters
    ----------
    theta, theta_prime, theta_hat : numpy.ndarray, shape (d,)
        Current point, proposal and control-variate centre (raveled, unconstrained).
    order : {1, 2}
        Order of the Taylor control variate.
    sharp : bool
        Lemma 1's angle factors (rows with one linear predictor); ``False`` sets
        :math:`D_1 = D_2 = 1`, their maximum, as rows with several predictors need
        (:func:`normal_scale_row_constants`).

    Returns
    -------
    float
        :math:`M_1` or :math:`M_2`, non-negative (NaN if an input is NaN).

    Raises
    ------
    ValueError
        If ``order`` is not 1 or 2, or the three vectors are not 1-d of the same length.
    """
    _check_order(order)
    theta = np.asarray(theta, dtype=np.float64)
    theta_prime = np.asarray(theta_prime, dtype=np.float64)
    theta_hat = np.asarray(theta_hat, dtype=np.float64)
    if theta.ndim != 1 or theta.shape != theta_prime.shape or theta.shape != theta_hat.shape:
        raise ValueError(
            "theta, theta_prime and theta_hat must be 1-d arrays of the same length, got shapes "
            f"{theta.shape}, {theta_prime.shape}, {theta_hat.shape}"
        )
    # Rows: a, a', h. h is formed directly (not as a' - a) so that it keeps full relative
    # precision when theta' is close to theta far from theta_hat.
    v = np.subtract((theta, theta_prime, theta_prime), (theta_hat, theta_hat, theta))
    (aa, _, ah), (_, apap, aph), (_, _, hh) = v.dot(v.T).tolist()
    if hh <= 0.0:
        return 0.0
    norm_h = math.sqrt(hh)
    norm_a = math.sqrt(aa)
    norm_ap = math.sqrt(apap)
    # |cos| of the angles, clipped into [0, 1] against rounding; 0 for a zero vector.
    w = min(abs(ah) / (norm_a * norm_h), 1.0) if norm_a > 0.0 else 0.0
    wp = min(abs(aph) / (norm_ap * norm_h), 1.0) if norm_ap > 0.0 else 0.0
    if not sharp:
        w = wp = 1.0  # D_1(1) = D_2(1) = 1, the largest values
    if order == 1:
        return norm_h * max(norm_a * _d1(w), norm_ap * _d1(wp))
    return 0.5 * norm_h * (hh / 6.0 + aa * _d2(w) + apap * _d2(wp))


def _log_softplus(eta: np.ndarray) -> np.ndarray:
    """log(log(1 + e^eta)) without underflow for very negative eta."""
    eta = np.asarray(eta, dtype=np.float64)
    out = np.empty_like(eta)
    low = eta < -30.0
    # log(log1p(t)) = log(t) - t/2 + O(t^2) with t = e^eta < 1e-13.
    out[low] = eta[low] - 0.5 * np.exp(eta[low])
    out[~low] = np.log(np.logaddexp(0.0, eta[~low]))
    return out


def glm_loglik(
    family: str,
    eta: np.ndarray,
    y: np.ndarray,
    sigma: float | None = None,
) -> np.ndarray:
    r"""Per-row GLM log-likelihood :math:`f(\eta_i; y_i)`, computed stably.

    ``bernoulli_logit``: :math:`-\log(1 + e^{-s\eta})`, ``bernoulli_probit``:
    :math:`\log\Phi(s\eta)` with :math:`s = 2y - 1`; ``poisson_softplus``: Poisson log-pmf with
    mean :math:`\mu = \log(1 + e^\eta)`; ``normal_identity``: normal log-density with mean
    :math:`\eta` and standard deviation ``sigma``. The values equal ``scipy.stats`` ``bernoulli``,
    ``poisson`` and ``norm`` log-pmf/log-pdf, and stay finite where those underflow;
    ``poisson_log``: Poisson log-pmf with mean :math:`e^\eta`.

    Parameters
    ----------
    family : str
        One of :data:`FAMILIES`.
    eta : array_like
        Linear predictor :math:`x_i^\top\theta`.
    y : array_like
        Observations, broadcastable against ``eta``; support as in :func:`derivative_bound`.
    sigma : float, optional
        Fixed observation standard deviation for ``normal_identity``.

    Returns
    -------
    numpy.ndarray, float64
        Log-likelihood per row, broadcast shape of ``eta`` and ``y``.

    Raises
    ------
    ValueError
        Unknown family, missing or non-positive ``sigma`` for ``normal_identity``, or ``y``
        outside the family's support.
    """
    _check_family(family)
    sigma = _check_sigma(family, sigma)
    y = _check_y(family, y)
    eta, y = np.broadcast_arrays(np.asarray(eta, dtype=np.float64), y)
    if family == "bernoulli_logit":
        return -np.logaddexp(0.0, (1.0 - 2.0 * y) * eta)
    if family == "bernoulli_probit":
        return log_ndtr((2.0 * y - 1.0) * eta)
    if family == "poisson_softplus":
        mu = np.logaddexp(0.0, eta)
        log_mu = _log_softplus(eta)
        return np.where(y > 0.0, y * log_mu, 0.0) - mu - gammaln(y + 1.0)
    if family == "poisson_log":
        return y * eta - np.exp(eta) - gammaln(y + 1.0)
    z = (y - eta) / sigma
    return -0.5 * z * z - math.log(sigma) - _HALF_LOG_2PI


def region_radius(dim: int, tail: float = REGION_TAIL, margin: float = 1.0) -> float:
    r"""Radius ``r`` of the region ``R = {θ : ‖φ‖ ≤ r}``, ``φ = L⁻¹(θ − θ̂)``.

    Under the Laplace approximation ``φ ~ N(μ, I)`` with ``‖μ‖`` below the mode tolerance
    (0.25 sd), so ``‖φ‖ ≤ ‖μ‖ + χ`` with ``χ² ~ χ²_d``: ``r = √(χ²_d(1 − tail)) + margin``
    leaves a point outside ``R`` with probability below ``tail`` (10⁻⁶), and a move leaves it
    at most twice as often. A larger ``r`` costs only a factor ``e^{r s_i}`` in ``c_i``,
    close to 1 on tall data where ``s_i = ‖Lᵀx_i‖`` is small (``docs/methods/mhss.md``).
    """
    return float(np.sqrt(chi2.isf(tail, dim)) + margin)


def region_row_constants(
    family: str, order: int, xt_norm: np.ndarray, f2_hat: np.ndarray, radius: float
) -> np.ndarray:
    r"""Whitened row constants valid for every ``θ, θ'`` in ``R = {‖φ‖ ≤ r}``.

    On ``R`` (convex, and containing ``θ̂``, so every point the Taylor remainders of
    Corollary 2 visit), ``|η_i − η̂_i| = |x_iᵀLφ| ≤ s_i r`` with ``s_i = ‖Lᵀx_i‖``, so
    ``L_k`` may be the supremum of ``|f^{(k+1)}|`` over that interval only. For
    ``poisson_log`` (``f = yη − e^η − log y!``, whose second and third derivatives are both
    ``−e^η``): ``L_1 = L_2 = e^{η̂_i + r s_i} = |f''(η̂_i)| e^{r s_i}``.

    Parameters
    ----------
    family : str
        One of :data:`REGION_FAMILIES`.
    order : {1, 2}
        Order of the Taylor control variate.
    xt_norm : ndarray, shape (n,)
        ``s_i = ‖Lᵀx_i‖``.
    f2_hat : ndarray, shape (n,)
        ``f''(η̂_i; y_i)`` at the reference point.
    radius : float
        ``r`` (:func:`region_radius`).

    Returns
    -------
    ndarray, shape (n,)
        ``c_i = L_k s_i^{k+1}``, for use with ``M(φ, φ')`` of :func:`remainder_scale` while
        ``‖φ‖, ‖φ'‖ ≤ r``.
    """
    _check_order(order)
    if family not in REGION_FAMILIES:
        raise ValueError(f"unknown region family {family!r}; expected one of {REGION_FAMILIES}")
    if not (math.isfinite(radius) and radius > 0.0):
        raise ValueError(f"radius must be finite and positive, got {radius!r}")
    xt_norm = np.asarray(xt_norm, dtype=np.float64)
    sup = np.abs(np.asarray(f2_hat, dtype=np.float64)) * np.exp(radius * xt_norm)
    return sup * xt_norm ** (order + 1)


def normal_scale_row_constants(
    order: int,
    s_mu: np.ndarray,
    s_log_sigma: np.ndarray,
    abs_resid_hat: np.ndarray,
    log_sigma_hat: np.ndarray,
    radius: float,
) -> np.ndarray:
    r"""Whitened constants of a Normal row with sampled σ, valid on ``R = {‖φ‖ ≤ r}``.

    The row is :math:`f(\mu_i, \lambda_i) = -\tfrac12 (y_i - \mu_i)^2 e^{-2\lambda_i} - \lambda_i`
    (up to a constant) with two predictors affine in θ: the mean :math:`\mu_i` and
    :math:`\lambda_i = \log\sigma_i`, whitened rows of lengths :math:`s_{\mu,i}` and
    :math:`s_{\lambda,i}`. With :math:`\rho = y - \mu` its derivatives are
    :math:`f_{\mu\mu} = -e^{-2\lambda}`, :math:`f_{\mu\lambda} = -2\rho e^{-2\lambda}`,
    :math:`f_{\lambda\lambda} = -2\rho^2 e^{-2\lambda}`, :math:`f_{\mu\mu\mu} = 0`,
    :math:`f_{\mu\mu\lambda} = 2e^{-2\lambda}`, :math:`f_{\mu\lambda\lambda} = 4\rho e^{-2\lambda}`,
    :math:`f_{\lambda\lambda\lambda} = 4\rho^2 e^{-2\lambda}`. A k-th directional derivative of
    the row along ``v`` in φ is a sum over ordered k-tuples of predictors of
    :math:`f_{j\ldots}\prod (\tilde a_j^\top v)`, each factor at most :math:`s_j\lVert v\rVert`
    (Cauchy–Schwarz), so Theorem 2 of Prado et al. (2024) holds with

    .. math::

        c_i^{(1)} = E_i\,(s_\mu^2 + 4 P_i s_\mu s_\lambda + 2 P_i^2 s_\lambda^2), \qquad
        c_i^{(2)} = E_i\,(6 s_\mu^2 s_\lambda + 12 P_i s_\mu s_\lambda^2 + 4 P_i^2 s_\lambda^3),

    :math:`E_i = e^{-2\hat\lambda_i + 2 r s_\lambda}` and
    :math:`P_i = |y_i - \hat\mu_i| + r s_\mu` (the suprema over ``R``), and the angle factors
    of ``M`` set to 1 (``remainder_scale(..., sharp=False)``): Lemma 1's sharper factors assume
    one direction per row.
    """
    _check_order(order)
    if not (math.isfinite(radius) and radius > 0.0):
        raise ValueError(f"radius must be finite and positive, got {radius!r}")
    s1 = np.asarray(s_mu, dtype=np.float64)
    s2 = np.asarray(s_log_sigma, dtype=np.float64)
    p = np.asarray(abs_resid_hat, dtype=np.float64) + radius * s1
    e = np.exp(-2.0 * np.asarray(log_sigma_hat, dtype=np.float64) + 2.0 * radius * s2)
    if order == 1:
        return e * (s1**2 + 4.0 * p * s1 * s2 + 2.0 * p**2 * s2**2)
    return e * (6.0 * s1**2 * s2 + 12.0 * p * s1 * s2**2 + 4.0 * p**2 * s2**3)
