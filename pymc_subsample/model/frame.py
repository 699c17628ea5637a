r"""The Laplace frame: the reference point, its covariance and whitened coordinates.

On tall data the posterior is close to its Laplace approximation ``N(θ̂, V)`` with
``V = P⁻¹`` and ``P = −∇² log π(θ̂)`` (priors and transform Jacobians included). Every part of
the steps speaks in the whitened coordinates

.. math::

    φ = L^{-1}(θ - \hat θ), \qquad L L^\top = V,

in which the Laplace approximation is ``N(0, I)``: the proposals (``docs/methods/proposals.md``),
their tuning metric and the MHSS bounds (``docs/methods/mhss.md``, "Whitened bounds"). The
change of variables is affine, so Taylor control variates around ``θ̂`` are the same
polynomials in ``φ`` around 0 and nothing in the model changes.

``L`` is taken as ``R^{-\top}`` with ``R Rᵀ = P`` the Cholesky factor of the precision, so
whitening is one matrix–vector product, ``φ = Rᵀ(θ − θ̂)``, and unwhitening another with
``L`` formed once; a row ``x_i`` of a linear predictor ``η_i = x_iᵀθ + o_i`` becomes
``x̃_i = Lᵀx_i = R^{-1}x_i`` with ``x_iᵀ(θ − θ̂) = x̃_iᵀφ``.

*Levels first.* Any square root of ``V`` whitens, and the Cholesky factor is taken in an order
that keeps whitened rows sparse: coordinates by their number of non-zero entries in ``P``
(fewest first). The coordinates of a grouping factor's levels (random intercepts ``u[g]``, a
one-hot block) are coupled to the dense block but not to each other, so they come first, the
leading block of the factor is diagonal, and ``x̃_i`` of a row that touches one level is
non-zero on that level and the dense block only (``docs/methods/mhss.md``, "Rows that touch one
level"). Those leading coordinates of ``φ`` are the frame's :attr:`LaplaceFrame.n_levels`
levels. A dense ``P`` keeps the natural order (no levels).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from pymc_subsample.model.levels import LevelHessian, SplitRows

__all__ = [
    "LaplaceFrame",
    "LevelFrame",
    "NotPositiveDefiniteError",
    "hessian_by_differences",
    "laplace_frame",
    "level_order",
]

#: Fewest levels worth a reordering: below this the natural order is kept.
MIN_LEVELS = 2


def level_order(precision: np.ndarray) -> tuple[np.ndarray, int]:
    """The Cholesky order of the frame and its number of leading level coordinates.

    Coordinates sorted by their number of non-zero entries in ``P`` (stable, fewest first);
    the levels are the longest leading run of coordinates with no non-zero entry between any
    two of them and fewer non-zeros than a dense column. With fewer than :data:`MIN_LEVELS`
    such coordinates, the natural order and no levels. Exact zeros are what count: the GLM
    passes and the prior's Hessian give exact zeros for coordinates no row or prior term
    shares.
    """
    d = precision.shape[0]
    nonzero = precision != 0.0
    degree = nonzero.sum(axis=0)
    order = np.argsort(degree, kind="stable")
    levels: list[int] = []
    for j in order:
        if degree[j] >= d or np.any(nonzero[j, levels]):
            break
        levels.append(int(j))
    if len(levels) < MIN_LEVELS:
        return np.arange(d), 0
    return order, len(levels)


class NotPositiveDefiniteError(ValueError):
    """``−∇² log π`` is not positive definite at the reference point (no Laplace frame)."""


class LaplaceFrame:
    """Reference point ``θ̂`` and Laplace covariance ``V = P⁻¹``, with whitening maps.

    Parameters
    ----------
    theta_hat : ndarray, shape (d,)
        Reference point (the posterior mode, usually).
    precision : ndarray, shape (d, d)
        ``P = −∇² log π(θ̂)``, symmetric positive definite.

    Raises
    ------
    NotPositiveDefiniteError
        If ``precision`` is not positive definite; the message gives the smallest eigenvalue
        and what to do.
    """

    def __init__(self, theta_hat: np.ndarray, precision: np.ndarray) -> None:
        self.theta_hat = np.array(theta_hat, dtype=np.float64)
        precision = np.asarray(precision, dtype=np.float64)
        d = self.theta_hat.size
        if self.theta_hat.shape != (d,) or precision.shape != (d, d):
            raise ValueError(
                f"theta_hat must have shape (d,) and precision (d, d); got {self.theta_hat.shape} "
                f"and {precision.shape}"
            )
        self.precision = 0.5 * (precision + precision.T)
        #: the Cholesky order (levels first) and the number of leading level coordinates of φ
        self.order, self.n_levels = level_order(self.precision)
        try:
            chol = scipy.linalg.cholesky(self.precision[np.ix_(self.order, self.order)],
                                         lower=True)
        except (scipy.linalg.LinAlgError, ValueError):
            eig = np.linalg.eigvalsh(self.precision) if np.all(np.isfinite(precision)) else [np.nan]
            raise NotPositiveDefiniteError(
                "The negative Hessian of the log posterior at the reference point is not positive "
                f"definite (smallest eigenvalue {np.min(eig):.3g}), so there is no Laplace "
                "approximation there. Check that map_point is a mode, give every parameter a "
                "proper prior, or pass proposal_cov= explicitly."
            ) from None
        eig = np.linalg.eigvalsh(self.precision)
        if eig[0] <= 1e-12 * eig[-1]:
            raise NotPositiveDefiniteError(
                "The negative Hessian of the log posterior at the reference point is singular "
                f"(eigenvalues from {eig[0]:.3g} to {eig[-1]:.3g}): some direction of the "
                "parameters is not identified by the data and the priors (collinear or "
                "duplicated covariate columns, flat priors). Drop the redundant columns or give "
                "every parameter a proper prior."
            )
        self.dim = d
        #: ``log det P``, the normaliser of a Laplace marginal (model.marginal_mode)
        self.log_det = 2.0 * float(np.sum(np.log(np.diag(chol))))
        # R with R Rᵀ = P: the Cholesky factor of the reordered P, its rows put back in θ's
        # order (a square root of P, triangular only up to that order)
        self.chol_precision = np.empty_like(chol)
        self.chol_precision[self.order] = chol
        # L = R^{-⊤} as a dense matrix: the per-iteration maps are then plain products (O(d²)
        # without scipy's call overhead)
        self.chol_cov = np.empty_like(chol)
        self.chol_cov[self.order] = scipy.linalg.solve_triangular(chol, np.eye(d), lower=True,
                                                                  trans="T")

    @classmethod
    def from_covariance(cls, theta_hat: np.ndarray, cov: np.ndarray) -> LaplaceFrame:
        """A frame whose ``V`` is a given covariance (e.g. a user's ``proposal_cov``)."""
        cov = np.atleast_2d(np.asarray(cov, dtype=np.float64))
        try:
            inv = scipy.linalg.inv(0.5 * (cov + cov.T))
        except (scipy.linalg.LinAlgError, ValueError):
            raise NotPositiveDefiniteError("the covariance is singular") from None
        return cls(theta_hat, inv)

    @property
    def cov(self) -> np.ndarray:
        """``V = P⁻¹ = L Lᵀ``."""
        return self.chol_cov @ self.chol_cov.T

    def whiten(self, theta: np.ndarray) -> np.ndarray:
        """``φ = L⁻¹(θ − θ̂) = Rᵀ(θ − θ̂)``: O(d²)."""
        return self.chol_precision.T @ (theta - self.theta_hat)

    def unwhiten(self, phi: np.ndarray) -> np.ndarray:
        """``θ = θ̂ + Lφ``, ``L = R^{-⊤}``: O(d²)."""
        return self.theta_hat + self.chol_cov @ phi

    def whiten_gradient(self, grad_theta: np.ndarray) -> np.ndarray:
        """A gradient in ``θ`` as a gradient in ``φ``: ``Lᵀ∇_θ = R⁻¹∇_θ``."""
        return self.chol_cov.T @ grad_theta

    def whiten_rows(self, rows: np.ndarray) -> np.ndarray:
        """Rows ``x_i`` of a linear predictor as ``x̃_i = Lᵀx_i``; ``rows`` has shape (n, d)
        (:class:`SplitRows` are made dense first)."""
        if isinstance(rows, SplitRows):
            rows = rows.dense()
        return np.asarray(rows, dtype=np.float64) @ self.chol_cov

    def newton_step(self, grad_log_post: np.ndarray) -> np.ndarray:
        """``V ∇ log π = L Lᵀ∇ log π``: the Newton step (``P`` is the negative Hessian)."""
        return self.chol_cov @ (self.chol_cov.T @ grad_log_post)

    def newton_distance(self, grad_log_post: np.ndarray) -> float:
        """``‖Lᵀ∇ log π(θ̂)‖``: the Newton step to the mode in posterior standard deviations."""
        return float(np.linalg.norm(self.whiten_gradient(grad_log_post)))


def laplace_frame(theta_hat: np.ndarray, precision) -> LaplaceFrame:
    """The frame of a precision: a :class:`LevelFrame` for a :class:`LevelHessian` (one
    grouping factor's levels), a dense :class:`LaplaceFrame` otherwise."""
    if isinstance(precision, LevelHessian):
        return LevelFrame(theta_hat, precision)
    return LaplaceFrame(theta_hat, precision)


class LevelFrame(LaplaceFrame):
    r"""The Laplace frame of an arrow-structured precision (:class:`LevelHessian`): levels
    first, then the ``d_F`` fixed coordinates,

    .. math::

        P = \begin{pmatrix} D & C \\ C^\top & A \end{pmatrix} = R R^\top,\qquad
        R = \begin{pmatrix} D^{1/2} & 0 \\ W^\top & L_S \end{pmatrix},\quad
        W = D^{-1/2} C,\quad L_S L_S^\top = S = A - W^\top W,

    the Cholesky factor of the reordered ``P`` (the dense frame's, to rounding) through the
    Schur complement ``S`` of the diagonal level block. Stored: ``D^{1/2}`` (``G``), ``W``
    (``G × d_F``) and ``L_S`` (``d_F × d_F``): memory and every map O(G·d_F), no ``d × d``
    matrix. ``φ = Rᵀ(θ − θ̂)`` is ``(D^{1/2}δ_L + Wδ_F,\ L_Sᵀδ_F)``.
    """

    def __init__(self, theta_hat: np.ndarray, precision: LevelHessian,
                 fixed_order: np.ndarray | None = None) -> None:
        self.theta_hat = np.array(theta_hat, dtype=np.float64)
        lay = precision.layout
        d = self.theta_hat.size
        if d != lay.dim:
            raise ValueError(f"theta_hat has {d} coordinates, the precision {lay.dim}")
        self.precision, self.dim, self.layout = precision.symmetrised(), d, lay
        self.n_levels = lay.n_levels
        # the order of the fixed coordinates in L_S (a permutation of lay.fixed's positions):
        # any order whitens; one with some coordinates last lets a move hold them
        perm = np.arange(lay.fixed.size) if fixed_order is None else np.asarray(fixed_order)
        self._perm = perm
        self.order = np.concatenate([lay.levels, lay.fixed[perm]])
        self._fixed, self._levels = lay.fixed[perm], slice(lay.start, lay.stop)
        diag = self.precision.diag
        if not (precision.is_finite() and np.all(diag > 0.0)):
            raise self._not_positive_definite()
        self._sqrt_diag = np.sqrt(diag)
        self._w = self.precision.coupling[:, perm] / self._sqrt_diag[:, None]
        schur = self.precision.block[np.ix_(perm, perm)] - self._w.T @ self._w
        try:
            self._chol_schur = scipy.linalg.cholesky(schur, lower=True)
        except (scipy.linalg.LinAlgError, ValueError):
            raise self._not_positive_definite() from None
        # P is singular when a pivot (D, or S's eigenvalues) vanishes against the largest
        eig = np.linalg.eigvalsh(schur)
        small, large = min(diag.min(), eig[0]), max(diag.max(), eig[-1])
        if small <= 1e-12 * large:
            raise NotPositiveDefiniteError(
                "The negative Hessian of the log posterior at the reference point is singular "
                f"(pivots from {small:.3g} to {large:.3g}): some direction of the "
                "parameters is not identified by the data and the priors (collinear or "
                "duplicated covariate columns, flat priors). Drop the redundant columns or give "
                "every parameter a proper prior."
            )
        self.log_det = float(np.sum(np.log(diag))
                             + 2.0 * np.sum(np.log(np.diag(self._chol_schur))))
        # L_S^{-⊤}, d_F × d_F: unwhitening and whitened rows are then products
        self._inv_chol_t = scipy.linalg.solve_triangular(
            self._chol_schur, np.eye(schur.shape[0]), lower=True, trans="T")

    def _not_positive_definite(self) -> NotPositiveDefiniteError:
        return NotPositiveDefiniteError(
            "The negative Hessian of the log posterior at the reference point is not positive "
            "definite, so there is no Laplace approximation there. Check that map_point is a "
            "mode, give every parameter a proper prior, or pass proposal_cov= explicitly."
        )

    @property
    def chol_precision(self) -> np.ndarray:
        """``R`` as a dense matrix, rows in ``θ``'s order (a user's covariance only)."""
        d, g = self.dim, self.n_levels
        r = np.zeros((d, d))
        r[self._levels, :g] = np.diag(self._sqrt_diag)
        r[self._fixed, :g] = self._w.T
        r[np.ix_(self._fixed, np.arange(g, d))] = self._chol_schur
        return r

    @property
    def chol_cov(self) -> np.ndarray:
        """``L = R^{-⊤}`` as a dense matrix (tests, a user's covariance)."""
        return np.stack([self._unwhiten_step(e) for e in np.eye(self.dim)], axis=1)

    @property
    def cov(self) -> np.ndarray:
        chol = self.chol_cov
        return chol @ chol.T

    def whiten(self, theta: np.ndarray) -> np.ndarray:
        """``φ = Rᵀ(θ − θ̂)``: O(G·d_F)."""
        delta = np.asarray(theta, dtype=np.float64) - self.theta_hat
        fixed = delta[self._fixed]
        return np.concatenate([self._sqrt_diag * delta[self._levels] + self._w @ fixed,
                               self._chol_schur.T @ fixed])

    def _unwhiten_step(self, phi: np.ndarray) -> np.ndarray:
        """``R^{-⊤}φ``: ``δ_F = L_S^{-⊤}φ_F``, ``δ_L = D^{-1/2}(φ_L − Wδ_F)``."""
        g = self.n_levels
        out = np.empty(self.dim)
        fixed = self._inv_chol_t @ phi[g:]
        out[self._fixed] = fixed
        out[self._levels] = (phi[:g] - self._w @ fixed) / self._sqrt_diag
        return out

    def unwhiten(self, phi: np.ndarray) -> np.ndarray:
        """``θ = θ̂ + R^{-⊤}φ``: O(G·d_F)."""
        return self.theta_hat + self._unwhiten_step(np.asarray(phi, dtype=np.float64))

    def whiten_gradient(self, grad_theta: np.ndarray) -> np.ndarray:
        """``R⁻¹∇_θ``: ``z_L = D^{-1/2}∇_L``, ``z_F = L_S^{-1}(∇_F − Wᵀz_L)``."""
        grad_theta = np.asarray(grad_theta, dtype=np.float64)
        levels = grad_theta[self._levels] / self._sqrt_diag
        return np.concatenate([levels,
                               self._inv_chol_t.T @ (grad_theta[self._fixed] - self._w.T @ levels)])

    def whiten_rows(self, rows):
        """Rows as ``x̃_i = R⁻¹x_i`` in ``φ``'s order: a dense ``(n, d)`` array, or
        :class:`SplitRows` kept split (each row still on one level and the fixed block)."""
        if isinstance(rows, SplitRows):
            value = rows.value / self._sqrt_diag[rows.level]
            fixed = (rows.fixed_block()[:, self._perm] - value[:, None] * self._w[rows.level]
                     ) @ self._inv_chol_t
            return SplitRows(fixed, rows.level, value, rows.layout)
        rows = np.asarray(rows, dtype=np.float64)
        levels = rows[:, self._levels] / self._sqrt_diag
        fixed = (rows[:, self._fixed] - levels @ self._w) @ self._inv_chol_t
        return np.concatenate([levels, fixed], axis=1)

    def newton_step(self, grad_log_post: np.ndarray) -> np.ndarray:
        """``P⁻¹∇ log π = R^{-⊤}R⁻¹∇ log π``."""
        return self._unwhiten_step(self.whiten_gradient(grad_log_post))

    def with_last(self, coordinates: np.ndarray) -> LevelFrame:
        """The same ``V`` whitened with the fixed ``coordinates`` (indices into ``θ``) last in
        ``L_S``: ``φ_L`` is unchanged and ``φ_F`` turns by an orthogonal matrix (both factors
        are square roots of ``S``), so norms of whitened rows and of ``φ_F`` are unchanged, and
        the trailing ``φ_F`` depend on those coordinates only (a move of the leading ones holds
        them)."""
        fixed = self.layout.fixed
        last = np.isin(fixed, coordinates)
        order = np.concatenate([np.flatnonzero(~last), np.flatnonzero(last)])
        return LevelFrame(self.theta_hat, self.precision, fixed_order=order)

    def fixed_covariance(self) -> np.ndarray:
        """``V`` on the fixed coordinates (``S⁻¹``, rows and columns in ``layout.fixed``'s
        order): the Laplace marginal covariance of ``θ_F``, ``d_F × d_F``."""
        inner = self._inv_chol_t @ self._inv_chol_t.T  # S⁻¹ in L_S's order
        out = np.empty_like(inner)
        out[np.ix_(self._perm, self._perm)] = inner
        return out

    @property
    def level_scale(self) -> np.ndarray:
        """``D^{1/2}``: ``∂φ_k/∂u_k`` of each level (``φ_L = D^{1/2}δ_L + Wδ_F``)."""
        return self._sqrt_diag

    def level_conditional(self, theta: np.ndarray, centre: np.ndarray) -> np.ndarray:
        """The levels' mean given ``θ``'s fixed coordinates under the Gaussian ``N(μ, I)`` in
        ``φ`` (``μ = centre``): ``u_k = θ̂_k + (μ_k − (Wδ_F)_k)/D_k^{1/2}``, each with
        precision ``D_k``."""
        fixed = np.asarray(theta, dtype=np.float64)[self._fixed] - self.theta_hat[self._fixed]
        return self.theta_hat[self._levels] + (
            centre[: self.n_levels] - self._w @ fixed) / self._sqrt_diag


def hessian_by_differences(gradient, theta: np.ndarray) -> np.ndarray:
    """Symmetrised central differences of ``gradient``: column ``k`` is
    ``(∇(θ + h_k e_k) − ∇(θ − h_k e_k)) / 2h_k`` with ``h_k = ε^{1/3} max(1, |θ_k|)``.

    ``2d`` gradient calls; relative error about ``ε^{2/3}``, ample where a Hessian only shapes a
    Laplace frame or a Newton step.
    """
    theta = np.asarray(theta, dtype=np.float64)
    steps = np.cbrt(np.finfo(np.float64).eps) * np.maximum(1.0, np.abs(theta))
    h = np.empty((theta.size, theta.size))
    for k in range(theta.size):
        up, down = theta.copy(), theta.copy()
        up[k] += steps[k]
        down[k] -= steps[k]
        # far out (a scale near zero) gradients overflow: the caller reads the non-finite
        # Hessian as a failed step, without a warning to the user
        with np.errstate(invalid="ignore", over="ignore"):
            h[:, k] = (np.asarray(gradient(up)) - np.asarray(gradient(down))) / (up[k] - down[k])
    return 0.5 * (h + h.T)
