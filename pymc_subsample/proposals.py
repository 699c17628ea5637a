"""Proposals shared by the step methods: the Laplace random walk and a Langevin proposal.

The default is the Laplace random walk of Prado, Nemeth & Sherlock (2024), eq. (19):
``θ' = θ + (κ/√d)·chol(V)·z`` with ``V = (−∇² log π(θ̂))⁻¹`` (priors included) and
``z ~ N(0, I)``. It is symmetric, so the proposal terms of every acceptance test vanish.

:class:`LangevinProposal` adds a drift along a gradient estimate (MALA, or SGLD when the
estimate uses a minibatch; Korattikara, Chen & Welling 2014, Sec. 5.4). It is asymmetric and
returns the ``log q`` ratio the acceptance test needs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.linalg

__all__ = ["LangevinProposal", "RandomWalkProposal", "laplace_covariance"]

#: ``draw_gradient(rng)`` returns one gradient function ``θ ↦ ĝ(θ)`` for one proposal.
GradientDraw = Callable[[np.random.Generator], Callable[[np.ndarray], np.ndarray]]


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


class LangevinProposal(RandomWalkProposal):
    r"""Preconditioned Langevin proposal with a gradient estimate drawn afresh per proposal.

    .. math::

        θ' = θ + \tfrac{s^2}{2} V \hat g(θ) + s L z,\qquad V = L L^\top,\ z \sim N(0, I)

    (Welling & Teh 2011; Korattikara, Chen & Welling 2014, Sec. 5.4, Eq. 13 with ``α = s²`` and
    preconditioner ``V``). ``ĝ`` estimates ``∇ log π``. Each call first draws one gradient
    function ``ĝ = draw_gradient(rng)``, independently of ``θ`` (for SGLD: a fresh minibatch),
    and uses that same function for the forward and the reverse move. Each fixed ``ĝ`` gives a
    proposal kernel ``q(·|θ, ĝ)`` whose MH correction is computable, so the MH test with

    .. math::

        \log q(θ|θ', \hat g) - \log q(θ'|θ, \hat g) = \tfrac12\lVert z\rVert^2
        - \tfrac12\lVert w\rVert^2,\qquad w = -z - \tfrac{s}{2} L^\top\big(\hat g(θ)
        + \hat g(θ')\big)

    satisfies detailed balance for every ``ĝ``, hence also for their mixture (paper, Eq. 14).
    Re-drawing the minibatch for the reverse move would break this: the reverse density would
    then be a mixture over minibatches, which is intractable.

    Parameters
    ----------
    cov : ndarray, shape (d, d)
        Preconditioner ``V`` (the Laplace covariance by default in the steps).
    scale : float
        ``s``; the step's tuning adapts it.
    draw_gradient : callable
        ``draw_gradient(rng) -> grad`` with ``grad(θ) -> ndarray of shape (d,)``. Called once per
        proposal with the proposal's generator; ``grad`` is evaluated at ``θ`` and ``θ'``.

    Notes
    -----
    Cost per proposal: two evaluations of ``ĝ`` plus O(d²) linear algebra. A non-finite
    gradient at ``θ'`` gives a ``-inf`` log ratio, i.e. a certain rejection.
    """

    symmetric = False

    def __init__(self, cov: np.ndarray, scale: float, draw_gradient: GradientDraw) -> None:
        super().__init__(cov, scale)
        if not callable(draw_gradient):
            raise TypeError("draw_gradient must be callable: rng -> (theta -> gradient)")
        self.draw_gradient = draw_gradient

    def drift(self, grad_value: np.ndarray) -> np.ndarray:
        """``(s²/2)·V·g``."""
        return 0.5 * self.scale**2 * (self.chol @ (self.chol.T @ grad_value))

    def propose(self, rng: np.random.Generator, theta: np.ndarray) -> tuple[np.ndarray, float]:
        """Return ``θ'`` and ``log q(θ|θ', ĝ) − log q(θ'|θ, ĝ)`` for one drawn ``ĝ``."""
        grad_fn = self.draw_gradient(rng)
        g = np.asarray(grad_fn(theta), dtype=np.float64)
        if g.shape != (self.dim,):
            raise ValueError(f"the gradient has shape {g.shape}; expected ({self.dim},)")
        z = rng.standard_normal(self.dim)
        theta_new = theta + self.drift(g) + self.scale * (self.chol @ z)
        g_new = np.asarray(grad_fn(theta_new), dtype=np.float64)
        if not (np.all(np.isfinite(g)) and np.all(np.isfinite(g_new))):
            return theta_new, -np.inf
        w = -z - 0.5 * self.scale * (self.chol.T @ (g + g_new))
        return theta_new, 0.5 * float(z @ z - w @ w)

    def log_density(self, theta_to: np.ndarray, theta_from: np.ndarray,
                    grad_from: np.ndarray) -> float:
        """``log q(θ_to | θ_from, ĝ)`` up to a constant, given ``ĝ(θ_from)`` (for checks)."""
        resid = theta_to - theta_from - self.drift(grad_from)
        w = scipy.linalg.solve_triangular(self.chol, resid / self.scale, lower=True)
        return -0.5 * float(w @ w)
