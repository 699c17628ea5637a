"""Index samplers: weighted i.i.d. draws (MHSS) and growing samples without replacement."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from pymc_subsample.kernels.indexing import (
    WeightedIndexSampler,
    WithoutReplacementSampler,
    round_up_float32,
)

# With a fixed seed these chi-square checks are deterministic; the threshold only says how far
# a correct sampler's counts may stray, so a biased sampler fails them.
P_MIN = 1e-3


class TestWeightedIndexSampler:
    def test_frequencies_match_weights(self):
        weights = np.array([0.0, 1.0, 2.0, 0.0, 3.0, 0.5, 0.0, 7.5, 0.0])
        sampler = WeightedIndexSampler(weights)
        assert sampler.total == pytest.approx(weights.sum())
        n_draws = 200_000
        idx = sampler.draw(np.random.default_rng(0), n_draws)
        assert idx.dtype == np.int64
        assert idx.shape == (n_draws,)
        counts = np.bincount(idx, minlength=weights.size)
        assert counts.size == weights.size  # no index out of range
        positive = weights > 0
        expected = n_draws * weights[positive] / weights.sum()
        assert stats.chisquare(counts[positive], expected).pvalue > P_MIN
        # and each count within 5 binomial standard deviations
        p = weights[positive] / weights.sum()
        sd = np.sqrt(n_draws * p * (1 - p))
        assert np.all(np.abs(counts[positive] - expected) < 5 * sd)

    def test_frequencies_across_many_blocks(self):
        # zero blocks, zero rows at block edges, a last partial block (rows_per_block=8)
        rng = np.random.default_rng(7)
        weights = rng.exponential(size=203) * (rng.random(203) < 0.6)
        weights[16:32] = 0.0
        weights[[7, 8, 199, 202]] = 0.0
        sampler = WeightedIndexSampler(weights, rows_per_block=8)
        n_draws = 400_000
        counts = np.bincount(sampler.draw(np.random.default_rng(8), n_draws), minlength=203)
        assert counts.size == 203 and np.all(counts[weights == 0] == 0)
        p = sampler.weights / sampler.weights.sum(dtype=np.float64)
        sd = np.sqrt(n_draws * p * (1 - p))
        assert np.all(np.abs(counts - n_draws * p) < 5 * sd + 1e-12)

    def test_weights_are_float32_bounds(self):
        values = np.random.default_rng(9).exponential(size=10_000) * 1e-3
        stored = round_up_float32(values)
        assert stored.dtype == np.float32 and np.all(stored.astype(np.float64) >= values)
        assert np.all(stored.astype(np.float64) <= values * (1 + 2.0**-22))
        sampler = WeightedIndexSampler(stored)
        assert sampler.weights is stored  # float32 weights are not copied
        assert sampler.total == pytest.approx(values.sum(), rel=1e-6)

    def test_zero_weight_rows_never_drawn(self):
        # zero weights at the start, in the middle and at the end, next to tiny ones
        weights = np.array([0.0, 0.0, 1e-3, 0.0, 1.0, 0.0, 0.0, 1e-3, 0.0, 0.0])
        sampler = WeightedIndexSampler(weights)
        idx = sampler.draw(np.random.default_rng(1), 300_000)
        drawn = np.unique(idx)
        assert set(drawn.tolist()) == {2, 4, 7}

    def test_zero_weight_rows_never_drawn_at_the_edges_of_u(self):
        # u = 0 (probability 2**-53 per draw) and u on a cdf step must not pick a zero row
        class StubRNG:
            def __init__(self, values):
                self.values = np.asarray(values, dtype=float)

            def random(self, size):
                return self.values[:size]

        weights = np.array([0.0, 0.0, 1.0, 0.0, 1.0, 0.0])
        sampler = WeightedIndexSampler(weights)
        idx = sampler.draw(StubRNG([0.0, 0.5, np.nextafter(1.0, 0.0)]), 3)
        assert idx.tolist() == [2, 4, 4]

    def test_single_positive_weight(self):
        weights = np.zeros(50)
        weights[17] = 2.0
        idx = WeightedIndexSampler(weights).draw(np.random.default_rng(2), 1000)
        assert np.all(idx == 17)

    def test_draw_zero(self):
        idx = WeightedIndexSampler(np.ones(5)).draw(np.random.default_rng(3), 0)
        assert idx.shape == (0,)
        assert idx.dtype == np.int64

    def test_reproducible(self):
        sampler = WeightedIndexSampler(np.arange(1.0, 11.0))
        a = sampler.draw(np.random.default_rng(4), 100)
        b = sampler.draw(np.random.default_rng(4), 100)
        np.testing.assert_array_equal(a, b)

    @pytest.mark.parametrize(
        "weights",
        [
            [],
            [[1.0, 2.0], [3.0, 4.0]],
            [1.0, -0.5, 2.0],
            [1.0, np.nan],
            [np.inf, 1.0],
        ],
        ids=["empty", "2d", "negative", "nan", "inf"],
    )
    def test_invalid_weights_raise(self, weights):
        with pytest.raises(ValueError, match="weights"):
            WeightedIndexSampler(np.asarray(weights, dtype=float))


def _drain(sampler: WithoutReplacementSampler, size: int) -> list[np.ndarray]:
    batches = []
    while True:
        batch = sampler.next(size)
        if batch.size == 0:
            return batches
        batches.append(batch)


class TestWithoutReplacementSampler:
    @pytest.mark.parametrize(
        ("n_total", "size"),
        [(1, 1), (2, 1), (10, 3), (101, 7), (1000, 1000), (1000, 499), (5000, 64)],
    )
    def test_never_repeats_and_covers_all(self, n_total, size):
        sampler = WithoutReplacementSampler(n_total, np.random.default_rng(n_total + size))
        batches = _drain(sampler, size)
        everything = np.concatenate(batches)
        assert everything.dtype == np.int64
        assert everything.size == n_total  # no repeats and nothing missing ...
        np.testing.assert_array_equal(np.sort(everything), np.arange(n_total))  # ... all N
        assert sampler.n_taken == n_total
        # all batches full except possibly the last, which returns what is left
        sizes = [b.size for b in batches]
        assert sizes[:-1] == [size] * (len(sizes) - 1)
        assert sizes[-1] == n_total - size * (len(sizes) - 1)
        assert sampler.next(size).size == 0  # exhausted

    def test_returns_fewer_at_the_end(self):
        sampler = WithoutReplacementSampler(10, np.random.default_rng(5))
        assert [sampler.next(4).size for _ in range(4)] == [4, 4, 2, 0]

    def test_zero_size(self):
        sampler = WithoutReplacementSampler(10, np.random.default_rng(6))
        assert sampler.next(0).size == 0
        assert sampler.n_taken == 0

    def test_reproducible(self):
        a = _drain(WithoutReplacementSampler(300, np.random.default_rng(7)), 40)
        b = _drain(WithoutReplacementSampler(300, np.random.default_rng(7)), 40)
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)

    def test_first_batch_inclusion_is_uniform(self):
        # each index is in the first batch with probability m / N
        n_total, size, n_seeds = 50, 10, 4000
        counts = np.zeros(n_total)
        for seed in range(n_seeds):
            sampler = WithoutReplacementSampler(n_total, np.random.default_rng(seed))
            counts[sampler.next(size)] += 1
            assert not sampler.used_fallback
        freq = counts / n_seeds
        p = size / n_total
        assert np.all(np.abs(freq - p) < 5 * math.sqrt(p * (1 - p) / n_seeds))
        assert stats.chisquare(counts).pvalue > P_MIN

    def test_fresh_draws_are_uniform_ordered_samples(self):
        # without the fallback, every ordered triple out of 6 rows is equally likely
        n_total, size, n_seeds = 6, 3, 12_000
        triples = {t: i for i, t in enumerate(itertools.permutations(range(n_total), size))}
        counts = np.zeros(len(triples))
        for seed in range(n_seeds):
            sampler = WithoutReplacementSampler(n_total, np.random.default_rng(seed))
            counts[triples[tuple(sampler.next(size).tolist())]] += 1
            assert not sampler.used_fallback
        assert stats.chisquare(counts).pvalue > P_MIN

    def test_fallback_is_flagged_only_past_half(self):
        sampler = WithoutReplacementSampler(1000, np.random.default_rng(8))
        for _ in range(5):
            sampler.next(100)
        assert sampler.n_taken == 500
        assert not sampler.used_fallback  # exactly half taken by rejection draws
        sampler.next(100)
        assert sampler.used_fallback
        rest = _drain(sampler, 100)
        assert sum(b.size for b in rest) == 400

    def test_fallback_keeps_the_sample_uniform(self):
        # one fresh batch of 2, then a batch of 2 through the fallback: the 4-subset of 6
        # rows is uniform over all 15 subsets, and each row is in it with probability 2/3
        n_total, n_seeds = 6, 9000
        subsets = {s: i for i, s in enumerate(itertools.combinations(range(n_total), 4))}
        counts = np.zeros(len(subsets))
        inclusion = np.zeros(n_total)
        second_batch = np.zeros(n_total)
        for seed in range(n_seeds):
            sampler = WithoutReplacementSampler(n_total, np.random.default_rng(seed))
            first = sampler.next(2)
            assert not sampler.used_fallback
            second = sampler.next(2)
            assert sampler.used_fallback
            assert np.intersect1d(first, second).size == 0
            both = np.concatenate([first, second])
            counts[subsets[tuple(sorted(both.tolist()))]] += 1
            inclusion[both] += 1
            second_batch[second] += 1
        assert stats.chisquare(counts).pvalue > P_MIN
        assert stats.chisquare(second_batch).pvalue > P_MIN
        freq = inclusion / n_seeds
        assert np.all(np.abs(freq - 2 / 3) < 5 * math.sqrt(2 / 9 / n_seeds))

    def test_large_population_small_batches_stay_cheap(self):
        # many batches from a large N before the fallback: every index distinct and in range
        n_total = 10**6
        sampler = WithoutReplacementSampler(n_total, np.random.default_rng(9))
        batches = [sampler.next(500) for _ in range(200)]
        everything = np.concatenate(batches)
        assert np.unique(everything).size == everything.size == 100_000
        assert everything.min() >= 0
        assert everything.max() < n_total
        assert not sampler.used_fallback


def test_weighted_stream_restarts_with_a_new_generator():
    """A new generator (a new chain) starts a new stream: earlier use leaves no trace."""
    weights = np.arange(1.0, 11.0)
    fresh = WeightedIndexSampler(weights).draw(np.random.default_rng(5), 7)
    used = WeightedIndexSampler(weights, block_size=16)
    used.draw(np.random.default_rng(99), 3)  # leaves part of a block in the buffer
    np.testing.assert_array_equal(used.draw(np.random.default_rng(5), 7), fresh)


def test_weighted_stream_spans_block_boundaries():
    rng = np.random.default_rng(3)
    sampler = WeightedIndexSampler(np.ones(50), block_size=8)
    draws = np.concatenate([sampler.draw(rng, k) for k in (5, 5, 20, 1, 9)])
    reference = WeightedIndexSampler(np.ones(50), block_size=8)
    assert draws.size == 40 and draws.min() >= 0 and draws.max() < 50
    # the stream is the generator's uniforms in order, whatever the block boundaries
    np.testing.assert_array_equal(draws, reference.draw(np.random.default_rng(3), 40))


def test_distinct_rows_are_a_uniform_subset_in_memory_of_the_subset():
    import tracemalloc

    from pymc_subsample.kernels.indexing import distinct_rows

    rng = np.random.default_rng(3)
    n, k, reps = 400, 20, 20_000
    counts = np.zeros(n)
    for _ in range(reps):
        rows = distinct_rows(rng, n, k)
        assert rows.dtype == np.int64 and rows.size == k
        assert np.all(np.diff(rows) > 0) and 0 <= rows[0] and rows[-1] < n
        counts[rows] += 1
    # every row is in the subset with probability k/n: binomial counts, |z| < 4.5 for all
    p = k / n
    z = (counts - reps * p) / np.sqrt(reps * p * (1 - p))
    assert np.max(np.abs(z)) < 4.5
    # and the pairs too (a k-subset, not k rows drawn independently): rows 0 and 1 together
    both = sum(np.isin([0, 1], distinct_rows(rng, n, k)).all() for _ in range(reps))
    expected = reps * k * (k - 1) / (n * (n - 1))
    assert abs(both - expected) < 4.5 * np.sqrt(expected)
    # memory O(k) for the reference fit's k = N/20: NumPy's choice would permute all N rows
    # (160 MB here; it permutes once k > N/50)
    tracemalloc.start()
    rows = distinct_rows(rng, 2 * 10**7, 10**6)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert np.unique(rows).size == 10**6 and peak < 100 * 10**6


def test_distinct_runs_are_whole_aligned_runs_each_row_equally_likely():
    from pymc_subsample.kernels.indexing import distinct_rows, distinct_runs

    rng = np.random.default_rng(4)
    n, k, run, reps = 1030, 200, 50, 20_000  # 21 runs, the last one 30 rows
    counts = np.zeros(n)
    for _ in range(reps):
        rows = distinct_runs(rng, n, k, run)
        assert rows.dtype == np.int64 and np.all(np.diff(rows) > 0)
        starts = np.unique(rows // run)
        # whole runs, ⌈k/run⌉ of them
        assert starts.size == 4 and rows.size == sum(min(run, n - s * run) for s in starts)
        counts[rows] += 1
    # each run (so each row) is chosen with probability 4/21: binomial counts per run
    p = 4 / 21
    per_run = counts[::run]
    z = (per_run - reps * p) / np.sqrt(reps * p * (1 - p))
    assert np.max(np.abs(z)) < 4.5
    # run 1 is plain uniform rows
    np.testing.assert_array_equal(distinct_runs(np.random.default_rng(1), n, 5, 1),
                                  distinct_rows(np.random.default_rng(1), n, 5))
