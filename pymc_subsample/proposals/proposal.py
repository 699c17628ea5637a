r"""Proposals shared by every step, in the whitened coordinates of the Laplace frame.

All proposals move ``φ = L⁻¹(θ − θ̂)`` (:mod:`pymc_subsample.model.frame`), in which the Laplace
approximation is ``g = N(μ, I)`` with ``μ`` near 0; the steps map ``φ'`` back to ``θ'``. Each
returns ``φ'`` and ``log q(φ|φ') − log q(φ'|φ)``, which enters every acceptance test as part of
its ``log α`` (the Jacobian of the affine map cancels). The maths is in
``docs/methods/proposals.md``.

- :class:`RandomWalkProposal`: ``φ' = φ + s·A z`` (``A = I`` for the Laplace frame, so in ``θ``
  it is the Laplace random walk ``θ' = θ + (κ/√d)·L z`` of Prado, Nemeth & Sherlock 2024,
  eq. (19)); symmetric.
- :class:`PCNProposal`: preconditioned Crank–Nicolson, ``φ' = μ + ρ(φ − μ) + √(1 − ρ²) z``
  (Cornish et al. 2019, Sec. 3.2). Reversible with respect to ``g = N(μ, I)``, so the q-ratio is
  ``log g(φ) − log g(φ') = ½‖φ' − μ‖² − ½‖φ − μ‖²``. ``ρ → 1`` is a small random walk,
  ``ρ = 0`` the independence sampler.
- :class:`IndependenceProposal`: ``φ' ~ N(μ, s²I)`` or a multivariate t with ``df`` degrees of
  freedom, centre ``μ`` and scale ``s``; q-ratio ``log g_s(φ) − log g_s(φ')``.
- :class:`LangevinProposal`: a drift along a gradient estimate (MALA, or SGLD with a minibatch
  gradient; Korattikara, Chen & Welling 2014, Sec. 5.4).

``μ`` is the Laplace mode in the frame, ``μ = L⁻¹(θ* − θ̂)`` with ``θ* = θ̂ + P⁻¹∇log π(θ̂)``
one Newton step on from the reference point: ``θ̂`` (``φ = 0``) is a mode only to within
``map_tolerance`` posterior sds, and the step puts the proposal's Gaussian where the posterior
is (``docs/methods/reference.md``).

Each proposal has one tuned parameter, :attr:`parameter` (``κ``, ``ρ`` or ``s``), and the grid
:attr:`candidates` that :class:`pymc_subsample.proposals.tuning.ESJDTuner` chooses from
during tuning.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import scipy.linalg

__all__ = [
    "PROPOSALS",
    "BlockProposal",
    "IndependenceProposal",
    "LangevinProposal",
    "PCNProposal",
    "RandomWalkProposal",
    "checked_rho",
    "cholesky_factor",
    "make_proposal",
]

#: Names accepted by the steps' ``proposal=`` argument.
PROPOSALS = ("pcn", "independence", "random_walk")

#: ``draw_gradient(rng)`` returns one gradient function ``φ ↦ ĝ(φ)`` for one proposal.
GradientDraw = Callable[[np.random.Generator], Callable[[np.ndarray], np.ndarray]]


def cholesky_factor(cov: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of a proposal covariance, or a clear ``ValueError``."""
    cov = np.atleast_2d(np.asarray(cov, dtype=np.float64))
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1]:
        raise ValueError(f"proposal_cov must be a square matrix; got shape {cov.shape}")
    if not np.all(np.isfinite(cov)):
        raise ValueError("proposal_cov contains NaN or infinite entries")
    try:
        return scipy.linalg.cholesky(0.5 * (cov + cov.T), lower=True)
    except scipy.linalg.LinAlgError:
        raise ValueError("proposal_cov must be symmetric positive definite") from None


