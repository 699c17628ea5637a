"""The subsampled likelihood layer: per-row terms, p0, raveling, temperature."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from pymc.blocking import DictToArrayBijection
from scipy import stats

from pymc_subsample.likelihood import SubsampledLikelihood


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


def test_compiled_terms_do_not_touch_all_rows():
    """The compiled per-row function reads only the requested rows (cost ∝ len(idx))."""
    model, *_ = _two_observed_model()
    lik = SubsampledLikelihood(model)
    theta = lik.ravel(model.initial_point())
    # if the graph computed all N rows and sliced, this would return N values
    assert lik.loglik_terms(theta, np.array([5], dtype=np.int64)).shape == (1,)
    assert lik.loglik_terms(theta, np.array([], dtype=np.int64)).shape == (0,)


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
