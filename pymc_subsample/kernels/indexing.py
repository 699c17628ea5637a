"""Drawing row indices: weighted draws for MHSS, growing uniform samples without replacement.

Both samplers are pure NumPy and know nothing about PyMC. Their per-call cost depends on how
many indices are asked for, not on the number of rows ``N``: the weighted sampler serves a
pre-drawn stream (its ``log N`` binary search runs vectorised, once per block), and
:class:`WithoutReplacementSampler` has one documented O(N) fallback once more than half the
data has been taken.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "distinct_runs",
    "WeightedIndexSampler",
    "WithoutReplacementSampler",
    "distinct_rows",
    "round_up_float32",
]


#: Rows per chunk when a weight table is built (bounds the temporaries, whatever N).
_TABLE_CHUNK = 1 << 20


def distinct_rows(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """``k`` distinct rows of ``0..n-1``, a uniformly random subset, sorted (int64).

    Memory O(k): ``rng.choice(n, k, replace=False)`` permutes all ``n`` rows once ``k`` is
    more than ``n/50``, as the reference fit's ``N/20`` rows are (at N = 1e8 that added
    0.4 GiB to the setup's peak memory, more than the row constants hold). The distinct
    values of draws with replacement are, given their number, a uniform subset of that size,
    so a uniform ``k``-subset of them is a uniform ``k``-subset of all rows.
    """
    if k * 4 > n:  # small n in practice (k ≤ n/20 for large n): NumPy's own draw
        return np.sort(rng.choice(n, size=k, replace=False)).astype(np.int64)
    rows = _sorted_distinct(rng.integers(0, n, size=k + k // 8 + 16, dtype=np.int64))
    while rows.size < k:
        rows = _sorted_distinct(np.concatenate([rows, rng.integers(0, n, size=k,
                                                                   dtype=np.int64)]))
    return np.sort(rng.choice(rows, size=k, replace=False))


def _sorted_distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` by a sort and a comparison of neighbours: NumPy 2's ``unique``
    hashes first, about 15× slower on the reference fit's 2.8·10⁵ draws (0.1 s)."""
    values = np.sort(values)
    keep = np.empty(values.size, dtype=bool)
    keep[:1] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def distinct_runs(rng: np.random.Generator, n: int, k: int, run: int) -> np.ndarray:
    """About ``k`` rows of ``0..n-1`` as whole aligned runs of ``run`` consecutive rows,
    ``⌈k/run⌉`` runs chosen uniformly without replacement, sorted (int64).

    For sources read chunk by chunk (Zarr, Dask, a file on disk) a uniform row subset
    touches nearly every chunk; runs aligned with the chunks read ``k/run`` of them. Each row
    is still in the subset with probability ``≈ k/n`` (the last, shorter run aside), so
    sums over it, scaled by ``n / size``, stay unbiased.
    """
    if run <= 1:
        return distinct_rows(rng, n, k)
    n_runs = -(-n // run)
    starts = distinct_rows(rng, n_runs, min(n_runs, -(-k // run))) * run
    return np.concatenate([np.arange(a, min(a + run, n), dtype=np.int64) for a in starts])


def round_up_float32(values) -> np.ndarray:
    """``values`` as float32, each rounded up to the next float32 when the cast rounded down.

    MHSS row constants are upper bounds: stored in 4 bytes a row they stay bounds (a
    relative increase of at most 2⁻²³), and the sampler and the thinning read the same stored
    values, so the algorithm is exact for the stored ``c_i``. Values beyond float32's range
    become ``inf`` (refused by :class:`WeightedIndexSampler`).
    """
    values = np.asarray(values)
    if values.dtype == np.float32:
        return values
    out = values.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        low = out < values
    # in place where rounded down, no gather and scatter of those entries
    np.nextafter(out, np.float32(np.inf), out=out, where=low)
    return out


class WeightedIndexSampler:
    """Draw row indices with probability proportional to fixed non-negative weights.

    MHSS needs i.i.d. indices with probability ``c_i / C`` for the proposals of Poisson
    thinning (Prado, Nemeth & Sherlock 2024, Sec. 2, step 2), a distribution that never
    changes. The weights are held as float32 (:func:`round_up_float32`, 4 bytes a row;
    :attr:`weights` are the values to use as ``c_i``) with a two-level table: the cumulative
    sums of blocks of ``rows_per_block`` rows (N / 256 numbers), and within a drawn block the
    cumulative sum of its rows, computed for the draws that land there. Indices come from a
    pre-drawn stream refilled in blocks of ``block_size`` by one vectorised search, so an
    iteration that asks for a few indices costs a slice of the buffer. The stream is tied to
    the generator object it was drawn from: a new generator (PyMC gives each chain its own)
    starts a new stream, so results do not depend on how chains are spread over processes.

    Parameters
    ----------
    weights : array_like, shape (N,)
        Non-negative finite weights (the MHSS bound constants ``c_i``); float32 weights are
        used as they are (not copied).
    block_size : int
        Indices drawn per refill.
    rows_per_block : int
        Rows per block of the table.
    """

    def __init__(self, weights, block_size: int = 4096, rows_per_block: int = 256) -> None:
        weights = np.asarray(weights)
        if weights.ndim != 1 or weights.size == 0:
            raise ValueError("weights must be a non-empty 1-d array")
        self.weights = round_up_float32(weights)
        n, width = self.weights.size, int(rows_per_block)
        n_blocks = -(-n // width)
        block_sums = np.empty(n_blocks)
        self._last_positive = np.empty(n_blocks, dtype=np.int64)
        step = width * max(1, _TABLE_CHUNK // width)  # whole blocks per chunk
        for start in range(0, n, step):
            w = self.weights[start : start + step].astype(np.float64)
            if not np.all(np.isfinite(w)) or np.any(w < 0):
                raise ValueError("weights must be finite and non-negative")
            first = start // width
            padded = np.zeros(-(-w.size // width) * width)
            padded[: w.size] = w
            rows = padded.reshape(-1, width)
            block_sums[first : first + rows.shape[0]] = rows.sum(axis=1)
            # the last row of each block with a positive weight (a draw rounded past the
            # block's end lands there, never on a zero-weight row)
            positive = rows > 0
            last = width - 1 - np.argmax(positive[:, ::-1], axis=1)
            self._last_positive[first : first + rows.shape[0]] = np.where(
                positive.any(axis=1), first * width + np.arange(rows.shape[0]) * width + last,
                -1)
        self._block_cdf = np.cumsum(block_sums)
        self.total = float(self._block_cdf[-1])
        # where a draw rounded up to the total lands: the last block with a positive weight
        # (none when every weight is 0, and then nothing is drawn)
        positive_blocks = np.flatnonzero(self._last_positive >= 0)
        self._last_positive_block = int(positive_blocks[-1]) if positive_blocks.size else 0
        self._width = width
        self.block_size = int(block_size)
        self._rng: np.random.Generator | None = None
        self._stream = np.empty(0, dtype=np.int64)
        self._pos = 0

    def _search(self, u: np.ndarray) -> np.ndarray:
        target = u * self.total
        # side="right" never lands on a zero-weight block or row: its cumulative sum equals
        # its predecessor's
        block = np.searchsorted(self._block_cdf, target, side="right")
        block = np.minimum(block, self._block_cdf.size - 1)
        block = np.where(self._last_positive[block] < 0,  # target rounded to the total
                         self._last_positive_block, block)
        before = np.where(block > 0, self._block_cdf[np.maximum(block - 1, 0)], 0.0)
        rows = block[:, None] * self._width + np.arange(self._width)
        w = self.weights[np.minimum(rows, self.weights.size - 1)].astype(np.float64)
        w[rows >= self.weights.size] = 0.0
        within = np.sum(np.cumsum(w, axis=1) <= (target - before)[:, None], axis=1)
        idx = block * self._width + within
        return np.minimum(idx, self._last_positive[block]).astype(np.int64, copy=False)

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

    def next_values(self, size: int, row_diffs) -> tuple[np.ndarray, np.ndarray]:
        """The next batch of up to ``size`` rows and ``row_diffs`` on them (float64), checked to
        give one value per row: the read both sequential tests repeat."""
        idx = self.next(size)
        values = np.asarray(row_diffs(idx), dtype=np.float64)
        if values.shape != idx.shape:
            raise ValueError(
                f"row_diffs returned shape {values.shape} for {idx.size} indices; "
                f"expected {idx.shape}"
            )
        return idx, values

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
