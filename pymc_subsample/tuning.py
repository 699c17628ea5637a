"""Adapting the random-walk scale toward a target acceptance rate during PyMC's tuning phase."""

from __future__ import annotations

import numpy as np

__all__ = ["ScaleAdapter"]


class ScaleAdapter:
    """Robbins–Monro adaptation of ``log s`` toward a target acceptance rate.

    ``log s ← log s + (a_t − target) / (t + t0)^γ`` after each iteration ``t`` with acceptance
    indicator ``a_t``; the step sizes sum to infinity and their squares do not, so the rate
    converges. MHSS targets about 0.45 (Prado, Nemeth & Sherlock 2024, Sec. 4.4: efficiency
    ∝ κ·α(κ) because cost grows with κ), the plain random walk 0.234.

    Parameters
    ----------
    target : float
        Target acceptance rate in (0, 1).
    t0 : float
        Offset that damps the first updates.
    gamma : float
        Decay exponent in (0.5, 1].
    """

    def __init__(self, target: float, t0: float = 10.0, gamma: float = 0.6) -> None:
        if not 0.0 < target < 1.0:
            raise ValueError(f"target acceptance must be in (0, 1); got {target}")
        self.target = float(target)
        self.t0 = float(t0)
        self.gamma = float(gamma)
        self.iteration = 0

    def update(self, scale: float, accepted: bool) -> float:
        """Return the adapted scale after one iteration."""
        self.iteration += 1
        step = (float(accepted) - self.target) / (self.iteration + self.t0) ** self.gamma
        return float(scale * np.exp(step))

    def reset(self) -> None:
        """Start adapting afresh (a new chain)."""
        self.iteration = 0