class RandomWalkProposal:
    """Gaussian random walk ``φ' = φ + s·A z`` with ``A Aᵀ = cov``; ``s = κ·base``.

    Parameters
    ----------
    cov : ndarray, shape (d, d), or int
        Covariance of ``A z``; an int ``d`` for the identity (the Laplace frame's), then
        :attr:`chol` is None.
    scale : float
        Initial ``s``.
    base : float
        ``s`` per unit of the reported parameter ``κ`` (``1/√d`` for the Laplace frame, so that
        ``κ`` is the scaling of Prado et al. 2024, Sec. 4.4; 1 for a user covariance).
    """

    symmetric = True
    #: how the progress bar and messages write :attr:`parameter`
    parameter_symbol = "κ"
    candidates: Sequence[float] = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0)
    #: no acceptance floor in tuning: a random walk's best acceptance is low by design
    min_accept: float | None = None

    def __init__(self, cov: np.ndarray | int, scale: float, base: float = 1.0) -> None:
        if np.ndim(cov) == 0:
            # the identity of that dimension (the Laplace frame's): no d × d matrix, and
            # O(d) a step rather than O(d²), with many levels
            self.chol, self.dim = None, int(cov)
        else:
            self.chol = cholesky_factor(cov)
            self.dim = self.chol.shape[0]
        self.base = float(base)
        self.parameter = float(scale) / self.base

    @property
    def parameter(self) -> float:
        """``κ = s / base``."""
        return self.scale / self.base

    @parameter.setter
    def parameter(self, value: float) -> None:
        value = float(value)
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"scaling must be a positive number; got {value!r}")
        self.scale = value * self.base

    def propose(self, rng: np.random.Generator, phi: np.ndarray) -> tuple[np.ndarray, float]:
        """Return ``φ'`` and the log q-ratio (0: the walk is symmetric)."""
        z = rng.standard_normal(self.dim)
        return phi + self.scale * (z if self.chol is None else self.chol @ z), 0.0


def checked_rho(value: float) -> float:
    """``value`` as a pCN autocorrelation ``ρ``, which must be in ``[0, 1)``."""
    value = float(value)
    if not 0.0 <= value < 1.0:
        raise ValueError(f"the pCN autocorrelation rho must be in [0, 1); got {value!r}")
    return value


class PCNProposal:
    """Preconditioned Crank–Nicolson ``φ' = μ + ρ(φ − μ) + √(1 − ρ²) z`` around ``N(μ, I)``.

    Parameters
    ----------
    dim : int
    rho : float
        Autocorrelation ``ρ ∈ [0, 1)``.
    centre : ndarray, shape (d,), optional
        ``μ``, the centre of the Gaussian the proposal is reversible for (zero by default: the
        frame's ``θ̂``; the steps pass the Laplace mode, which may lie a fraction of a posterior
        sd from ``θ̂``).
    """

    symmetric = False
    parameter_symbol = "ρ"
    candidates: Sequence[float] = (0.0, 0.3, 0.5, 0.7, 0.85, 0.93, 0.97)
    #: Tuning chooses no ``ρ`` accepted less often than this
    #: (:class:`~pymc_subsample.proposals.tuning.ESJDTuner`): on tall data ``ρ = 0`` is accepted
    #: 0.8–0.99 of the time; the 46-row ``mesquite`` regression accepts it 0.57 of the time and
    #: sticks in the tails of σ there
    min_accept: float | None = 0.7

    def __init__(self, dim: int, rho: float = 0.5, centre: np.ndarray | None = None) -> None:
        self.dim = int(dim)
        self.centre = _centre(centre, self.dim)
        self.parameter = rho

    @property
    def parameter(self) -> float:
        """``ρ``."""
        return self.rho

    @parameter.setter
    def parameter(self, value: float) -> None:
        self.rho = checked_rho(value)

    def propose(self, rng: np.random.Generator, phi: np.ndarray) -> tuple[np.ndarray, float]:
        """Return ``φ'`` and ``log g(φ) − log g(φ') = ½(‖φ' − μ‖² − ‖φ − μ‖²)``."""
        z = rng.standard_normal(self.dim)
        u = phi - self.centre
        u_new = self.rho * u + np.sqrt(1.0 - self.rho**2) * z
        return self.centre + u_new, 0.5 * float(u_new @ u_new - u @ u)


class IndependenceProposal:
    """Independence sampler ``φ' ~ N(μ, s²I)``, or a multivariate t with ``df``, centre ``μ`` and
    scale ``s``.

    Parameters
    ----------
    dim : int
    scale : float
        ``s > 0`` (1: the Laplace approximation itself).
    df : float, optional
        Degrees of freedom of a multivariate t (heavier tails, safer for skewed posteriors).
    centre : ndarray, shape (d,), optional
        ``μ`` (zero by default), as for :class:`PCNProposal`.
    """

    symmetric = False
    parameter_symbol = "s"
    candidates: Sequence[float] = (0.9, 1.0, 1.1, 1.25, 1.5)
    #: no floor: every scale is a global move; a heavy-tailed ``df`` is the remedy here
    min_accept: float | None = None

    def __init__(
        self, dim: int, scale: float = 1.0, df: float | None = None,
        centre: np.ndarray | None = None,
    ) -> None:
        self.dim = int(dim)
        self.centre = _centre(centre, self.dim)
        if df is not None and not (np.isfinite(df) and df > 0):
            raise ValueError(f"df must be a positive number or None; got {df!r}")
        self.df = None if df is None else float(df)
        self.parameter = scale

    @property
    def parameter(self) -> float:
        """``s``."""
        return self.scale

    @parameter.setter
    def parameter(self, value: float) -> None:
        value = float(value)
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"the independence proposal's scale must be positive; got {value!r}")
        self.scale = value

    def log_density(self, phi: np.ndarray) -> float:
        """``log g_s(φ)`` up to a constant that does not depend on ``φ``."""
        u = phi - self.centre
        r2 = float(u @ u) / self.scale**2
        if self.df is None:
            return -0.5 * r2
        return -0.5 * (self.df + self.dim) * np.log1p(r2 / self.df)

    def propose(self, rng: np.random.Generator, phi: np.ndarray) -> tuple[np.ndarray, float]:
        """Return ``φ'`` and ``log g_s(φ) − log g_s(φ')``."""
        z = rng.standard_normal(self.dim)
        if self.df is not None:
            z = z / np.sqrt(rng.chisquare(self.df) / self.df)
        phi_new = self.centre + self.scale * z
        return phi_new, self.log_density(phi) - self.log_density(phi_new)


