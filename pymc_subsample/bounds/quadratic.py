r"""MHSS constants for rows whose predictor is quadratic in θ: products of two parameters.

A row ``ℓ_i(θ) = f(η_i(θ); y_i)`` of any one-predictor family whose predictor is a quadratic
form of the parameters, ``η_i = c_i + a_iᵀθ + ½θᵀQ_iθ`` with ``Q_i`` free of ``θ`` (a bilinear
``b_1 b_2 x_i``, a non-centred effect ``s z_g`` whose scale has no positive prior), is no longer
of rank one along one covariate row: in the Laplace frame, with ``g̃_i = Lᵀ∇η_i(θ̂)`` and
``Q̃_i = LᵀQ_iL``, the predictor is ``η̂_i + g̃_iᵀφ + ½φᵀQ̃_iφ`` and its gradient
``g̃_i + Q̃_iφ`` moves with ``φ``. Since ``η`` is quadratic its third derivative vanishes, and
along unit vectors ``u, v, w``

.. math::

    D^2\ell[u, v] = f''(\eta)(\nabla\eta^\top u)(\nabla\eta^\top v) + f'(\eta)\,u^\top\tilde Q v,

    D^3\ell[u, v, w] = f'''(\eta)\prod(\nabla\eta^\top\cdot)
        + f''(\eta)\bigl[(u^\top\tilde Qv)(\nabla\eta^\top w) + \text{2 more}\bigr].

On the ball ``‖φ‖ ≤ r``: ``|∇ηᵀu| ≤ s̄_i = s_i + r q_i`` with ``s_i = ‖g̃_i‖`` and
``q_i ≥ ‖Q̃_i‖₂``, and ``η`` stays in ``η̂_i ± w_i``, ``w_i = r s_i + ½ r² q_i``. With
``L_1 ≥ sup|f''|`` and ``L_2 ≥ sup|f'''|`` on that interval (the family's
:meth:`~pymc_subsample.bounds.Family.derivative_sup`) and ``sup|f'| ≤ |f'(η̂_i)| + L_1 w_i``
(mean value), Theorem 2 of Prado, Nemeth & Sherlock (2024) holds with

.. math::

    c_i^{(1)} = L_1\bar s_i^2 + (|f'(\hat\eta_i)| + L_1 w_i)\,q_i, \qquad
    c_i^{(2)} = L_2\bar s_i^3 + 3L_1 q_i\bar s_i,

bounds on the whole derivative tensor (not of rank one), so ``M`` goes without Lemma 1's
angle factors. The data pass gives ``q_i = Σ_{jk}|Q_{i,jk}|σ_jσ_k`` with ``σ_j = ‖Lᵀe_j‖``
(``Q̃_i = Σ_{jk} Q_{i,jk} (Lᵀe_j)(Lᵀe_k)ᵀ`` and the triangle inequality): at most twice the
spectral norm for one product of two parameters. For an affine predictor (``q_i = 0``) these
are Corollary 2's constants without angle factors.
"""

from __future__ import annotations

import numpy as np

from pymc_subsample.bounds.family import Family
from pymc_subsample.bounds.remainder import check_region

__all__ = ["quadratic_row_constants"]


def quadratic_row_constants(
    family: Family,
    order: int,
    s: np.ndarray,
    q: np.ndarray,
    f1_hat: np.ndarray,
    y: np.ndarray,
    params: tuple[np.ndarray, ...],
    eta_hat: np.ndarray,
    radius: float,
) -> np.ndarray:
    r"""Whitened ``c_i`` of rows with a quadratic predictor, valid on ``‖φ‖ ≤ radius``
    (module docstring).

    Parameters
    ----------
    family : Family
        The rows' one-predictor family.
    order : {1, 2}
    s : ndarray
        ``‖Lᵀ∇η_i(θ̂)‖``.
    q : ndarray
        A bound on ``‖LᵀQ_iL‖₂``, ``Q_i`` the predictor's Hessian in ``θ``.
    f1_hat : ndarray
        ``f'(η̂_i)``.
    y, params, eta_hat : ndarray
        Observations, fixed parameters and ``η̂_i`` per row.
    radius : float
        ``r`` of the region (finite: the predictor's gradient grows with ``‖φ‖``).
    """
    check_region(order, radius)
    s, q = np.asarray(s, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if np.any(q < 0.0) or not np.all(np.isfinite(q)):
        raise ValueError("the curvature norms q must be finite and non-negative")
    half_width = radius * s + 0.5 * radius**2 * q
    # sup on η̂ ± w: row_sup's interval is η̂ ± r·norms
    l1 = family.row_sup(1, half_width / radius, y, params, eta_hat=eta_hat, radius=radius)
    grad_bar = s + radius * q
    if order == 1:
        return l1 * grad_bar**2 + (np.abs(f1_hat) + l1 * half_width) * q
    l2 = family.row_sup(2, half_width / radius, y, params, eta_hat=eta_hat, radius=radius)
    return l2 * grad_bar**3 + 3.0 * l1 * q * grad_bar
