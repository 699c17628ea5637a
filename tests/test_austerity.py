"""AusterityMH kernel (Korattikara et al. 2014, Algorithm 1) on stubbed populations.

The populations stand in for ``l_i = ℓ_i(θ') − ℓ_i(θ)``; ``row_diffs`` is ``pop[idx]``, so the
exact MH decision is ``mean(pop) > μ0``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from pymc_subsample.kernels.austerity import (
    SequentialTestResult,
    austerity_mu0,
    sequential_mh_test,
    validate_austerity_knobs,
)

EPSILONS = (0.2, 0.1, 0.05, 0.01, 0.001)


class Recorder:
    """``row_diffs`` stub that remembers every index batch it was asked for."""

    def __init__(self, pop: np.ndarray) -> None:
        self.pop = pop
        self.calls: list[np.ndarray] = []

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        self.calls.append(idx.copy())
        return self.pop[idx]

    @property
    def rows(self) -> np.ndarray:
        return np.concatenate(self.calls)


def direct_p_value(sample: np.ndarray, n_total: int, mu0: float) -> float:
    """δ of Algorithm 1 from scratch, with the correction √(1 − (n − 1)/(N − 1))."""
    n = sample.size
    s = np.std(sample, ddof=1) / math.sqrt(n) * math.sqrt(1 - (n - 1) / (n_total - 1))
    t = (np.mean(sample) - mu0) / s
    return float(stats.t.sf(abs(t), df=n - 1))


def make_cases(n_cases: int, n_total: int, seed: int) -> list[tuple[np.ndarray, float]]:
    """Populations of several shapes with μ0 within ±3 full-data standard errors of μ."""
    rng = np.random.default_rng(seed)
    shapes = [
        lambda: rng.normal(0.3, 1.0, n_total),
        lambda: rng.standard_t(4, n_total),
        lambda: rng.exponential(1.0, n_total) - 1.0,
        lambda: rng.uniform(-2.0, 1.0, n_total),
        lambda: rng.lognormal(0.0, 0.8, n_total),
    ]
    cases = []
    for k in range(n_cases):
        pop = shapes[k % len(shapes)]() * rng.uniform(0.1, 10.0)
        mu0 = pop.mean() + rng.uniform(-3.0, 3.0) * pop.std() / math.sqrt(n_total)
        cases.append((pop, float(mu0)))
    return cases


# --------------------------------------------------------------------------- exactness, ε = 0


@pytest.mark.parametrize("batch_size", [1, 7, 50, 2000])
def test_epsilon_zero_is_exact_on_fixed_cases(batch_size):
    n_total = 2000
    for k, (pop, mu0) in enumerate(make_cases(25, n_total, seed=10)):
        rec = Recorder(pop)
        res = sequential_mh_test(
            rec, n_total, mu0, epsilon=0.0, batch_size=batch_size, rng=np.random.default_rng(k)
        )
        assert res.accepted == (pop.mean() > mu0)
        assert res.n_data == n_total
        assert res.exact
        assert res.p_value == 0.0
        assert res.n_batches == math.ceil(n_total / batch_size)
        np.testing.assert_array_equal(np.sort(rec.rows), np.arange(n_total))


@settings(max_examples=150, derandomize=True, deadline=None)
@given(
    values=st.lists(st.integers(-1000, 1000), min_size=1, max_size=200),
    side=st.sampled_from([-0.5, 0.5]),
    data=st.data(),
)
def test_epsilon_zero_is_exact_property(values, side, data):
    # integer populations have exact sums, so μ0 = (Σ l ± ½)/N is strictly on one side of μ
    pop = np.asarray(values, dtype=float)
    n_total = pop.size
    batch_size = data.draw(st.integers(1, n_total), label="batch_size")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    mu0 = (pop.sum() + side) / n_total
    res = sequential_mh_test(
        lambda idx: pop[idx],
        n_total,
        mu0,
        epsilon=0.0,
        batch_size=batch_size,
        rng=np.random.default_rng(seed),
    )
    assert res.accepted == (side < 0)
    assert res.n_data == n_total
    assert res.exact


@settings(max_examples=100, derandomize=True, deadline=None)
@given(
    n_total=st.integers(1, 300),
    epsilon=st.sampled_from([0.0, 0.01, 0.1, 0.3, 0.6]),
    data=st.data(),
)
def test_result_invariants(n_total, epsilon, data):
    batch_size = data.draw(st.integers(1, n_total), label="batch_size")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    pop = rng.normal(rng.normal(), rng.exponential(), n_total)
    mu0 = float(rng.normal())
    rec = Recorder(pop)
    res = sequential_mh_test(rec, n_total, mu0, epsilon=epsilon, batch_size=batch_size, rng=rng)
    assert isinstance(res, SequentialTestResult)
    rows = rec.rows
    assert np.unique(rows).size == rows.size == res.n_data  # no row read twice
    assert res.n_batches == len(rec.calls)
    assert 1 <= res.n_data <= n_total
    assert res.exact == (res.n_data == n_total)
    if res.exact:
        assert res.p_value == 0.0
        assert res.accepted == (pop.mean() > mu0)
    else:
        assert 0.0 <= res.p_value < epsilon
        assert res.p_value <= 0.5
        assert res.accepted == (pop[rows].mean() > mu0)


# --------------------------------------------------------------------------- ε sweep


@pytest.fixture(scope="module")
def sweep():
    """Wrong-decision rate and mean fraction of data read for ε in {0} ∪ EPSILONS.

    The same (population, μ0, seed) triples are used for every ε, so the rates are paired.
    """
    n_total, batch_size, n_reps = 2000, 50, 25
    cases = make_cases(40, n_total, seed=20)
    out = {}
    for eps in (0.0, *EPSILONS):
        wrong, read = [], []
        for k, (pop, mu0) in enumerate(cases):
            exact = pop.mean() > mu0
            for rep in range(n_reps):
                res = sequential_mh_test(
                    lambda idx, pop=pop: pop[idx],
                    n_total,
                    mu0,
                    epsilon=eps,
                    batch_size=batch_size,
                    rng=np.random.default_rng([k, rep]),
                )
                wrong.append(res.accepted != exact)
                read.append(res.n_data / n_total)
        out[eps] = (np.mean(wrong), np.mean(read), len(wrong))
    return out


def test_wrong_decisions_shrink_with_epsilon(sweep):
    assert sweep[0.0][0] == 0.0
    for big, small in zip(EPSILONS[:-1], EPSILONS[1:], strict=True):
        err_big, err_small, n = sweep[big][0], sweep[small][0], sweep[big][2]
        mc_se = math.sqrt(max(err_big * (1 - err_big), 1.0 / n) / n)
        assert err_small <= err_big + 2 * mc_se, (big, small, sweep)
    # μ0 sits within ±3 full-data standard errors of μ, the hard regime: still few mistakes
    assert sweep[0.01][0] < 0.05
    assert sweep[0.001][0] < 0.02
    # and ε does control something: the loosest setting errs far more often
    assert sweep[0.2][0] > sweep[0.01][0] + 0.1


def test_data_read_shrinks_as_epsilon_grows(sweep):
    assert sweep[0.0][1] == 1.0
    fractions = [sweep[eps][1] for eps in (0.0, *reversed(EPSILONS))]  # ε increasing
    assert all(a > b for a, b in zip(fractions[:-1], fractions[1:], strict=True)), fractions
    assert sweep[0.2][1] < 0.2


# --------------------------------------------------------------------------- the statistic


@pytest.mark.parametrize(
    ("n_total", "batch_size", "epsilon"),
    [(1000, 50, 0.9), (1000, 50, 0.01), (12, 10, 0.9), (37, 2, 0.2)],
)
def test_p_value_matches_direct_computation(n_total, batch_size, epsilon):
    """s = s_l/√n · √(1 − (n−1)/(N−1)), t = (l̄ − μ0)/s, δ = t.sf(|t|, n − 1)."""
    rng = np.random.default_rng(30)
    pop = rng.normal(0.1, 1.0, n_total)
    mu0 = float(pop.mean() + 0.5 / math.sqrt(n_total))
    rec = Recorder(pop)
    res = sequential_mh_test(
        rec, n_total, mu0, epsilon=epsilon, batch_size=batch_size, rng=np.random.default_rng(31)
    )
    assert not res.exact
    sample = pop[rec.rows]
    assert res.p_value == pytest.approx(direct_p_value(sample, n_total, mu0), rel=1e-10)
    assert res.p_value < epsilon
    if res.n_batches > 1:  # it did not stop one batch earlier
        previous = pop[np.concatenate(rec.calls[:-1])]
        if previous.size > 1:
            assert direct_p_value(previous, n_total, mu0) >= epsilon


def test_finite_population_correction_is_applied():
    # N = 12, n = 10: √(1 − 9/11) ≈ 0.43; dropping it (or using √(1 − n/N)) changes δ
    n_total = 12
    pop = np.random.default_rng(32).normal(0.0, 1.0, n_total)
    mu0 = float(pop.mean() + 0.3)
    rec = Recorder(pop)
    res = sequential_mh_test(
        rec, n_total, mu0, epsilon=0.9, batch_size=10, rng=np.random.default_rng(33)
    )
    sample = pop[rec.rows]
    n = sample.size
    s_l = np.std(sample, ddof=1)
    t_fpc = (sample.mean() - mu0) / (s_l / math.sqrt(n) * math.sqrt(1 - (n - 1) / (n_total - 1)))
    t_none = (sample.mean() - mu0) / (s_l / math.sqrt(n))
    t_paper = (sample.mean() - mu0) / (s_l / math.sqrt(n) * math.sqrt(1 - n / n_total))
    assert res.p_value == pytest.approx(stats.t.sf(abs(t_fpc), n - 1), rel=1e-12)
    assert res.p_value != pytest.approx(stats.t.sf(abs(t_none), n - 1), rel=1e-3)
    assert res.p_value != pytest.approx(stats.t.sf(abs(t_paper), n - 1), rel=1e-3)


def test_variance_is_stable_when_the_mean_dwarfs_the_spread():
    # control-variate regime: l ≈ 1e-2 with spread 1e-10; raw Σl² − n·l̄² would be all rounding
    n_total = 5000
    rng = np.random.default_rng(34)
    pop = 1e-2 + 1e-10 * rng.normal(size=n_total)
    mu0 = float(pop.mean() + 3e-11)
    rec = Recorder(pop)
    res = sequential_mh_test(
        rec, n_total, mu0, epsilon=0.01, batch_size=100, rng=np.random.default_rng(35)
    )
    if not res.exact:
        assert res.p_value == pytest.approx(
            direct_p_value(pop[rec.rows] - 1e-2, n_total, mu0 - 1e-2), rel=1e-6
        )
    assert res.accepted == (pop.mean() > mu0)


def test_p_value_uses_student_t_not_normal():
    # n = 3: the t(2) tail is much heavier than the normal one
    pop = np.random.default_rng(36).normal(0.0, 1.0, 100)
    rec = Recorder(pop)
    res = sequential_mh_test(
        rec, pop.size, -1.0, epsilon=0.9, batch_size=3, rng=np.random.default_rng(37)
    )
    assert res.n_data == 3
    sample = pop[rec.rows]
    s = np.std(sample, ddof=1) / math.sqrt(3) * math.sqrt(1 - 2 / (pop.size - 1))
    t = (sample.mean() + 1.0) / s
    assert res.p_value == pytest.approx(stats.t.sf(abs(t), 2), rel=1e-10)
    assert res.p_value > 1.5 * stats.norm.sf(abs(t))


# --------------------------------------------------------------------------- early decisions


@pytest.mark.parametrize("side", [-1.0, 1.0])
def test_far_threshold_decides_after_one_batch(side):
    n_total, batch_size = 10_000, 50
    pop = np.random.default_rng(40).normal(0.2, 1.0, n_total)
    mu0 = float(pop.mean() + side * 10 * pop.std())
    for seed in range(20):
        res = sequential_mh_test(
            lambda idx: pop[idx],
            n_total,
            mu0,
            epsilon=0.01,
            batch_size=batch_size,
            rng=np.random.default_rng(seed),
        )
        assert res.n_batches == 1
        assert res.n_data == batch_size
        assert not res.exact
        assert res.accepted == (side < 0)
        assert res.p_value < 1e-10


def test_rows_read_are_a_uniform_sample():
    # a sorted population punishes any order bias; each row is in the single batch read
    # (ε > 1/2) with probability m / N
    n_total, batch_size, n_seeds = 40, 8, 3000
    pop = np.sort(np.random.default_rng(44).normal(size=n_total))
    counts = np.zeros(n_total)
    for seed in range(n_seeds):
        rec = Recorder(pop)
        res = sequential_mh_test(
            rec, n_total, 0.0, epsilon=0.6, batch_size=batch_size, rng=np.random.default_rng(seed)
        )
        assert res.n_batches == 1
        counts[rec.rows] += 1
    assert stats.chisquare(counts).pvalue > 1e-3


def test_epsilon_above_half_always_stops_after_first_batch():
    n_total = 1000
    for k, (pop, mu0) in enumerate(make_cases(20, n_total, seed=41)):
        res = sequential_mh_test(
            lambda idx, pop=pop: pop[idx],
            n_total,
            mu0,
            epsilon=0.51,
            batch_size=20,
            rng=np.random.default_rng(k),
        )
        assert res.n_batches == 1
        assert res.n_data == 20


def test_reproducible_with_same_seed():
    pop = np.random.default_rng(42).standard_t(3, 3000)
    mu0 = float(pop.mean() + 0.01)
    results = {
        sequential_mh_test(
            lambda idx: pop[idx],
            pop.size,
            mu0,
            epsilon=0.05,
            batch_size=30,
            rng=np.random.default_rng(43),
        )
        for _ in range(3)
    }
    assert len(results) == 1


# --------------------------------------------------------------------------- edge cases


def test_constant_population_decides_after_one_batch():
    # s = 0 with n < N is the limit s → 0⁺: δ = 0 when l̄ ≠ μ0 (0.25 sums exactly, so s = 0)
    pop = np.full(1000, 0.25)
    for mu0, accepted in [(0.1, True), (0.5, False)]:
        res = sequential_mh_test(
            lambda idx: pop[idx],
            pop.size,
            mu0,
            epsilon=0.05,
            batch_size=10,
            rng=np.random.default_rng(50),
        )
        assert res == SequentialTestResult(accepted, 10, 1, 0.0, False)


def test_nearly_constant_population_behaves_like_a_constant_one():
    # 0.3 does not sum exactly: s is rounding-sized, not 0, and the decision is the same
    pop = np.full(1000, 0.3)
    res = sequential_mh_test(
        lambda idx: pop[idx],
        pop.size,
        0.1,
        epsilon=0.05,
        batch_size=10,
        rng=np.random.default_rng(50),
    )
    assert (res.accepted, res.n_data, res.n_batches, res.exact) == (True, 10, 1, False)
    assert res.p_value < 1e-100


def test_constant_population_at_the_threshold_reads_everything():
    # l̄ = μ0 exactly with s = 0: no evidence either way, so read on; ties reject (μ > μ0 fails)
    pop = np.full(100, 0.25)
    res = sequential_mh_test(
        lambda idx: pop[idx], 100, 0.25, epsilon=0.3, batch_size=10, rng=np.random.default_rng(51)
    )
    assert res == SequentialTestResult(False, 100, 10, 0.0, True)


def test_constant_population_with_epsilon_zero_reads_everything():
    pop = np.full(100, 0.3)
    res = sequential_mh_test(
        lambda idx: pop[idx], 100, 0.1, epsilon=0.0, batch_size=10, rng=np.random.default_rng(52)
    )
    assert res == SequentialTestResult(True, 100, 10, 0.0, True)


def test_single_row_batches_never_decide_on_one_row():
    # n = 1 has no variance estimate; the test must read a second row before deciding
    pop = np.random.default_rng(53).normal(0.0, 1.0, 500)
    for seed in range(10):
        rec = Recorder(pop)
        res = sequential_mh_test(
            rec, pop.size, 100.0, epsilon=0.4, batch_size=1, rng=np.random.default_rng(seed)
        )
        assert res.n_data >= 2
        assert res.n_batches == res.n_data == len(rec.calls)
        assert not res.accepted


@pytest.mark.parametrize("epsilon", [0.0, 0.3])
def test_batch_size_equal_to_n_is_one_exact_batch(epsilon):
    pop = np.random.default_rng(54).normal(0.0, 1.0, 64)
    mu0 = float(pop.mean() - 1e-6)
    res = sequential_mh_test(
        lambda idx: pop[idx],
        64,
        mu0,
        epsilon=epsilon,
        batch_size=64,
        rng=np.random.default_rng(55),
    )
    assert res == SequentialTestResult(True, 64, 1, 0.0, True)


@pytest.mark.parametrize(("value", "mu0", "accepted"), [(2.0, 1.0, True), (2.0, 3.0, False)])
def test_single_row(value, mu0, accepted):
    res = sequential_mh_test(
        lambda idx: np.full(idx.size, value),
        1,
        mu0,
        epsilon=0.1,
        batch_size=1,
        rng=np.random.default_rng(56),
    )
    assert res == SequentialTestResult(accepted, 1, 1, 0.0, True)


def test_uneven_last_batch():
    pop = np.random.default_rng(57).normal(size=103)
    rec = Recorder(pop)
    res = sequential_mh_test(
        rec, 103, 0.0, epsilon=0.0, batch_size=10, rng=np.random.default_rng(58)
    )
    assert [c.size for c in rec.calls] == [10] * 10 + [3]
    assert res.n_batches == 11
    assert res.exact


@pytest.mark.parametrize("epsilon", [0.0, 0.05])
def test_infinite_threshold(epsilon):
    pop = np.random.default_rng(59).normal(size=200)
    low = sequential_mh_test(
        lambda idx: pop[idx],
        200,
        -math.inf,
        epsilon=epsilon,
        batch_size=20,
        rng=np.random.default_rng(60),
    )
    high = sequential_mh_test(
        lambda idx: pop[idx],
        200,
        math.inf,
        epsilon=epsilon,
        batch_size=20,
        rng=np.random.default_rng(60),
    )
    assert low.accepted
    assert not high.accepted
    expected_rows = 200 if epsilon == 0.0 else 20
    assert low.n_data == high.n_data == expected_rows


def test_minus_infinity_rejects_at_once():
    # a row where the proposal has zero likelihood settles the sum: reject, even with ε = 0
    pop = np.ones(100)
    pop[7] = -np.inf
    rec = Recorder(pop)
    res = sequential_mh_test(
        rec, 100, -5.0, epsilon=0.0, batch_size=10, rng=np.random.default_rng(61)
    )
    assert not res.accepted
    assert res.p_value == 0.0
    assert 7 in rec.rows
    assert 7 in rec.calls[-1]  # stopped at the batch that held the -inf row
    assert res.n_data == rec.rows.size


def test_plus_infinity_accepts_at_once():
    pop = np.zeros(50)
    pop[3] = np.inf
    res = sequential_mh_test(
        lambda idx: pop[idx], 50, 1.0, epsilon=0.0, batch_size=50, rng=np.random.default_rng(62)
    )
    assert res == SequentialTestResult(True, 50, 1, 0.0, True)


def test_nan_differences_raise():
    pop = np.zeros(50)
    pop[10] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        sequential_mh_test(
            lambda idx: pop[idx],
            50,
            0.0,
            epsilon=0.1,
            batch_size=50,
            rng=np.random.default_rng(63),
        )


def test_nan_threshold_raises():
    with pytest.raises(ValueError, match="mu0"):
        sequential_mh_test(
            lambda idx: np.zeros(idx.size),
            10,
            math.nan,
            epsilon=0.1,
            batch_size=5,
            rng=np.random.default_rng(64),
        )


def test_wrong_shape_from_row_diffs_raises():
    with pytest.raises(ValueError, match="shape"):
        sequential_mh_test(
            lambda idx: np.zeros(idx.size + 1),
            10,
            0.0,
            epsilon=0.1,
            batch_size=5,
            rng=np.random.default_rng(65),
        )


# --------------------------------------------------------------------------- μ0


def test_mu0_arithmetic():
    mu0 = austerity_mu0(log_u=-0.7, log_prior_ratio=1.5, log_q_ratio=-0.25, n_total=4, cv_sum=2.0)
    assert mu0 == pytest.approx((-0.7 - 1.5 + 0.25 - 2.0) / 4)
    assert austerity_mu0(-1.0, 0.0, 0.0, 10) == pytest.approx(-0.1)  # cv_sum defaults to 0


def test_mu0_reproduces_the_exact_mh_rule():
    # accept iff Σ l_i > ψ = log u + log p0(θ) − log p0(θ') + log q(θ'|θ) − log q(θ|θ')
    rng = np.random.default_rng(70)
    n_total = 50
    agree = 0
    for _ in range(500):
        diffs = rng.normal(0.0, 0.2, n_total)
        log_u = math.log(rng.uniform())
        lp, lp_new, lq_fwd, lq_rev = rng.normal(size=4)
        psi = log_u + lp - lp_new + lq_fwd - lq_rev
        mu0 = austerity_mu0(log_u, lp_new - lp, lq_rev - lq_fwd, n_total)
        assert mu0 * n_total == pytest.approx(psi, abs=1e-12)
        agree += (diffs.mean() > mu0) == (diffs.sum() > psi)
    assert agree == 500


def test_mu0_with_control_variates_matches_the_shifted_population():
    # population l_i − r̂_i against μ0 − Σr̂/N is the same test as l_i against μ0
    rng = np.random.default_rng(71)
    n_total = 200
    diffs = rng.normal(0.05, 1.0, n_total)
    r_hat = diffs + rng.normal(0.0, 1e-3, n_total)
    mu0_plain = austerity_mu0(-0.3, 0.2, 0.1, n_total)
    mu0_cv = austerity_mu0(-0.3, 0.2, 0.1, n_total, cv_sum=float(r_hat.sum()))
    assert mu0_cv == pytest.approx(mu0_plain - r_hat.sum() / n_total)
    assert ((diffs - r_hat).mean() > mu0_cv) == (diffs.mean() > mu0_plain)


# --------------------------------------------------------------------------- knobs


def test_valid_knobs_are_returned_normalised():
    assert validate_austerity_knobs(0, np.int64(5), 10) == (0.0, 5, 10)
    out = validate_austerity_knobs(0.05, 10, 10)
    assert out == (0.05, 10, 10)
    assert isinstance(out[1], int)


@pytest.mark.parametrize("epsilon", [-0.1, 1.0, 1.5, math.nan, math.inf])
def test_bad_epsilon(epsilon):
    with pytest.raises(ValueError, match=r"epsilon must be in \[0, 1\).*Use 0 for exact MH"):
        validate_austerity_knobs(epsilon, 10, 100)


@pytest.mark.parametrize("batch_size", [0, -3, 101])
def test_bad_batch_size(batch_size):
    with pytest.raises(ValueError, match=r"batch_size must be in \[1, n_total\] = \[1, 100\]"):
        validate_austerity_knobs(0.1, batch_size, 100)


def test_non_integer_batch_size_and_bad_n_total():
    with pytest.raises(TypeError, match="batch_size must be an integer"):
        validate_austerity_knobs(0.1, 2.5, 100)
    with pytest.raises(ValueError, match="n_total must be at least 1"):
        validate_austerity_knobs(0.1, 1, 0)
    with pytest.raises(TypeError, match="n_total must be an integer"):
        validate_austerity_knobs(0.1, 1, 10.0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 1.5, "batch_size": 5}, "epsilon"),
        ({"epsilon": 0.1, "batch_size": 0}, "batch_size"),
        ({"epsilon": 0.1, "batch_size": 11}, "batch_size"),
    ],
)
def test_sequential_test_validates_before_reading(kwargs, match):
    def row_diffs(idx):
        raise AssertionError("no row may be read with invalid knobs")

    with pytest.raises(ValueError, match=match):
        sequential_mh_test(row_diffs, 10, 0.0, rng=np.random.default_rng(80), **kwargs)
