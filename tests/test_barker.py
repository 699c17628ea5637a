"""Tests of the minibatch Barker test kernel (Seita et al. 2017, Algorithm 1) with stubbed rows."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy import stats
from scipy.special import expit

from pymc_subsample.kernels.barker import (
    BarkerResult,
    barker_error_estimate,
    barker_minibatch_test,
    validate_barker_knobs,
)
from pymc_subsample.kernels.barker_correction import compute_correction, load_correction


def _population(n_total, mean, sd, rng):
    """Gaussian values with exactly the given mean and (ddof=1) standard deviation."""
    z = rng.standard_normal(n_total)
    z = (z - z.mean()) / z.std(ddof=1)
    return mean + sd * z


def _s2(values, n_total):
    b = values.size
    return n_total**2 * np.var(values, ddof=1) / b * (1 - b / n_total)


class _Recorder:
    """row_diffs stub that remembers every batch of indices it was asked for."""

    def __init__(self, values):
        self.values = values
        self.batches = []

    def __call__(self, idx):
        self.batches.append(np.array(idx))
        return self.values[idx]


def _stub_correction(sigma, value=0.0):
    return SimpleNamespace(sigma=sigma, sample=lambda rng, size=None: value)


@pytest.fixture(scope="module")
def correction_sigma1():
    return load_correction(1.0)


@pytest.fixture(scope="module")
def correction_sigma08():
    return compute_correction(0.8, 1000, 1.0, 20.0)


@pytest.mark.parametrize(
    ("which", "delta", "s2_target"),
    [
        ("sigma1", -3.0, 0.2),
        ("sigma1", -1.0, 0.6),
        ("sigma1", 0.5, 0.2),
        ("sigma1", 3.0, 0.4),
        ("sigma08", -2.0, 0.3),
        ("sigma08", 1.5, 0.2),
    ],
)
def test_acceptance_probability_is_logistic(
    which, delta, s2_target, correction_sigma1, correction_sigma08
):
    correction = correction_sigma1 if which == "sigma1" else correction_sigma08
    rng = np.random.default_rng([17, int(10 * delta) + 100])
    n_total, batch, rest = 5000, 50, 0.7
    # Var(Δ*) = N²·S²/b·(1 − b/N) = s2_target; population mean puts Δ at `delta`.
    sd = math.sqrt(s2_target * batch / (n_total**2 * (1 - batch / n_total)))
    values = _population(n_total, (delta - rest) / n_total, sd, rng)
    assert n_total * values.mean() + rest == pytest.approx(delta, abs=1e-12)

    draws = 6000
    results = [
        barker_minibatch_test(
            lambda idx: values[idx], n_total, rest, batch_size=batch, correction=correction, rng=rng
        )
        for _ in range(draws)
    ]
    rate = np.mean([r.accepted for r in results])
    mean_s2 = np.mean([r.s2 for r in results])
    assert mean_s2 == pytest.approx(s2_target, rel=0.02)  # s² is unbiased for Var(Δ*)
    p = expit(delta)
    tol = 4.5 * math.sqrt(p * (1 - p) / draws) + correction.linf_error(refine=1)
    assert abs(rate - p) < tol


@pytest.mark.parametrize("sigma", [0.6, 1.0, 1.5])
def test_normal_part_has_variance_sigma_squared(sigma):
    # With X_corr stubbed to 0 the decision is Δ* + X_nc > 0, and Δ* + X_nc ~ N(Δ, σ²) when
    # X_nc ~ N(0, σ² − s²): the acceptance probability is Φ(Δ/σ).
    rng = np.random.default_rng([41, int(10 * sigma)])
    n_total, batch, delta = 4000, 40, 0.8 * sigma
    s2_target = 0.3 * sigma**2
    sd = math.sqrt(s2_target * batch / (n_total**2 * (1 - batch / n_total)))
    values = _population(n_total, delta / n_total, sd, rng)
    draws = 4000
    results = [
        barker_minibatch_test(
            lambda idx: values[idx],
            n_total,
            0.0,
            batch_size=batch,
            correction=_stub_correction(sigma),
            rng=rng,
        )
        for _ in range(draws)
    ]
    p = stats.norm.cdf(0.8)
    rate = np.mean([r.accepted for r in results])
    assert abs(rate - p) < 4.5 * math.sqrt(p * (1 - p) / draws)


@pytest.mark.parametrize("delta", [-2.0, 0.4, 2.5])
def test_full_read_is_exact_barker_test(delta, correction_sigma1):
    rng = np.random.default_rng([23, int(10 * delta) + 100])
    n_total, rest = 40, -1.3
    values = rng.normal(0.0, 5.0, n_total)  # large spread: only a full read can decide
    values += (delta - rest - values.sum()) / n_total
    draws = 8000
    results = [
        barker_minibatch_test(
            lambda idx: values[idx],
            n_total,
            rest,
            batch_size=n_total,
            correction=correction_sigma1,
            rng=rng,
        )
        for _ in range(draws)
    ]
    assert all(r.n_data == n_total and r.s2 == 0.0 and r.error_bound == 0.0 for r in results)
    # In law the decision is Δ + X_norm + X_corr > 0, whose probability is 1 − F(−Δ).
    p = 1.0 - float(correction_sigma1.cdf_of_sum(np.array([-delta]))[0])
    assert abs(p - expit(delta)) < 1e-3
    rate = np.mean([r.accepted for r in results])
    assert abs(rate - p) < 4.5 * math.sqrt(p * (1 - p) / draws)


@pytest.mark.parametrize("x_corr", [-0.71, 0.69])
def test_decision_step_with_stubbed_noise(x_corr):
    # σ² = 1e-300 makes X_nc vanish; with all rows read the decision is Δ + X_corr > 0 exactly.
    values = np.array([0.5, -0.2, 0.4])  # Σ = 0.7
    for rest in (-0.05, 0.05):
        res = barker_minibatch_test(
            lambda idx: values[idx],
            3,
            rest,
            batch_size=5,  # larger than N: reads everything
            correction=_stub_correction(1e-150, x_corr),
            rng=np.random.default_rng(0),
        )
        assert res == BarkerResult(0.7 + rest + x_corr > 0, 3, 0.0, 0.0)


@pytest.mark.parametrize("sigma", [0.7, 1.0, 1.3])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_batch_grows_until_variance_below_sigma_squared(sigma, seed):
    rng = np.random.default_rng([31, seed])
    n_total, batch = 20_000, 100
    # s² ≈ N²·sd²/b: about 4σ² at the first batch, so growth to ~400 rows is expected.
    sd = 2 * sigma / n_total * math.sqrt(batch)
    values = _population(n_total, 0.0, sd, rng)
    rec = _Recorder(values)
    res = barker_minibatch_test(
        rec, n_total, 0.0, batch_size=batch, correction=_stub_correction(sigma), rng=rng
    )
    taken = np.concatenate(rec.batches)
    assert all(b.size == batch for b in rec.batches)
    assert np.unique(taken).size == taken.size  # without replacement
    assert res.n_data == taken.size > batch
    for k in range(1, len(rec.batches)):
        assert _s2(values[taken[: k * batch]], n_total) >= sigma**2
    final = _s2(values[taken], n_total)
    assert final < sigma**2
    assert res.s2 == pytest.approx(final, rel=1e-10)  # FPC and ddof=1, as documented
    assert res.error_bound == pytest.approx(barker_error_estimate(values[taken], n_total))


def test_batch_stops_at_first_step_when_variance_small():
    rng = np.random.default_rng(5)
    values = _population(10_000, 1e-4, 1e-5, rng)
    rec = _Recorder(values)
    res = barker_minibatch_test(
        rec, 10_000, 0.0, batch_size=64, correction=_stub_correction(1.0), rng=rng
    )
    assert len(rec.batches) == 1 and res.n_data == 64 and res.s2 < 1e-3


def test_constant_rows_need_one_batch_and_report_zero_error():
    res = barker_minibatch_test(
        lambda idx: np.full(idx.size, 2e-3),
        1000,
        0.0,
        batch_size=10,
        correction=_stub_correction(1.0),
        rng=np.random.default_rng(0),
        delta=0.01,
    )
    assert (res.n_data, res.error_bound) == (10, 0.0)
    assert res.s2 < 1e-20  # zero up to rounding of the mean


def test_batch_reads_everything_when_variance_stays_large():
    rng = np.random.default_rng(8)
    values = _population(3000, 0.0, 1.0, rng)
    res = barker_minibatch_test(
        lambda idx: values[idx],
        3000,
        0.0,
        batch_size=128,
        correction=_stub_correction(1.0),
        rng=rng,
    )
    assert (res.n_data, res.s2, res.error_bound) == (3000, 0.0, 0.0)


def test_batch_size_grows_with_spread():
    rng = np.random.default_rng(9)
    n_total, batch = 50_000, 50
    base = _population(n_total, 0.0, 1.0, rng)
    means = []
    for scale in (0.5, 1.0, 2.0):
        values = base * scale * math.sqrt(batch) / n_total  # s² ≈ scale² at the first batch
        sizes = [
            barker_minibatch_test(
                lambda idx, v=values: v[idx],
                n_total,
                0.0,
                batch_size=batch,
                correction=_stub_correction(1.0),
                rng=rng,
            ).n_data
            for _ in range(200)
        ]
        means.append(np.mean(sizes))
    # s² scales like scale²/b, so rows needed grow roughly fourfold per doubling of the spread.
    assert means[0] < 1.5 * batch
    assert 2.5 * means[1] < means[2]
    assert means[0] < means[1]


def test_delta_bound_drives_growth():
    rng = np.random.default_rng(11)
    n_total, batch, delta = 100_000, 250, 0.2
    values = _population(n_total, 0.0, 1e-7, rng)  # s² tiny: only delta makes the batch grow
    rec = _Recorder(values)
    res = barker_minibatch_test(
        rec, n_total, 0.0, batch_size=batch, correction=_stub_correction(1.0), rng=rng, delta=delta
    )
    taken = np.concatenate(rec.batches)
    assert res.n_data == taken.size >= (8.4 / delta) ** 2
    assert res.error_bound == pytest.approx(barker_error_estimate(values[taken], n_total))
    assert res.error_bound <= delta
    assert barker_error_estimate(values[taken[:-batch]], n_total) > delta


@pytest.mark.parametrize("rest", [-math.inf, math.inf])
def test_infinite_rest_decides_without_data(rest):
    rec = _Recorder(np.zeros(10))
    res = barker_minibatch_test(
        rec, 10, rest, batch_size=4, correction=_stub_correction(1.0), rng=np.random.default_rng(0)
    )
    assert res == BarkerResult(rest > 0, 0, 0.0, 0.0) and rec.batches == []


@pytest.mark.parametrize(("bad", "accepted"), [(-math.inf, False), (math.inf, True)])
def test_infinite_row_decides_the_test(bad, accepted):
    values = np.zeros(100)
    values[:] = bad  # every row infinite, so the first batch contains one
    res = barker_minibatch_test(
        lambda idx: values[idx],
        100,
        50.0 if not accepted else -50.0,
        batch_size=10,
        correction=_stub_correction(1.0),
        rng=np.random.default_rng(0),
    )
    assert res.accepted is accepted and res.n_data == 10


@pytest.mark.parametrize(
    ("row_diffs", "rest", "match"),
    [
        (lambda idx: np.full(idx.size, np.nan), 0.0, "NaN"),
        (lambda idx: np.zeros(idx.size + 1), 0.0, "shape"),
        (lambda idx: np.zeros(idx.size), math.nan, "NaN"),
    ],
)
def test_bad_inputs_raise(row_diffs, rest, match):
    with pytest.raises(ValueError, match=match):
        barker_minibatch_test(
            row_diffs,
            100,
            rest,
            batch_size=10,
            correction=_stub_correction(1.0),
            rng=np.random.default_rng(0),
        )


def test_error_estimate_decreases_with_batch_size():
    values = np.random.default_rng(3).standard_normal(200_000)
    sizes = [100, 400, 1600, 6400, 25_600]
    est = [barker_error_estimate(values[:b], 10**6) for b in sizes]
    assert all(a > b for a, b in zip(est, est[1:], strict=False))
    # For normal terms 6.4·E|Z|³ + 2·E|Z| = 14.8·√(2/π) ≈ 11.81, so ε ≈ 11.81/√b.
    assert est[-1] * math.sqrt(sizes[-1]) == pytest.approx(14.8 * math.sqrt(2 / math.pi), rel=0.03)


def test_error_estimate_is_standardised_and_exact_at_full_data():
    values = np.random.default_rng(4).exponential(size=500)
    base = barker_error_estimate(values, 10_000)
    assert barker_error_estimate(3.7e-5 * values - 12.0, 10_000) == pytest.approx(base)
    assert barker_error_estimate(values, 500) == 0.0
    assert barker_error_estimate(np.full(20, 0.3), 100) == 0.0
    # skewed terms have a heavier third moment than normal ones
    assert base * math.sqrt(500) > 14.8 * math.sqrt(2 / math.pi)


@settings(max_examples=300, deadline=None)
@given(
    arrays(
        np.float64, st.integers(2, 60), elements=st.floats(allow_nan=False, allow_infinity=False)
    )
)
def test_error_estimate_never_below_its_floor(values):
    est = barker_error_estimate(values, 10**9)
    if est == 0.0:  # only when the batch has no spread beyond rounding
        scale = np.max(np.abs(values))
        assert scale == 0.0 or np.ptp(values / scale) <= 1e-12
    else:
        assert est * math.sqrt(values.size) >= 8.4 * (1 - 1e-9)


@pytest.mark.parametrize(
    ("l_batch", "n_total", "match"),
    [(np.zeros((2, 2)), 10, "1-d"), (np.zeros(0), 10, "non-empty"), (np.zeros(5), 4, "n_total")],
)
def test_error_estimate_validation(l_batch, n_total, match):
    with pytest.raises(ValueError, match=match):
        barker_error_estimate(l_batch, n_total)


@pytest.mark.parametrize(
    ("batch_size", "n_total", "delta", "match"),
    [
        (1, 100, None, "batch_size"),
        (0, 100, None, "batch_size"),
        (2.5, 100, None, "batch_size"),
        (True, 100, None, "batch_size"),
        (10, 0, None, "n_total"),
        (10, 10.0, None, "n_total"),
        (10, 100, 0.0, "delta"),
        (10, 100, 1.0, "delta"),
        (10, 100, -0.1, "delta"),
        (10, 100, math.nan, "delta"),
        (10, 100, "small", "delta"),
    ],
)
def test_knob_validation(batch_size, n_total, delta, match):
    with pytest.raises(ValueError, match=match):
        validate_barker_knobs(batch_size, n_total, delta)
    with pytest.raises(ValueError, match=match):
        barker_minibatch_test(
            lambda idx: np.zeros(idx.size),
            n_total,
            0.0,
            batch_size=batch_size,
            correction=_stub_correction(1.0),
            rng=np.random.default_rng(0),
            delta=delta,
        )


def test_valid_knobs_pass():
    validate_barker_knobs(2, 1, None)
    validate_barker_knobs(np.int64(500), np.int64(100), 0.05)  # batch larger than N is allowed
