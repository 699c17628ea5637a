"""Drawing row indices: weighted draws for MHSS, growing uniform samples without replacement.

Both samplers are pure NumPy and know nothing about PyMC. Their per-call cost depends on how
many indices are asked for, not on the number of rows ``N``: the weighted sampler serves a
pre-drawn stream (its ``log N`` binary search runs vectorised, once per block), and
:class:`WithoutReplacementSampler` has one documented O(N) fallback once more than half the
data has been taken.
"""

from __future__ import annotations

import numpy as np

__all__ = ["WeightedIndexSampler", "WithoutReplacementSampler"]


class WeightedIndexSampler:
    """Draw row indices with probability proportional to fixed non-negative weights.

    MHSS needs i.i.d. indices with probability ``c_i / C`` for the proposals of Poisson
    thinning (Prado, Nemeth & Sherlock 2024, Sec. 2, step 2), a distribution that never
    changes. The cumulative table is built once (O(N)); indices come from a pre-drawn stream
    refilled in blocks of ``block_size`` by one vectorised binary search, so an iteration that
    asks for a few indices costs a slice of the buffer. The stream is tied to the generator
    object it was drawn from: a new generator (PyMC gives each chain its own) starts a new
    stream, so results do not depend on how chains are spread over processes.

    Parameters
    ----------
    weights : array_like, shape (N,)
        Non-negative finite weights (the MHSS bound constants ``c_i``).
    block_size : int
        Indices drawn per refill.
    """

    def __init__(self, weights: np.ndarray, block_size: int = 4096) -> None:
        weights = np.asarray(weights, dtype=np.float64)
        if weights.ndim != 1 or weights.size == 0:
            raise ValueError("weights must be a non-empty 1-d array")
        if not np.all(np.isfinite(weights)) or np.any(weights < 0):
            raise ValueError("weights must be finite and non-negative")
        self._cdf = np.cumsum(weights)
        self.total = float(self._cdf[-1])
        self.block_size = int(block_size)
        self._rng: np.random.Generator | None = None
        self._stream = np.empty(0, dtype=np.int64)
        self._pos = 0

    def _search(self, u: np.ndarray) -> np.ndarray:
        # side="right" never lands on a zero-weight row: its cdf entry equals its predecessor's.
        idx = np.searchsorted(self._cdf, u * self.total, side="right")
        return np.minimum(idx, self._cdf.size - 1).astype(np.int64, copy=False)

    def draw(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Return ``size`` indices drawn i.i.d. with probability ``weights / total``."""
        if size == 0 or self.total == 0.0:
            return np.empty(0, dtype=np.int64)
        if rng is not self._rng:
            self._rng, self._stream, self._pos = rng, np.empty(0, dtype=np.int64), 0
        if self._pos + size > self._stream.size:
            fresh = self._search(rng.random(max(self.block_size, size)))
            self._stream = np.concatenate([self._stream[self._pos :], fresh])
            self._pos = 0
        out = self._stream[self._pos : self._pos + size]
        self._pos += size
        return out


class WithoutReplacementSampler:
    """A uniform random sample of ``range(n_total)`` grown batch by batch without replacement.

    One instance serves one acceptance test (AusterityMH and BarkerMinibatch read more rows
    until their test is decided). While at most half the rows are taken, each batch costs
    O(batch) by rejecting repeats of uniform draws, which keeps the exact law of
    sequential sampling without replacement. Beyond half the rows the remainder is permuted
    once, an O(N) fallback that only happens when the test reads most of the data anyway.

    Parameters
    ----------
    n_total : int
        Number of rows ``N``.
    rng : numpy.random.Generator
        Source of randomness.
    """

    def __init__(self, n_total: int, rng: np.random.Generator) -> None:
        self.n_total = int(n_total)
        self.rng = rng
        self._taken: list[np.ndarray] = []  # batches drawn before the fallback
        self._seen: set[int] = set()  # the same rows, for O(1) membership tests
        self.n_taken = 0
        self._remainder: np.ndarray | None = None  # permuted untaken rows, after the fallback
        self._fallback_start = 0
        self.used_fallback = False

    def next(self, size: int) -> np.ndarray:
        """Return up to ``size`` new indices (fewer only when the data are exhausted)."""
        size = min(int(size), self.n_total - self.n_taken)
        if size <= 0:
            return np.empty(0, dtype=np.int64)
        if self._remainder is None and 2 * (self.n_taken + size) > self.n_total:
            mask = np.ones(self.n_total, dtype=bool)
            for batch in self._taken:
                mask[batch] = False
            self._remainder = self.rng.permutation(np.flatnonzero(mask))
            self._fallback_start = self.n_taken
            self.used_fallback = True
        if self._remainder is not None:
            offset = self.n_taken - self._fallback_start
            batch = self._remainder[offset : offset + size]
        else:
            batch = self._draw_fresh(size)
            self._taken.append(batch)
        self.n_taken += batch.size
        return batch

    def _draw_fresh(self, size: int) -> np.ndarray:
        # Keep each candidate not yet taken, in draw order: sequential sampling without
        # replacement. A set keeps the cost per batch independent of how many rows are taken.
        seen = self._seen
        out: list[int] = []
        while len(out) < size:
            cand = self.rng.integers(0, self.n_total, size=2 * (size - len(out)) + 8)
            for c in cand.tolist():
                if c not in seen:
                    seen.add(c)
                    out.append(c)
                    if len(out) == size:
                        break
        return np.array(out, dtype=np.int64)
