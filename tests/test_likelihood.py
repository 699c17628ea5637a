"""The subsampled likelihood layer: per-row terms, p0, raveling, temperature."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from pymc.blocking import DictToArrayBijection
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant
from scipy import stats

from pymc_subsample.model.likelihood import SubsampledLikelihood


def _two_observed_model(n=300, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    yb = rng.binomial(1, 0.4, size=n)
    yn = rng.normal(size=(n, 2))
    with pm.Model(coords={"row": range(n), "col": range(2)}) as model:
        Xd = pm.Data("X", X, dims=("row", "col"))
        b = pm.Normal("b", 0, 2, dims="col")
        a = pm.Normal("a", 0, 2)
        s = pm.HalfNormal("s", 1.0)
        pm.Bernoulli("yb", logit_p=Xd @ b + a, observed=yb, dims="row")
        # an observed variable with a trailing axis: its row term sums over that axis
        pm.Normal("yn", mu=(Xd @ b)[:, None], sigma=s, observed=yn)
    return model, X, yb, yn


def _reference_terms(point, X, yb, yn):
    b, a, s = point["b"], point["a"], np.exp(point["s_log__"])
    eta = X @ b + a
    terms = stats.bernoulli.logpmf(yb, 1 / (1 + np.exp(-eta)))
    terms += stats.norm.logpdf(yn, loc=(X @ b)[:, None], scale=s).sum(axis=1)
    return terms


def test_terms_match_independent_reference_on_any_index():
    model, X, yb, yn = _two_observed_model()
    lik = SubsampledLikelihood(model)
    assert lik.n_rows == 300 and lik.dim == 4
    rng = np.random.default_rng(0)
    for _ in range(3):
        point = {"b": rng.normal(size=2), "a": rng.normal(), "s_log__": rng.normal(scale=0.3)}
        theta = lik.ravel(point)
        ref = _reference_terms(point, X, yb, yn)
        idx = rng.integers(0, 300, size=17)
        np.testing.assert_allclose(lik.loglik_terms(theta, idx), ref[idx], rtol=1e-10)
        np.testing.assert_allclose(lik.full_loglik(theta), ref.sum(), rtol=1e-10)


def test_logp0_is_model_logp_minus_likelihood():
    model, *_ = _two_observed_model()
    lik = SubsampledLikelihood(model)
    point = model.initial_point()
    point["b"] = np.array([0.3, -0.2])
    point["s_log__"] = np.array(0.4)
    theta = lik.ravel(point)
    total = model.compile_logp()(point)
    np.testing.assert_allclose(lik.logp0(theta) + lik.full_loglik(theta), total, rtol=1e-10)


def test_ravel_order_matches_pymc_bijection():
    model, *_ = _two_observed_model()
    lik = SubsampledLikelihood(model)
    point = model.initial_point()
    point["b"] = np.array([1.0, 2.0])
    point["a"] = np.array(3.0)
    expected = DictToArrayBijection.map({v.name: point[v.name] for v in model.value_vars}).data
    np.testing.assert_array_equal(lik.ravel(point), expected)
    back = lik.unravel(expected)
    np.testing.assert_array_equal(back["b"], point["b"])


def test_loglik_diff_and_temperature():
    model, X, yb, yn = _two_observed_model()
    lik1 = SubsampledLikelihood(model)
    lik5 = SubsampledLikelihood(model, temperature=5.0)
    rng = np.random.default_rng(1)
    t0, t1 = rng.normal(size=4) * 0.3, rng.normal(size=4) * 0.3
    idx = np.arange(0, 300, 7, dtype=np.int64)
    diff = lik1.loglik_terms(t1, idx) - lik1.loglik_terms(t0, idx)
    np.testing.assert_allclose(lik1.loglik_diff(t0, t1, idx), diff, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lik5.loglik_terms(t0, idx), lik1.loglik_terms(t0, idx) / 5.0)
    # temperature tempers the likelihood only, not the prior
    assert lik5.logp0(t0) == pytest.approx(lik1.logp0(t0))


def _model_row_logp(model, point):
    """The model's own log density of each row, summed over observed variables (all N rows)."""
    outs = model.logp(vars=model.observed_RVs, sum=False, jacobian=False)
    outs = [o.sum(axis=tuple(range(1, o.ndim))) if o.ndim > 1 else o for o in outs]
    fn = pm.compile(model.value_vars, pt.add(*outs) if len(outs) > 1 else outs[0])
    return np.asarray(fn(**{v.name: point[v.name] for v in model.value_vars}), dtype=np.float64)


def _row_data_reads(lik, n_rows):
    """How the compiled terms read each N-row data array: ``(op name, indexed by idx)`` pairs.

    Transposes (DimShuffle, a view that costs O(1)) are followed to the op that reads rows.
    """
    fgraph = lik.compile([lik.theta, lik.idx], lik.terms).maker.fgraph
    idx = fgraph.inputs[1]
    reads = {}
    for var in fgraph.variables:
        if var.owner is None and isinstance(var, SharedVariable | Constant):
            value = var.get_value(borrow=True) if isinstance(var, SharedVariable) else var.data
            if n_rows not in np.shape(value):
                continue
            found, stack = [], [var]
            while stack:
                for client, _ in fgraph.clients[stack.pop()]:
                    if type(client.op).__name__ == "DimShuffle":
                        stack.extend(client.outputs)
                    else:
                        found.append((type(client.op).__name__, idx in client.inputs))
            reads[var.name or str(np.shape(value))] = found
    return reads


def _only_indexed(reads):
    return all(
        clients and all(op.startswith("AdvancedSubtensor") and on_idx for op, on_idx in clients)
        for clients in reads.values()
    )


