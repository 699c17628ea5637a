"""The gradient estimates of the Langevin proposal of ``AusterityMH``, from the model.

Each is a *draw*: ``draw(rng)`` returns a gradient function ``θ ↦ ĝ(θ)`` fixed for one
proposal (the minibatch one draws its rows there; the same function serves ``θ`` and ``θ'``,
so each minibatch's kernel has a computable MH correction).
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import grad

from pymc_subsample.errors import positive_int
from pymc_subsample.kernels.indexing import WithoutReplacementSampler
from pymc_subsample.model.frame import LaplaceFrame
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.proposals.proposal import LangevinProposal, RandomWalkProposal

__all__ = [
    "check_langevin_options",
    "langevin_proposal",
    "minibatch_gradient",
    "surrogate_gradient",
]

#: AusterityMH's proposals, and the Langevin gradient estimates.
PROPOSALS = ("random_walk", "langevin", "pcn", "independence")
GRADIENTS = ("minibatch", "surrogate")

GradientDraw = Callable[[np.random.Generator], Callable[[np.ndarray], np.ndarray]]


def check_langevin_options(proposal, langevin_gradient, gradient_batch_size, batch_size,
                           cv_order) -> tuple[str | None, int | None]:
    """AusterityMH's ``proposal`` and Langevin knobs, checked before the model setup; returns
    ``(langevin_gradient, gradient_batch_size)`` with their defaults: ``"surrogate"`` with
    control variates and no ``gradient_batch_size``, else ``"minibatch"`` (on ``batch_size``
    rows unless ``gradient_batch_size`` says)."""
    if proposal not in PROPOSALS:
        raise ValueError(f"proposal must be one of {PROPOSALS}; got {proposal!r}")
    if proposal != "langevin":
        if langevin_gradient is not None or gradient_batch_size is not None:
            raise ValueError(
                "langevin_gradient and gradient_batch_size only apply to proposal='langevin'"
            )
        return None, None
    if langevin_gradient is None:  # a minibatch size asks for the minibatch gradient
        langevin_gradient = (
            "minibatch" if cv_order is None or gradient_batch_size is not None else "surrogate"
        )
    if langevin_gradient not in GRADIENTS:
        raise ValueError(
            f"langevin_gradient must be one of {GRADIENTS} or None; got {langevin_gradient!r}"
        )
    if langevin_gradient == "minibatch":
        if gradient_batch_size is None:
            gradient_batch_size = batch_size
        positive_int("gradient_batch_size", gradient_batch_size, "rows of the SGLD minibatch")
    return langevin_gradient, gradient_batch_size


def minibatch_gradient(lik: SubsampledLikelihood, m: int) -> GradientDraw:
    """SGLD estimate ``∇ log p0(θ) + (N/m) Σ_{i∈B} ∇ℓ_i(θ)`` on one minibatch ``B`` of
    ``m ∈ [1, N]`` rows."""
    m = operator.index(m)
    if m > lik.n_rows:
        raise ValueError(f"gradient_batch_size must be in [1, N] = [1, {lik.n_rows}]; got {m}")
    n_over_m = pt.cast(lik.n_rows, "float64") / pt.cast(lik.idx.shape[0], "float64")
    estimate = grad(lik.logp0_graph, lik.theta) + n_over_m * grad(lik.terms.sum(), lik.theta)
    fn = lik.compile([lik.theta, lik.idx], estimate)
    n_rows = lik.n_rows

    def draw(rng: np.random.Generator):
        batch = WithoutReplacementSampler(n_rows, rng).next(m)
        return lambda theta: fn(theta, batch)

    return draw


def surrogate_gradient(lik: SubsampledLikelihood, g_sum: np.ndarray, h_sum: np.ndarray,
                       theta_hat: np.ndarray) -> GradientDraw:
    """Gradient of the order-2 Taylor surrogate ``∇ log p0(θ) + G + H(θ − θ̂)``."""
    grad_p0 = lik.compile([lik.theta], grad(lik.logp0_graph, lik.theta))

    def gradient(theta: np.ndarray) -> np.ndarray:
        return grad_p0(theta) + g_sum + h_sum @ (theta - theta_hat)

    return lambda rng: gradient


def langevin_proposal(walk: RandomWalkProposal, frame: LaplaceFrame,
                      draw: GradientDraw) -> LangevinProposal:
    """The Langevin proposal with the random walk's covariance and scale, its gradients in
    ``θ`` turned into gradients in the whitened ``φ`` the proposal moves."""

    def draw_phi(rng: np.random.Generator):
        grad_theta = draw(rng)
        return lambda phi: frame.whiten_gradient(grad_theta(frame.unwhiten(phi)))

    cov = np.eye(walk.dim) if walk.chol is None else walk.chol @ walk.chol.T
    return LangevinProposal(cov, walk.scale, draw_phi, base=walk.base)
