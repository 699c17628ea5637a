"""Which MHSS bound a model gets: one with per-row rates, or Corollary 2's constants."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from pymc_subsample.bounds.levels import LevelBound, LevelRows
from pymc_subsample.bounds.remainder import remainder_scale
from pymc_subsample.bounds.shared_scale import SharedScaleBound, SharedScaleRows

__all__ = ["RateChoice", "choose_rate_bound"]

#: Pairs of points and seed with which a rate bound and Corollary 2's are compared.
RATE_CHOICE_PAIRS, RATE_CHOICE_SEED = 64, 20261125


class RateChoice(NamedTuple):
    """The bound kept: ``rate_bound`` (per-row rates), or Corollary 2's ``constants``; and the
    expected rows of each (``None`` when nothing was compared)."""

    rate_bound: LevelBound | SharedScaleBound | None
    constants: np.ndarray | None
    rate_bound_rows: float | None = None
    corollary2_rows: float | None = None


def choose_rate_bound(rows: LevelRows | SharedScaleRows, dim: int, order: int,
                      sharp: bool) -> RateChoice:
    """Keep a bound with per-row rates or Corollary 2's constants, whichever expects fewer
    rows.

    Both are valid. The level bound wins when many level coordinates make ``‖φ‖`` long
    (random intercepts), Corollary 2, with Lemma 1's angle factors (``sharp``), when the levels
    are few; the shared-scale bound replaces Cauchy–Schwarz on the scale's predictor by its
    exact displacement. The expected rows ``Λ`` of each are averaged over
    :data:`RATE_CHOICE_PAIRS` pairs of the Laplace approximation, a draw and a pCN move from
    it with ``ρ = 0.9`` (seeded: the choice is deterministic).
    """
    if isinstance(rows, SharedScaleRows) and rows.shared_row is None:
        return RateChoice(None, rows.plain)  # a scale that differs by row
    bound = (LevelBound(rows, dim) if isinstance(rows, LevelRows)
             else SharedScaleBound(rows, dim))
    plain_total = float(np.sum(rows.plain, dtype=np.float64))
    rng = np.random.default_rng(RATE_CHOICE_SEED)
    rate_rows = plain_rows = 0.0
    for _ in range(RATE_CHOICE_PAIRS):
        phi = rng.standard_normal(dim)
        phi_new = 0.9 * phi + math.sqrt(1.0 - 0.81) * rng.standard_normal(dim)
        rate_rows += bound.rates(phi, phi_new).expected
        plain_rows += plain_total * remainder_scale(phi, phi_new, np.zeros(dim), order,
                                                    sharp=sharp)
    rate_rows, plain_rows = rate_rows / RATE_CHOICE_PAIRS, plain_rows / RATE_CHOICE_PAIRS
    if rate_rows < plain_rows:
        return RateChoice(bound, None, rate_rows, plain_rows)
    return RateChoice(None, rows.plain, rate_rows, plain_rows)
