"""The passes' weighted Gram matrices (pymc_subsample.kernels.gram) against the plain
products they replace."""

import numpy as np
import pytest

from pymc_subsample.kernels.gram import (
    SYRK_MIN_COLUMNS,
    scaled_gram,
    weighted_gram,
    weighted_level_sums,
)


@pytest.mark.parametrize("d", [3, SYRK_MIN_COLUMNS, 40])
@pytest.mark.parametrize("signs", ["negative", "positive", "mixed", "zero"])
def test_weighted_gram_is_the_product(d, signs):
    rng = np.random.default_rng(d)
    x = rng.standard_normal((500, d))
    w = {"negative": -rng.random(500), "positive": rng.random(500),
         "mixed": rng.standard_normal(500), "zero": np.zeros(500)}[signs]
    expected = x.T @ (w[:, None] * x)
    got = weighted_gram(x, w)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
    if d >= SYRK_MIN_COLUMNS and signs != "mixed":  # by dsyrk: one triangle, mirrored
        np.testing.assert_array_equal(got, got.T)


def test_weighted_gram_float32_rows_and_nan():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((200, 12)).astype(np.float32)
    w = -rng.random(200)
    got = weighted_gram(x, w)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, x.astype(np.float64).T @ (w[:, None] * x), rtol=1e-12)
    w[7] = np.nan  # a Newton step that overshoots: NaN propagates, as in the product
    assert np.isnan(weighted_gram(x, w)).any()
    assert weighted_gram(x[:0], w[:0]).shape == (12, 12)


def test_weighted_level_sums_is_bincount():
    rng = np.random.default_rng(2)
    level, w, x = rng.integers(0, 30, 1000), rng.standard_normal(1000), rng.standard_normal(
        (1000, 4))
    expected = np.stack([np.bincount(level, w * col, minlength=33) for col in x.T], axis=1)
    np.testing.assert_allclose(weighted_level_sums(level, w, x, 33), expected, rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("d", [3, 40])
@pytest.mark.parametrize("order", ["C", "F"])
def test_scaled_gram_is_the_product(d, order):
    rng = np.random.default_rng(d)
    x = np.asarray(rng.standard_normal((700, d)), order=order)
    s = rng.random(700) + 0.1
    expected = x.T @ ((s * s)[:, None] * x)
    got = scaled_gram(x, s)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
    np.testing.assert_array_equal(got, got.T)
    assert scaled_gram(x[:0], s[:0]).shape == (d, d)
