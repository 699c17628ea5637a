"""The disk cache of an automatic bound's derivative graphs
(:mod:`pymc_subsample.bounds.derivative_cache`): a second build of the same row term loads
graphs that compute what freshly built ones compute, on its own inputs; a different row term
under the same entry, or an unreadable entry, is built anew."""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import equal_computations
from pytensor.graph.traversal import graph_inputs

from pymc_subsample.bounds import automatic, derivative_cache
from pymc_subsample.bounds.automatic import AutomaticFamily
from pymc_subsample.bounds.interval import evaluate_intervals

ORDER = 2


@pytest.fixture(autouse=True)
def cache_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(derivative_cache, "_directory", lambda: tmp_path)
    return tmp_path


def _beta_row(shift: float = 0.0) -> AutomaticFamily:
    """A Beta row term in its logit mean and log precision, built afresh (new variables)."""
    p0, p1 = pt.vector("p0", dtype="float64"), pt.vector("p1", dtype="float64")
    y = pt.vector("y", dtype="float64")
    mu, phi = pt.sigmoid(p0 + shift), pt.exp(p1)
    f = (pt.gammaln(phi) - pt.gammaln(mu * phi) - pt.gammaln((1 - mu) * phi)
         + (mu * phi - 1) * pt.log(y) + ((1 - mu) * phi - 1) * pt.log1p(-y))
    return AutomaticFamily(f, [p0, p1], [y], "beta", "Beta")


def _enclosures(fam: AutomaticFamily) -> list:
    rng = np.random.default_rng(7)
    centres = rng.normal(0.0, 1.0, (2, 200))
    boxes = {p: (c - 0.05, c + 0.05) for p, c in zip(fam._predictors, centres, strict=True)}
    _, graphs = fam.derivatives(ORDER)
    return evaluate_intervals(graphs, {**boxes, fam._data[0]: rng.uniform(0.05, 0.95, 200)})


def test_a_second_build_loads_the_graphs_on_its_own_inputs(cache_directory):
    first = _beta_row()
    alphas, built = first.derivatives(ORDER)
    assert len(list(cache_directory.glob("*.pkl"))) == 1
    second = _beta_row()
    calls = []
    second._partial = lambda alpha: calls.append(alpha)  # a build would call it
    again, loaded = second.derivatives(ORDER)
    assert not calls and again == alphas
    # the graphs read the second family's variables, and compute what the first's compute
    roots = {v for v in graph_inputs(loaded) if v.owner is None and v.name}
    assert roots <= {*second._predictors, *second._data}
    assert equal_computations(loaded, built, in_xs=[*second._inputs], in_ys=[*first._inputs])
    for (lo, hi), (lo2, hi2) in zip(_enclosures(first), _enclosures(second), strict=True):
        assert np.array_equal(lo, lo2) and np.array_equal(hi, hi2)


def test_another_row_term_at_the_same_entry_is_built_anew(cache_directory, monkeypatch,
                                                          tmp_path_factory):
    entry = cache_directory / "one.pkl"
    taken = automatic.derivatives_entry
    monkeypatch.setattr(automatic, "derivatives_entry", lambda *args: entry)
    _beta_row().derivatives(ORDER)
    assert entry.exists()
    other = _beta_row(shift=1.0)  # a different f at the same entry (a collision)
    calls = []
    partial = other._partial
    other._partial = lambda alpha: calls.append(alpha) or partial(alpha)
    other.derivatives(ORDER)
    assert calls  # built, not loaded
    # the same enclosures as the same row term's built with an empty cache
    monkeypatch.setattr(automatic, "derivatives_entry", taken)
    empty = tmp_path_factory.mktemp("empty")
    monkeypatch.setattr(derivative_cache, "_directory", lambda: empty)
    for (lo, hi), (lo2, hi2) in zip(_enclosures(other), _enclosures(_beta_row(shift=1.0)),
                                    strict=True):
        assert np.array_equal(lo, lo2) and np.array_equal(hi, hi2)


def test_an_unreadable_entry_is_no_cache(cache_directory):
    _beta_row().derivatives(ORDER)
    [entry] = cache_directory.glob("*.pkl")
    entry.write_bytes(b"not a pickle")
    again = _beta_row()
    calls = []
    partial = again._partial
    again._partial = lambda alpha: calls.append(alpha) or partial(alpha)
    alphas, graphs = again.derivatives(ORDER)
    assert calls and len(graphs) == len(alphas)  # built, and the entry written anew
    third = _beta_row()
    third._partial = lambda alpha: pytest.fail("built, not loaded")
    assert third.derivatives(ORDER)[0] == alphas



def test_an_entry_whose_graphs_read_another_variable_is_not_used():
    """Graphs stored for ``f`` that read a variable other than ``f``'s inputs (a build that
    lost track of them) are built anew, not trusted."""
    fam = _beta_row()
    entry = derivative_cache.derivatives_entry(fam._f, fam._inputs, ORDER, "test")
    stray = pt.vector("stray", dtype="float64")
    derivative_cache.store_derivatives(entry, fam._f, fam._inputs, [(3, 0)], [fam._f + stray])
    assert entry.exists()
    assert derivative_cache.load_derivatives(entry, fam._f, fam._inputs) is None
    derivative_cache.store_derivatives(entry, fam._f, fam._inputs, [(3, 0)], [fam._f * 2.0])
    assert derivative_cache.load_derivatives(entry, fam._f, fam._inputs) is not None
