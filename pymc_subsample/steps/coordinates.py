"""The three coordinates of a step's state, and the caches between them.

PyMC's raveled point ``q`` (the user's variables), ``θ`` in the sampled model (the same but for
non-centred effects, run as ``u = s·z`` in the centred twin, :mod:`pymc_subsample.model.centring`)
and ``φ = L⁻¹(θ − θ̂)`` in the Laplace frame, where the proposal moves.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Coordinates"]


class Coordinates:
    """Maps ``q ↔ θ ↔ φ`` for a step holding ``centring``, ``frame`` and ``likelihood``, with
    ``log p0`` and ``φ`` cached for the current state."""

    def _clear_caches(self) -> None:
        self._cached_theta: np.ndarray | None = None
        self._cached_phi: np.ndarray | None = None
        self._cached_logp0 = 0.0
        self._last_returned: tuple[np.ndarray, np.ndarray] | None = None

    def logp0(self, theta: np.ndarray) -> float:
        """``log p0(θ)``, cached for the current state so each iteration evaluates it once."""
        if self._cached_theta is not None and np.array_equal(theta, self._cached_theta):
            return self._cached_logp0
        value = self.likelihood.logp0(theta)
        self._cached_theta, self._cached_phi, self._cached_logp0 = theta.copy(), None, value
        return value

    def _phi(self, theta: np.ndarray) -> np.ndarray:
        if self._cached_phi is None or not np.array_equal(theta, self._cached_theta):
            self._cached_phi = self.frame.whiten(theta)
        return self._cached_phi

    def _sampled(self, q: np.ndarray) -> np.ndarray:
        """``θ`` in the sampled coordinates from PyMC's point ``q`` (the same but for
        non-centred effects); the state this step returned last maps back exactly."""
        if self.centring is None:
            return q
        if self._last_returned is not None and np.array_equal(q, self._last_returned[0]):
            return self._last_returned[1]
        return self.centring.to_twin(q)

    def _returned(self, theta: np.ndarray) -> np.ndarray:
        """PyMC's point for ``θ`` in the sampled coordinates."""
        if self.centring is None:
            return theta
        q = self.centring.to_user(theta)
        self._last_returned = (q, theta)
        return q
