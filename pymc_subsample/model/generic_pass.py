"""The pass over the data of any model, by autodiff: :class:`GenericPass`."""

from __future__ import annotations

import copy

import numpy as np
from pytensor.gradient import grad, jacobian

from pymc_subsample.model.data_pass import PassResult
from pymc_subsample.model.frame import hessian_by_differences
from pymc_subsample.model.likelihood import SubsampledLikelihood

__all__ = ["GenericPass"]


class GenericPass:
    """Passes over the data for any model: ``Σ ℓ_i``, ``Σ ∇ℓ_i`` and ``Σ ∇²ℓ_i`` at ``θ``.

    GLMs have a faster pass that also yields the MHSS constants,
    :class:`~pymc_subsample.model.glm_pass.GLMPass`; both are
    :class:`~pymc_subsample.model.data_pass.DataPass` es. This one has no family terms and
    computes no row constants.

    Parameters
    ----------
    lik : SubsampledLikelihood
    exact_hessian : bool
        ``True``: the Hessian is the vectorised Jacobian of the gradient (autodiff, no scan),
        exact to rounding, as the order-2 control variates need (their ``H`` must be the sum
        of the per-row Hessians their remainders use). ``False``: central differences of the
        autodiff gradient (:func:`hessian_by_differences`), far more accurate than the Laplace
        frame and Newton's method need. The gradient alone compiles several times
        faster than its Jacobian on a large graph (a mixture: about 25 s against 80 s of C
        compilation on a cold cache), at ``2d`` gradient evaluations per chunk.

    Attributes
    ----------
    n_passes : int
        Passes over all N rows made so far.
    """

    #: no family read off the graph: the control variates use autodiff
    terms = None
    levels = None
    #: no row constants here
    speculative_constants = True

    def __init__(self, lik: SubsampledLikelihood, *, exact_hessian: bool = True) -> None:
        self.lik = lik
        self.exact_hessian = exact_hessian
        total = lik.terms.sum()
        g = grad(total, lik.theta)
        outputs = [total, g, jacobian(g, lik.theta, vectorize=True)] if exact_hessian else [
            total, g]
        self._fn = lik.compile([lik.theta, lik.idx], outputs, setup=True)
        self.n_passes = 0

    def thread_copy(self) -> GenericPass:
        """:meth:`DataPass.thread_copy <pymc_subsample.model.data_pass.DataPass.thread_copy>`:
        the pass function copied (``Function.copy``: the compiled code shared, the storage its
        own)."""
        twin = copy.copy(self)
        twin._fn = self._fn.copy()
        return twin

    def block(self, chunk: np.ndarray, theta: np.ndarray):
        """``(Σ ℓ_i, Σ ∇ℓ_i, Σ ∇²ℓ_i)`` on the rows ``chunk``."""
        if self.exact_hessian:
            return self._fn(theta, chunk)
        value, g = self._fn(theta, chunk)
        return value, g, hessian_by_differences(lambda t: self._fn(t, chunk)[1], theta)

    def full(self, theta, *, idx_chunks=None, weight=1.0, whiten_rows=None, order=None,
             levels=0):
        """Sums at ``θ`` over all rows (or ``idx_chunks``, times ``weight``).

        ``whiten_rows``, ``order`` and ``levels`` belong to
        :class:`~pymc_subsample.model.data_pass.DataPass`; here the result has no row
        constants (they come from a bound, not from this pass).
        """
        lik = self.lik
        theta = np.asarray(theta, dtype=np.float64)
        full_data = idx_chunks is None
        s, gs, hs = 0.0, np.zeros(lik.dim), np.zeros((lik.dim, lik.dim))
        for _, (ci, gi, hi) in lik.map_row_blocks(self, theta, chunks=idx_chunks):
            s, gs, hs = s + float(ci), gs + gi, hs + hi
        if full_data:
            self.n_passes += 1
        return PassResult(s * weight, gs * weight, 0.5 * (hs + hs.T) * weight)

