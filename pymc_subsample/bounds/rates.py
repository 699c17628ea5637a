"""Per-row rates drawn from fixed weights and an envelope: the MHSS bounds whose ``M`` differs by
row (:mod:`~pymc_subsample.bounds.levels`, :mod:`~pymc_subsample.bounds.shared_scale`).

Such a bound gives each row a rate ``B_i(θ, θ') ≥ |ξ_i|``, symmetric in the pair, and fixed
weights ``c̄_i`` with ``B_i ≤ c̄_i M̄(θ, θ')`` for a per-move envelope ``M̄``. Poisson thinning
needs the rows of a Poisson process of rate ``B_i``: ``K ~ Poisson(C̄ M̄)`` rows drawn with
probability ``c̄_i / C̄`` (:class:`~pymc_subsample.kernels.indexing.WeightedIndexSampler`), each kept
with probability ``B_i / (c̄_i M̄)`` before any data are read, are one.
"""

from __future__ import annotations

import numpy as np

from pymc_subsample.kernels.indexing import WeightedIndexSampler

__all__ = ["EnvelopeRates"]


class EnvelopeRates:
    """The rates of one move as the MHSS kernel reads them
    (:class:`pymc_subsample.kernels.mhss.ThinningRates`): :attr:`envelope` index draws are expected,
    :attr:`expected` rows are kept; a subclass gives :meth:`row_rates`.

    Parameters
    ----------
    sampler : WeightedIndexSampler
        Over the fixed weights ``c̄_i``.
    envelope_factor : float
        ``M̄``, with ``B_i ≤ c̄_i M̄`` on every row.
    expected : float
        ``Λ = Σ_i B_i``.
    """

    def __init__(self, sampler: WeightedIndexSampler, envelope_factor: float,
                 expected: float) -> None:
        self.sampler = sampler
        self.envelope_factor = envelope_factor
        self.envelope = sampler.total * envelope_factor
        self.expected = expected

    def row_rates(self, idx: np.ndarray) -> np.ndarray:
        """``B_i ≥ |ξ_i(θ, θ')|`` of the rows ``idx``."""
        raise NotImplementedError

    def draw(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
        """``size`` draws with probability ``c̄_i / C̄``, kept with ``B_i / (c̄_i M̄)`` (no data
        read): the rows of a Poisson process of rate ``B_i``, and their rates."""
        idx = self.sampler.draw(rng, size)
        rates = self.row_rates(idx)
        ceiling = self.sampler.weights[idx] * self.envelope_factor
        keep = rng.random(idx.size) * ceiling < rates
        return idx[keep], rates[keep]
