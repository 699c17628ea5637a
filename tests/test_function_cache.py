"""Compiled functions kept between builds (:mod:`pymc_subsample.model.function_cache`): a
second compile of the same graph loads the rewritten graph and computes the same values; the
same graph on other constant data (a rewrite may fold the data into a constant the stored
function holds) or a changed graph compiles anew; a loaded function reads its shared
variables' current values; an unreadable entry compiles anew; a second ``pms.MHSS()`` build
loads every function and gives the same step and the same draws."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import get_mode

import pymc_subsample as pms
from pymc_subsample.model import function_cache
from pymc_subsample.model.function_cache import REFERENCED_BYTES, compile_cached

MODE = get_mode(None).excluding("BlasOpt")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache of its own, and the loads it answered: ``(hits, misses)``."""
    monkeypatch.setattr(function_cache, "_directory", lambda: tmp_path)
    answers = {"hit": 0, "miss": 0}
    load = function_cache._load

    def counted(*args):
        fn = load(*args)
        answers["hit" if fn is not None else "miss"] += 1
        return fn

    monkeypatch.setattr(function_cache, "_load", counted)
    return answers


def _compiled(inputs, outputs):
    return compile_cached(inputs, outputs, "c", MODE,
                          lambda: pytensor.function(inputs, outputs, mode=MODE))


@pytest.mark.parametrize("rows", [10, 4 * REFERENCED_BYTES // 8])
def test_other_data_of_the_same_shape_compiles_anew(cache, rows):
    """``log y`` of a constant ``y`` is folded into a constant by the rewrites: a function
    stored for one ``y`` must not serve another (small constants are compared by value in the
    graph, large ones by a hash of their bytes)."""
    x = pt.dvector("x")
    first = np.random.default_rng(0).uniform(0.5, 2.0, size=rows)
    other = first.copy()  # printed alike (its ends), other data
    other[rows // 2] += 0.25
    values = [first, other]
    for k, y in enumerate([values[0], values[0].copy(), values[1]]):
        fn = _compiled([x], pt.log(pt.constant(y)) * x)
        np.testing.assert_allclose(fn(np.ones(rows)), np.log(y), rtol=1e-15)
        assert cache == {"hit": int(k >= 1), "miss": 1 + int(k == 2)}
    # the graph itself changed: compiled anew
    fn = _compiled([x], pt.log1p(pt.constant(values[1])) * x)
    np.testing.assert_allclose(fn(np.ones(rows)), np.log1p(values[1]), rtol=1e-15)
    assert cache["hit"] == 1


def test_graphs_with_more_constant_bytes_than_are_worth_hashing_are_not_cached(
        cache, monkeypatch):
    monkeypatch.setattr(function_cache, "MAX_HASHED_BYTES", REFERENCED_BYTES)
    x = pt.dvector("x")
    y = np.linspace(1.0, 2.0, 2 * REFERENCED_BYTES // 8)
    for _ in range(2):
        fn = _compiled([x], pt.log(pt.constant(y)) * x)
        np.testing.assert_allclose(fn(np.ones(y.size)), np.log(y), rtol=1e-15)
    assert cache == {"hit": 0, "miss": 0}


def test_a_loaded_function_reads_its_shared_variables(cache):
    x = pt.dvector("x")
    data = pytensor.shared(np.arange(1.0, 2.0 * REFERENCED_BYTES), name="data")
    theta = pytensor.shared(np.array(2.0), name="theta")
    first = _compiled([x], (pt.exp(data * theta) * x).sum())
    data.set_value(np.full(data.get_value().size, 0.5))
    theta.set_value(np.array(-1.0))
    loaded = _compiled([x], (pt.exp(data * theta) * x).sum())
    assert cache == {"hit": 1, "miss": 1}
    ones = np.ones(data.get_value().size)
    expected = np.exp(-0.5) * ones.size
    assert loaded(ones) == pytest.approx(expected, rel=1e-9)
    assert first(ones) == pytest.approx(expected, rel=1e-9)
    assert loaded.maker.fgraph is not first.maker.fgraph


def test_an_unreadable_entry_compiles_anew(cache, tmp_path):
    x = pt.dvector("x")
    _compiled([x], pt.sqrt(x))
    (entry,) = tmp_path.glob("*.pkl")
    entry.write_bytes(entry.read_bytes()[:100])
    fn = _compiled([x], pt.sqrt(x))
    np.testing.assert_allclose(fn(np.array([4.0, 9.0])), [2.0, 3.0])
    assert cache == {"hit": 0, "miss": 2}


def _beta_model(n: int = 3000) -> pm.Model:
    """An automatic family (``log y`` and ``log(1 − y)`` folded into constants)."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(n, 3))
    p = 1.0 / (1.0 + np.exp(-(X @ np.array([0.5, -0.3, 0.2]))))
    y = np.clip(rng.beta(p * 20.0, (1.0 - p) * 20.0), 1e-6, 1 - 1e-6)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 2.0, shape=3)
        phi = pm.Exponential("phi", 0.1)
        mu = pm.math.invlogit(pt.dot(X, b))
        pm.Beta("y", alpha=mu * phi, beta=(1.0 - mu) * phi, observed=y)
    return model


def test_a_second_build_loads_every_function_and_draws_the_same(cache):
    draws = []
    for build in range(2):
        with _beta_model():
            step = pms.MHSS(progressbar=False)
            idata = pm.sample(draws=200, tune=100, chains=1, step=step, random_seed=5,
                              progressbar=False, compute_convergence_checks=False)
        draws.append(idata.posterior["b"].values)
        if build == 0:
            assert cache["hit"] == 0 and cache["miss"] > 0
            theta_hat = step.setup.theta_hat
            first = dict(cache)
        else:
            assert cache["hit"] == first["miss"] and cache["miss"] == first["miss"]
            np.testing.assert_array_equal(step.setup.theta_hat, theta_hat)
    np.testing.assert_array_equal(draws[0], draws[1])
