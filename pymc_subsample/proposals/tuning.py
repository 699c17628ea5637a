"""Tuning a proposal in PyMC's tuning phase: jump distance per cost, or an acceptance rate."""

from __future__ import annotations

import numpy as np

__all__ = ["ESJDTuner", "ScaleAdapter"]


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


class ESJDTuner:
    """Choose a proposal's parameter by expected squared jump distance per unit of cost.

    During PyMC's tuning phase the step cycles through :attr:`candidates` (one per
    iteration, in turn) and records, per candidate, the squared jump ``‖φ' − φ‖²`` of accepted
    moves in the whitened metric and the cost ``1 + rows / row_cost``: one unit of fixed
    per-iteration overhead plus the rows read, ``row_cost`` rows costing as much as that
    overhead. When tuning stops the candidate with the largest ``Σ jump² / Σ cost`` is frozen
    (adapting after tuning would break exactness). Cycling keeps every iteration a valid MH
    move of one fixed kernel; the tuning draws are discarded anyway. The cost is counted, not
    timed, so the same seed gives the same choice on any machine.

    A proposal may also set a floor on the acceptance rate, ``min_accept``: candidates accepted
    less often during tuning are not chosen (if none reaches it, the one accepted most often
    is). pCN sets one (:attr:`pymc_subsample.proposals.proposal.PCNProposal.min_accept`): at
    small ``ρ`` it is close to the independence sampler, which is uniformly ergodic only when the
    posterior's tails are no heavier than its Laplace approximation's. Where they are heavier
    (a small data set, a scale with a flat prior) the chain sticks for long stretches in the
    tails, which the jump distance of a short tuning run does not see, and finite runs come out
    too narrow; a low acceptance rate is the symptom that tuning does see
    (``docs/methods/proposals.md``).

    Parameters
    ----------
    candidates : sequence of float
        Values of the proposal's parameter to try.
    row_cost : float
        Rows per unit of fixed per-iteration cost.
    min_accept : float, optional
        Lowest tuning acceptance rate of a candidate that may be chosen.
    """

    def __init__(self, candidates, row_cost: float = 50.0,
                 min_accept: float | None = None) -> None:
        self.candidates = np.asarray(candidates, dtype=np.float64)
        if self.candidates.ndim != 1 or self.candidates.size == 0:
            raise ValueError("candidates must be a non-empty sequence")
        self.row_cost = float(row_cost)
        self.min_accept = min_accept
        self.reset()

    def reset(self) -> None:
        """Forget what was measured (a new chain)."""
        self.iteration = 0
        self.jumps = np.zeros(self.candidates.size)
        self.costs = np.zeros(self.candidates.size)
        self.accepts = np.zeros(self.candidates.size)

    def current(self) -> float:
        """The candidate to use at this tuning iteration."""
        return float(self.candidates[self.iteration % self.candidates.size])

    def record(self, jump_sq: float, rows: float, accepted: bool) -> None:
        """Record the iteration just made with :meth:`current` (``jump_sq`` 0 if rejected)."""
        k = self.iteration % self.candidates.size
        if np.isfinite(jump_sq):
            self.jumps[k] += jump_sq
        self.costs[k] += 1.0 + rows / self.row_cost
        self.accepts[k] += float(accepted)
        self.iteration += 1

    def acceptance(self) -> np.ndarray:
        """Acceptance rate per candidate (NaN where untried)."""
        n = self.candidates.size
        tries = self.iteration // n + (np.arange(n) < self.iteration % n)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(tries > 0, self.accepts / tries, np.nan)

    def efficiency(self) -> np.ndarray:
        """``Σ jump² / Σ cost`` per candidate (NaN where untried)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.costs > 0, self.jumps / self.costs, np.nan)

    def best(self, default: float) -> float:
        """The candidate with the best efficiency, or ``default`` if nothing was recorded.

        Every candidate must have been tried at least a few times; otherwise ``default``.
        Candidates below ``min_accept`` are left out (all but the most accepted one if none
        reaches it).
        """
        if self.iteration < 3 * self.candidates.size:
            return float(default)
        efficiency = self.efficiency()
        if self.min_accept is not None:
            rate = self.acceptance()
            eligible = rate >= self.min_accept
            if not eligible.any():
                eligible = rate == np.nanmax(rate)
            efficiency = np.where(eligible, efficiency, np.nan)
        return float(self.candidates[int(np.nanargmax(efficiency))])
