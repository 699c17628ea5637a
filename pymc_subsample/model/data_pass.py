"""What a pass over the data provides: the :class:`DataPass` interface and its
:class:`PassResult`.

Three passes implement it (:mod:`pymc_subsample.model.passes` lists them); the reference fit,
the steps' setup and :func:`~pymc_subsample.model.cluster.map_row_blocks` read nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from pymc_subsample.bounds import LevelRows, SharedScaleRows
from pymc_subsample.model.glm import GLMTerm
from pymc_subsample.model.levels import LevelHessian, LevelLayout
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.model.location_scale import LocationScaleTerm

__all__ = ["DataPass", "PassResult"]


class DataPass(Protocol):
    """What a pass over the data provides
    (:class:`~pymc_subsample.model.glm_pass.GLMPass`,
    :class:`~pymc_subsample.model.location_scale_pass.LocationScalePass`,
    :class:`~pymc_subsample.model.generic_pass.GenericPass`); the reference fit and the steps'
    setup read nothing else."""

    #: the likelihood whose rows the pass reads
    lik: SubsampledLikelihood
    #: the families read off the observed variables (the control variates then use their
    #: closed forms), or ``None`` for a pass by autodiff
    terms: list[GLMTerm] | list[LocationScaleTerm] | None
    #: passes over all N rows made so far (subsample passes do not count)
    n_passes: int
    #: one grouping factor's levels when the pass splits rows by them (its Hessian sums are
    #: then a :class:`~pymc_subsample.model.levels.LevelHessian`), else None
    levels: LevelLayout | None
    #: the row constants cost little beside the pass, so the reference fit asks for them on
    #: every pass that may be the last; ``False`` (an automatic bound's interval enclosures):
    #: only on a pass at a point already found to be the mode or one Newton step from within
    #: :data:`~pymc_subsample.model.reference.COSTLY_CONSTANTS_DISTANCE` of it, its first
    #: block computed before the others (it makes the cell grid they read)
    speculative_constants: bool

    def block(self, chunk: np.ndarray, theta: np.ndarray, *args) -> tuple:
        """The sums (and the pass's row constants, if any) on the rows ``chunk``: what
        :meth:`full` adds up, one block of rows at a time, locally or on a worker."""
        ...

    def thread_copy(self) -> DataPass:
        """A copy that reads the same rows with compiled functions of its own, for another
        thread of a full-data pass (:func:`~pymc_subsample.model.cluster.map_row_blocks`): a
        compiled PyTensor function keeps its inputs, intermediate results and outputs in
        storage of its own, so one function cannot run on two threads at once. Its
        :meth:`block` gives the same numbers as this pass's."""
        ...

    def full(self, theta: np.ndarray, *, idx_chunks: Iterable[np.ndarray] | None = None,
             weight: float = 1.0, whiten_rows: Callable | None = None, order: int | None = None,
             levels: int = 0) -> PassResult:
        """Sums at ``θ`` over all rows (or ``idx_chunks``, times ``weight``), with the row
        constants of Taylor order ``order`` where the pass computes them."""
        ...


@dataclass(frozen=True)
class PassResult:
    """What one pass over the data returns (everything divided by the temperature).

    Attributes
    ----------
    loglik : float
        ``Σ_i ℓ_i(θ)``.
    grad : ndarray, shape (d,)
        ``Σ_i ∇ℓ_i(θ) = Σ_i f'_i x_i``.
    hess : ndarray, shape (d, d), or LevelHessian
        ``Σ_i ∇²ℓ_i(θ) = Σ_i f''_i x_i x_iᵀ``; by per-level sums when the pass splits rows by
        a grouping factor's levels.
    row_constants : ndarray, shape (N,), LevelRows, SharedScaleRows or None
        MHSS constants ``c_i`` when asked for, or a rate bound's pieces (see
        :meth:`~pymc_subsample.model.glm_pass.GLMPass.full`).
    """

    loglik: float
    grad: np.ndarray
    hess: np.ndarray | LevelHessian
    row_constants: np.ndarray | LevelRows | SharedScaleRows | None = None

