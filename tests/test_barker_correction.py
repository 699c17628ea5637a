"""Tests of the Barker correction distribution (Seita et al. 2017, Sec. 4 and Table 3)."""

import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import expit, ndtr

from benchmarks import barker_correction_table
from pymc_subsample.kernels import barker_correction as bc
from pymc_subsample.kernels.barker_correction import (
    SIGMA_MAX,
    CorrectionDistribution,
    compute_correction,
    load_correction,
)


@pytest.fixture(scope="module")
def shipped() -> CorrectionDistribution:
    return load_correction(1.0)


def _reference_probs(sigma: float, n_grid: int, lam: float, support: float) -> np.ndarray:
    """Eq. 15 of the paper done the obvious way: explicit M, normal equations, clip, renormalise."""
    h = support / n_grid
    x = np.arange(-2 * n_grid, 2 * n_grid + 1) * h
    y = np.arange(-n_grid, n_grid + 1) * h
    m = ndtr((x[:, None] - y[None, :]) / sigma)
    u = np.linalg.solve(m.T @ m + lam * np.eye(y.size), m.T @ expit(x))
    u = np.clip(u, 0.0, None)
    return u / u.sum()


def test_shipped_table_has_the_papers_settings(shipped):
    assert (shipped.sigma, shipped.n_grid, shipped.lam, shipped.support) == (1.0, 4000, 10.0, 20.0)
    np.testing.assert_allclose(shipped.grid, np.arange(-4000, 4001) * 0.005, rtol=0, atol=1e-12)
    assert np.all(shipped.probs >= 0)
    assert shipped.probs.sum() == pytest.approx(1.0, abs=1e-12)
    assert shipped.cdf[-1] == 1.0
    assert np.all(np.diff(shipped.cdf) >= 0)
    assert not shipped.probs.flags.writeable  # shared through the cache: must be immutable


def test_shipped_file_is_small():
    assert bc.shipped_path().stat().st_size < 200_000


def test_shipped_table_linf_error(shipped):
    # Table 3 of the paper: 8.9e-4 for n_g = 4000, sigma = 1, lambda = 10. This table: 5.6e-4.
    err = shipped.linf_error(refine=4)
    assert err <= 1e-3


def test_shipped_table_equals_fresh_computation(shipped):
    fresh = compute_correction(1.0, 4000, 10.0, 20.0)
    # Rounding in the Cholesky solve (condition number ~1e7) may differ across BLAS builds.
    np.testing.assert_allclose(fresh.probs, shipped.probs, rtol=0, atol=1e-10)