def test_compiled_terms_do_not_touch_all_rows():
    """The compiled function reads only the requested rows: cost ∝ len(idx), values exact."""
    model, *_ = _two_observed_model()
    lik = SubsampledLikelihood(model)
    point = model.initial_point()
    point["b"] = np.array([0.7, -0.4])
    point["s_log__"] = np.array(0.3)
    theta = lik.ravel(point)
    ref = _model_row_logp(model, point)
    for idx in ([5], [299, 0, 0, 17], []):
        idx = np.array(idx, dtype=np.int64)
        np.testing.assert_allclose(lik.loglik_terms(theta, idx), ref[idx], rtol=1e-12)
    # every N-row array (X, yb, yn) enters the graph only through an advanced index on idx,
    # so nothing of length N is computed and then sliced
    reads = _row_data_reads(lik, 300)
    assert len(reads) == 3 and _only_indexed(reads), reads


def test_data_only_centering_keeps_its_full_data_meaning():
    """``x - x.mean()`` and ``X / X.std(0)`` of data alone use the full-data statistics."""
    rng = np.random.default_rng(7)
    n = 80
    x, X = rng.normal(2.0, 1.5, size=n), rng.normal(1.0, 3.0, size=(n, 2))
    y = rng.normal(size=n)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=3)
        xd, Xd = pm.Data("x", x), pm.Data("X", X)
        mu = b[0] * (xd - xd.mean()) + (Xd / Xd.std(0)) @ b[1:] + b[0] * (x - x.mean())
        pm.Normal("y", mu=mu, sigma=1.0, observed=y)
    lik = SubsampledLikelihood(model)
    point = {"b": np.array([0.5, -1.0, 2.0])}
    ref = _model_row_logp(model, point)
    for idx in ([3], [70, 3, 3, 11], list(range(n))):
        idx = np.array(idx, dtype=np.int64)
        np.testing.assert_allclose(lik.loglik_terms(lik.ravel(point), idx), ref[idx], rtol=1e-12)
    # the folded expressions are read through the index as well
    assert _only_indexed(_row_data_reads(lik, n))


def test_row_wise_data_expression_stays_symbolic():
    """An expression of pm.Data that commutes with row indexing still follows pm.set_data."""
    _, X, yb, _ = _two_observed_model()
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        Xd = pm.Data("X", X)
        pm.Bernoulli("yb", logit_p=b * pt.log(Xd[:, 0] ** 2), observed=yb)
    lik = SubsampledLikelihood(model)
    theta, idx = np.array([0.5]), np.array([0, 1], dtype=np.int64)
    before = lik.loglik_terms(theta, idx)
    with model:
        pm.set_data({"X": X * 2.0})
    np.testing.assert_allclose(
        lik.loglik_terms(theta, idx), _model_row_logp(model, {"b": np.array(0.5)})[idx]
    )
    assert not np.allclose(before, lik.loglik_terms(theta, idx))


def test_data_with_rows_on_the_second_axis_is_indexed_there():
    """``Xt`` of shape (d, N) with ``b @ Xt``: rows are taken along its N-long axis."""
    rng = np.random.default_rng(8)
    n, d = 90, 3
    Xt, y = rng.normal(size=(d, n)), rng.binomial(1, 0.5, size=n)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=d)
        pm.Bernoulli("y", logit_p=b @ pm.Data("Xt", Xt), observed=y)
    lik = SubsampledLikelihood(model)
    point = {"b": np.array([0.3, -1.2, 0.8])}
    theta, ref = lik.ravel(point), _model_row_logp(model, point)
    for idx in ([41], [2, 88, 2]):
        idx = np.array(idx, dtype=np.int64)
        got = lik.loglik_terms(theta, idx)
        assert got.shape == idx.shape  # before: one-row calls broadcast to N terms
        np.testing.assert_allclose(got, ref[idx], rtol=1e-12)
    reads = _row_data_reads(lik, n)
    assert "Xt" in reads and _only_indexed(reads), reads


def test_float32_model():
    """floatX=float32: the terms are the model's (to float32 precision), θ stays float64."""
    with pytensor.config.change_flags(floatX="float32"):
        model, *_ = _two_observed_model(n=120)
        assert model.value_vars[0].dtype == "float32"
        lik = SubsampledLikelihood(model)
    point = {"b": np.array([0.7, -0.4]), "a": np.array(0.2), "s_log__": np.array(0.3)}
    theta = lik.ravel(point)
    assert theta.dtype == np.float64
    idx = np.array([7, 0, 119, 7], dtype=np.int64)
    ref = _model_row_logp(model, {k: v.astype(np.float32) for k, v in point.items()})
    got = lik.loglik_terms(theta, idx)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, ref[idx], rtol=1e-5)
    # a PyMC step hands over float32 θ (its point arrays are floatX): converted, not a crash
    np.testing.assert_allclose(lik.loglik_terms(theta.astype(np.float32), idx), got, rtol=1e-6)
    total = model.compile_logp()({k: v.astype(np.float32) for k, v in point.items()})
    assert lik.logp0(theta.astype(np.float32)) + lik.full_loglik(theta) == pytest.approx(
        total, rel=1e-5
    )


def test_pymc_data_can_be_swapped_after_building():
    """pm.Data is indexed symbolically: the compiled function reads its current value."""
    model, X, yb, yn = _two_observed_model()
    lik = SubsampledLikelihood(model)
    theta = np.array([0.5, -0.5, 0.1, 0.0])
    idx = np.array([0, 1], dtype=np.int64)
    before = lik.loglik_terms(theta, idx)
    with model:
        pm.set_data({"X": X * 2.0})
    after = lik.loglik_terms(theta, idx)
    assert not np.allclose(before, after)
