"""The tuning state of a subsampling step and its mirror in PyMC's sampling state.

PyMC snapshots a step between chains (and ships it to worker processes with ``cores > 1``)
through ``sampling_state``: a :class:`SubsamplingStepState` whose fields are read and written
as the step's attributes of the same names. The tuner's and adapter's counters live on those
objects; :class:`Mirror` exposes each as a step attribute.
"""

from __future__ import annotations

import numpy as np
from pymc.step_methods.compound import StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import RandomGeneratorState

__all__ = ["Mirror", "SubsamplingStepState", "TunedProposal"]


@dataclass_state
class SubsamplingStepState(StepMethodState):
    proposal_parameter: float
    tune: bool
    chain_started: bool
    tuner_iteration: int
    tuner_jumps: np.ndarray
    tuner_costs: np.ndarray
    tuner_accepts: np.ndarray
    adapter_iteration: int
    rng_proposal: RandomGeneratorState
    rng_index: RandomGeneratorState
    rng_accept: RandomGeneratorState


class Mirror:
    """An attribute of an object the step holds (its tuner, adapter, proposal), read and written
    as the step's own: PyMC's sampling state (``SubsamplingStepState``) snapshots and restores
    the step's attributes by the state's field names."""

    def __init__(self, holder: str, attr: str, cast=lambda value: value, default=None) -> None:
        self.holder, self.attr, self.cast, self.default = holder, attr, cast, default

    def __get__(self, step, owner=None):
        if step is None:
            return self
        held = getattr(step, self.holder)
        return self.default if held is None else getattr(held, self.attr)

    def __set__(self, step, value) -> None:
        held = getattr(step, self.holder)
        if held is not None:
            setattr(held, self.attr, self.cast(value))


def _floats(value) -> np.ndarray:
    return np.array(value, dtype=np.float64)


class TunedProposal:
    """The proposal's parameter and its tuning: ESJD per cost (:attr:`_tuner`) or, for the
    random walk with a target acceptance rate, Robbins–Monro (:attr:`_adapter`)."""

    #: the proposal's tuned parameter: ``κ`` (random walk), ``ρ`` (pCN) or ``s``
    proposal_parameter = Mirror("proposal", "parameter")
    # tuner and adapter state, mirrored into the sampling state
    tuner_iteration = Mirror("_tuner", "iteration", int)
    tuner_jumps = Mirror("_tuner", "jumps", _floats)
    tuner_costs = Mirror("_tuner", "costs", _floats)
    tuner_accepts = Mirror("_tuner", "accepts", _floats)
    adapter_iteration = Mirror("_adapter", "iteration", int, default=0)

    @property
    def scale(self) -> float:
        return self.proposal.scale

    @property
    def kappa(self) -> float:
        """The proposal's parameter, whichever the proposal: ``κ`` for the random walk, ``ρ``
        for pCN, ``s`` for the independence proposal (the same as :attr:`proposal_parameter`)."""
        return self.proposal.parameter

    def reset_tuning(self) -> None:
        """Restore the untuned parameter (PyMC calls this before each chain)."""
        self.proposal.parameter = self._initial_parameter
        self._tuner.reset()
        if self._adapter is not None:
            self._adapter.reset()

    def stop_tuning(self) -> None:
        """End of PyMC's tuning phase: freeze the proposal's parameter."""
        if self.tune and self._adapt and self._adapter is None:
            self.proposal.parameter = self._tuner.best(default=self._initial_parameter)
        self.tune = False