class LangevinProposal(RandomWalkProposal):
    r"""Preconditioned Langevin proposal with a gradient estimate drawn afresh per proposal.

    .. math::

        φ' = φ + \tfrac{s^2}{2} V \hat g(φ) + s A z,\qquad V = A A^\top,\ z \sim N(0, I)

    (Welling & Teh 2011; Korattikara, Chen & Welling 2014, Sec. 5.4, Eq. 13 with ``α = s²`` and
    preconditioner ``V``; in the Laplace frame ``V = I``). ``ĝ`` estimates the gradient of the
    log posterior in the proposal's coordinates. Each call first draws one gradient function
    ``ĝ = draw_gradient(rng)``, independently of ``φ`` (for SGLD: a fresh minibatch), and uses
    that same function for the forward and the reverse move. Each fixed ``ĝ`` gives a proposal
    kernel ``q(·|φ, ĝ)`` whose MH correction is computable, so the MH test with

    .. math::

        \log q(φ|φ', \hat g) - \log q(φ'|φ, \hat g) = \tfrac12\lVert z\rVert^2
        - \tfrac12\lVert w\rVert^2,\qquad w = -z - \tfrac{s}{2} A^\top\big(\hat g(φ)
        + \hat g(φ')\big)

    satisfies detailed balance for every ``ĝ``, hence also for their mixture (paper, Eq. 14).
    Re-drawing the minibatch for the reverse move would break this: the reverse density would
    then be a mixture over minibatches, which is intractable.

    Parameters
    ----------
    cov : ndarray, shape (d, d)
        Preconditioner ``V``.
    scale : float
        ``s``; the step's tuning adapts it.
    draw_gradient : callable
        ``draw_gradient(rng) -> grad`` with ``grad(φ) -> ndarray of shape (d,)``. Called once per
        proposal with the proposal's generator; ``grad`` is evaluated at ``φ`` and ``φ'``.
    base : float
        As for :class:`RandomWalkProposal`.

    Notes
    -----
    Cost per proposal: two evaluations of ``ĝ`` plus O(d²) linear algebra. A non-finite
    gradient at ``φ'`` gives a ``-inf`` log ratio, i.e. a certain rejection.
    """

    symmetric = False

    def __init__(
        self, cov: np.ndarray, scale: float, draw_gradient: GradientDraw, base: float = 1.0
    ) -> None:
        super().__init__(cov, scale, base)
        if not callable(draw_gradient):
            raise TypeError("draw_gradient must be callable: rng -> (phi -> gradient)")
        self.draw_gradient = draw_gradient

    def drift(self, grad_value: np.ndarray) -> np.ndarray:
        """``(s²/2)·V·g``."""
        return 0.5 * self.scale**2 * (self.chol @ (self.chol.T @ grad_value))

    def propose(self, rng: np.random.Generator, phi: np.ndarray) -> tuple[np.ndarray, float]:
        """Return ``φ'`` and ``log q(φ|φ', ĝ) − log q(φ'|φ, ĝ)`` for one drawn ``ĝ``."""
        grad_fn = self.draw_gradient(rng)
        g = np.asarray(grad_fn(phi), dtype=np.float64)
        if g.shape != (self.dim,):
            raise ValueError(f"the gradient has shape {g.shape}; expected ({self.dim},)")
        z = rng.standard_normal(self.dim)
        phi_new = phi + self.drift(g) + self.scale * (self.chol @ z)
        g_new = np.asarray(grad_fn(phi_new), dtype=np.float64)
        if not (np.all(np.isfinite(g)) and np.all(np.isfinite(g_new))):
            return phi_new, -np.inf
        w = -z - 0.5 * self.scale * (self.chol.T @ (g + g_new))
        return phi_new, 0.5 * float(z @ z - w @ w)

    def log_density(self, phi_to: np.ndarray, phi_from: np.ndarray,
                    grad_from: np.ndarray) -> float:
        """``log q(φ_to | φ_from, ĝ)`` up to a constant, given ``ĝ(φ_from)`` (for checks)."""
        resid = phi_to - phi_from - self.drift(grad_from)
        w = scipy.linalg.solve_triangular(self.chol, resid / self.scale, lower=True)
        return -0.5 * float(w @ w)


