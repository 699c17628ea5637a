"""Random-walk proposals shared by the three step methods.

The default is the Laplace random walk of Prado, Nemeth & Sherlock (2024), eq. (19):
``θ' = θ + (κ/√d)·chol(V)·z`` with ``V = (−∇² log π(θ̂))⁻¹`` (priors included) and
``z ~ N(0, I)``. It is symmetric, so the proposal terms of every acceptance test vanish.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

__all__ = ["RandomWalkProposal", "laplace_covariance"]


def laplace_covariance(neg_hessian: np.ndarray) -> np.ndarray:
    """``V = (−∇² log π(θ̂))⁻¹``, the Laplace approximation's covariance.

    Raises
    ------
    ValueError
        If ``−∇² log π(θ̂)`` is not positive definite (``θ̂`` is not a mode, or the posterior is
        improper in some direction); the message says what to do.
    """
    neg_hessian = 0.5 * (neg_hessian + neg_hessian.T)
    try:
        chol = scipy.linalg.cholesky(neg_hessian, lower=True)
    except scipy.linalg.LinAlgError:
        eig = np.linalg.eigvalsh(neg_hessian)
        raise ValueError(
            "The negative Hessian of the log posterior at the reference point is not positive "
            f"definite (smallest eigenvalue {eig.min():.3g}), so there is no Laplace covariance. "
            "Check that map_point is a mode (pm.find_MAP()), give the parameters proper priors, "
            "or pass proposal_cov= explicitly."
        ) from None
    identity = np.eye(neg_hessian.shape[0])
    inv_chol = scipy.linalg.solve_triangular(chol, identity, lower=True)
    return inv_chol.T @ inv_chol


class RandomWalkProposal:
    """Gaussian random walk ``θ' = θ + s·L·z`` with ``L Lᵀ = cov`` and a tunable scale ``s``.

    Parameters
    ----------
    cov : ndarray, shape (d, d)
        Covariance of ``L z``.
    scale : float
        Initial ``s`` (``κ/√d`` for the Laplace covariance, 1 for a user covariance).
    """

    symmetric = True

    def __init__(self, cov: np.ndarray, scale: float) -> None:
        cov = np.atleast_2d(np.asarray(cov, dtype=np.float64))
        if cov.ndim != 2 or cov.shape[0] != cov.shape[1]:
            raise ValueError(f"proposal_cov must be a square matrix; got shape {cov.shape}")
        if not np.all(np.isfinite(cov)):
            raise ValueError("proposal_cov contains NaN or infinite entries")
        try:
            self.chol = scipy.linalg.cholesky(0.5 * (cov + cov.T), lower=True)
        except scipy.linalg.LinAlgError:
            raise ValueError("proposal_cov must be symmetric positive definite") from None
        self.dim = cov.shape[0]
        self.scale = float(scale)

    def propose(self, rng: np.random.Generator, theta: np.ndarray) -> tuple[np.ndarray, float]:
        """Return ``θ'`` and ``log q(θ|θ') − log q(θ'|θ)`` (0: the walk is symmetric)."""
        return theta + self.scale * (self.chol @ rng.standard_normal(self.dim)), 0.0