@pytest.mark.parametrize(
    ("n_grid", "sigma", "lam", "support"),
    # the last case has a short support, where the Gram recursion's a-terms are not negligible
    [(5, 1.0, 10.0, 20.0), (60, 0.9, 1.0, 20.0), (200, 1.3, 0.1, 8.0), (40, 1.3, 1.0, 2.0)],
)
def test_compute_correction_matches_explicit_normal_equations(n_grid, sigma, lam, support):
    gram, rhs = bc._gram_and_rhs(sigma, n_grid, support)
    h = support / n_grid
    x = np.arange(-2 * n_grid, 2 * n_grid + 1) * h
    y = np.arange(-n_grid, n_grid + 1) * h
    m = ndtr((x[:, None] - y[None, :]) / sigma)
    np.testing.assert_allclose(gram, m.T @ m, rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(rhs, m.T @ expit(x), rtol=1e-12, atol=1e-10)
    corr = compute_correction(sigma, n_grid, lam, support)
    ref = _reference_probs(sigma, n_grid, lam, support)
    np.testing.assert_allclose(corr.probs, ref, rtol=0, atol=1e-8 * ref.max())


@pytest.mark.parametrize(
    ("sigma", "lam", "paper_error"),
    [(0.8, 10.0, 4.0e-4), (0.9, 1.0, 1.6e-4)],
)
def test_linf_error_reproduces_table3_at_n_grid_2000(sigma, lam, paper_error):
    # Cells of Table 3 (n_g = 2000) where the clipping of negative weights matters little; where
    # it matters (sigma >= 1, small lambda) this implementation does better than the paper.
    err = compute_correction(sigma, 2000, lam, 20.0).linf_error(refine=2)
    assert err == pytest.approx(paper_error, rel=0.15)


@pytest.mark.parametrize("which", ["shipped", "small"])
def test_cdf_of_sum_on_grid_matches_direct_evaluation(which, shipped):
    corr = shipped if which == "shipped" else compute_correction(0.7, 50, 1.0, 5.0)
    x, cdf = corr.cdf_of_sum_on_grid(refine=3)
    assert x.size == 3 * (4 * corr.n_grid) + 1
    np.testing.assert_allclose(np.diff(x), corr.step / 3, rtol=1e-9)
    pick = np.random.default_rng(0).choice(x.size, size=300, replace=False)
    np.testing.assert_allclose(cdf[pick], corr.cdf_of_sum(x[pick]), rtol=0, atol=1e-12)
    # and both agree with the definition Σ_j p_j Φ((x − Y_j)/σ)
    direct = ndtr((x[pick, None] - corr.grid[None, :]) / corr.sigma) @ corr.probs
    np.testing.assert_allclose(cdf[pick], direct, rtol=0, atol=1e-12)


def test_samples_follow_the_table(shipped):
    rng = np.random.default_rng(20170101)
    n = 4_000_000
    draws = np.sort(shipped.sample(rng, n))
    assert np.all(np.isin(draws[:: n // 1000], shipped.grid))
    ecdf = np.searchsorted(draws, shipped.grid, side="right") / n
    # Kolmogorov's 0.1% critical value; conservative for a discrete law. An off-by-one atom
    # (shift of 0.005) would move the CDF by up to ~1.5e-3.
    assert np.max(np.abs(ecdf - shipped.cdf)) < 1.95 / math.sqrt(n)
    scalar = shipped.sample(rng)
    assert isinstance(scalar, float) and np.isin(scalar, shipped.grid)


def test_normal_plus_correction_is_logistic(shipped):
    rng = np.random.default_rng(12345)
    n = 1_000_000
    total = shipped.sigma * rng.standard_normal(n) + shipped.sample(rng, n)
    result = stats.kstest(total, stats.logistic.cdf)
    assert result.pvalue > 1e-3
    # A plain normal of the right variance is not logistic: the same test must reject it.
    impostor = math.pi / math.sqrt(3) * rng.standard_normal(n)
    assert stats.kstest(impostor, stats.logistic.cdf).pvalue < 1e-6


@pytest.mark.parametrize("sigma", [0.0, -1.0, SIGMA_MAX, 2.0, math.nan, math.inf, "one"])
def test_sigma_out_of_range(sigma):
    with pytest.raises(ValueError, match="sigma"):
        load_correction(sigma)
    with pytest.raises(ValueError, match="sigma"):
        compute_correction(sigma, n_grid=10)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"n_grid": 0}, "n_grid"),
        ({"n_grid": 2.5}, "n_grid"),
        ({"n_grid": True}, "n_grid"),
        ({"lam": 0.0}, "lam"),
        ({"lam": math.nan}, "lam"),
        ({"support": -1.0}, "support"),
        ({"support": math.inf}, "support"),
    ],
)
def test_grid_arguments_validated(kwargs, name):
    with pytest.raises(ValueError, match=name):
        compute_correction(1.0, **{"n_grid": 10, **kwargs})


def test_load_correction_memoises_computed_tables(monkeypatch):
    calls = []

    def fake_compute(sigma, n_grid, lam, support):
        calls.append((sigma, n_grid, lam, support))
        return compute_correction(sigma, 50, lam, support)

    monkeypatch.setattr(bc, "compute_correction", fake_compute)
    bc._load_cached.cache_clear()
    try:
        first = load_correction(0.9)
        assert load_correction(0.9) is first
        assert calls == [(0.9, 4000, 10.0, 20.0)]
        assert first.sigma == 0.9
        shipped = load_correction(1)  # an int sigma reads the shipped table, computes nothing
        assert load_correction(1.0) is shipped
        assert shipped.n_grid == 4000 and len(calls) == 1
    finally:
        bc._load_cached.cache_clear()


def test_save_and_read_round_trip(tmp_path):
    corr = compute_correction(0.7, 30, 2.0, 10.0)
    path = tmp_path / "table.npz"
    bc.save_correction(corr, path)
    back = bc.read_correction(path)
    assert (back.sigma, back.n_grid, back.lam, back.support) == (0.7, 30, 2.0, 10.0)
    # the read path renormalises (a 1-ulp change); the table itself must survive the trip
    np.testing.assert_allclose(back.probs, corr.probs, rtol=1e-14, atol=0)
    np.testing.assert_allclose(back.cdf, corr.cdf, rtol=1e-14, atol=0)

    with np.load(path) as data:
        arrays = dict(data)
    arrays["format_version"] = np.int64(99)
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match="format version"):
        bc.read_correction(tmp_path / "bad.npz")


def test_regeneration_entry_point_writes_a_readable_table(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bc, "SHIPPED_N_GRID", 40)
    out = tmp_path / "regen.npz"
    barker_correction_table.main(["--output", str(out)])
    table = bc.read_correction(out)
    assert (table.sigma, table.n_grid, table.lam, table.support) == (1.0, 40, 10.0, 20.0)
    np.testing.assert_allclose(table.probs, compute_correction(1.0, 40).probs, atol=1e-15)
    assert "L-infinity" in capsys.readouterr().out