class BlockProposal:
    """A proposal that moves the coordinates ``φ[start:stop]`` only, by ``inner`` (a proposal
    of their dimension); the others are held. Its q-ratio is ``inner``'s: the held coordinates
    are the same in both directions. Its tuned parameter is ``inner``'s.

    Parameters
    ----------
    inner
        A proposal of dimension ``stop − start`` (:func:`make_proposal`).
    start, stop : int
    dim : int
        ``d``, the length of ``φ``.
    """

    def __init__(self, inner, start: int, stop: int, dim: int) -> None:
        if stop - start != inner.dim or not 0 <= start < stop <= dim:
            raise ValueError(f"a block {start}:{stop} of {dim} coordinates does not fit a "
                             f"proposal of dimension {inner.dim}")
        self.inner, self.start, self.stop, self.dim = inner, int(start), int(stop), int(dim)
        self.symmetric = inner.symmetric
        self.parameter_symbol = inner.parameter_symbol
        self.candidates = inner.candidates
        self.min_accept = inner.min_accept

    @property
    def parameter(self) -> float:
        return self.inner.parameter

    @parameter.setter
    def parameter(self, value: float) -> None:
        self.inner.parameter = value

    def propose(self, rng: np.random.Generator, phi: np.ndarray) -> tuple[np.ndarray, float]:
        """Return ``φ'`` (``φ`` with ``φ[start:stop]`` moved) and ``inner``'s log q-ratio."""
        moved, log_q_ratio = self.inner.propose(rng, phi[self.start : self.stop])
        phi_new = phi.copy()
        phi_new[self.start : self.stop] = moved
        return phi_new, log_q_ratio


def _centre(centre: np.ndarray | None, dim: int) -> np.ndarray:
    if centre is None:
        return np.zeros(dim)
    centre = np.asarray(centre, dtype=np.float64)
    if centre.shape != (dim,) or not np.all(np.isfinite(centre)):
        raise ValueError(f"the proposal centre must be a finite vector of length {dim}")
    return centre


def make_proposal(
    kind: str,
    dim: int,
    *,
    cov: np.ndarray | None = None,
    parameter: float | None = None,
    df: float | None = None,
    centre: np.ndarray | None = None,
):
    """Build the proposal named ``kind`` (one of :data:`PROPOSALS`) in whitened coordinates.

    Parameters
    ----------
    kind : {"pcn", "independence", "random_walk"}
    dim : int
    cov : ndarray, optional
        Random walk only: a covariance in whitened coordinates (a user's ``proposal_cov``
        mapped into the frame), used with base scale 1; the identity with base ``1/√d`` if
        not given.
    parameter : float, optional
        Initial ``κ``, ``ρ`` or ``s`` (defaults 1.5, 0.5, 1.0).
    df : float, optional
        Independence proposal only: multivariate t degrees of freedom.
    centre : ndarray, optional
        pCN and independence: the centre ``μ`` of their Gaussian in whitened coordinates (the
        Laplace mode ``L⁻¹(θ* − θ̂)``); zero if not given. The random walk has no centre.
    """
    if kind not in PROPOSALS:
        raise ValueError(f"proposal must be one of {PROPOSALS}; got {kind!r}")
    if df is not None and kind != "independence":
        raise ValueError("df only applies to proposal='independence'")
    if cov is not None and kind != "random_walk":
        raise ValueError(
            "proposal_cov only applies to proposal='random_walk'; the pCN and independence "
            "proposals use the Laplace approximation"
        )
    if kind == "pcn":
        return PCNProposal(dim, 0.5 if parameter is None else parameter, centre)
    if kind == "independence":
        return IndependenceProposal(dim, 1.0 if parameter is None else parameter, df, centre)
    base = 1.0 if cov is not None else 1.0 / np.sqrt(dim)
    kappa = (1.0 if cov is not None else 1.5) if parameter is None else parameter
    return RandomWalkProposal(dim if cov is None else cov, kappa * base, base)

