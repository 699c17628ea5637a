"""Taylor control variates against an independent analytic expansion (logistic regression)."""

from __future__ import annotations

import numpy as np
import pytest

from pymc_subsample.datasets import glm_data, glm_model
from pymc_subsample.model.control_variates import TaylorControlVariate, validate_cv_order
from pymc_subsample.model.glm import detect_glm_terms
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.model.passes import GenericPass


def _logistic_pieces(X, y, theta_hat):
    eta = X @ theta_hat
    p = 1 / (1 + np.exp(-eta))
    return (y - p)[:, None] * X, p * (1 - p)


def _loglik(X, y, b):
    eta = X @ b
    return y * eta - np.logaddexp(0.0, eta)


@pytest.fixture(scope="module")
def setup():
    X, y = glm_data(1500, 3, "logistic", seed=5)
    lik = SubsampledLikelihood(glm_model(X, y, "logistic"))
    theta_hat = np.array([0.1, -0.3, 0.2])
    return X, y, lik, theta_hat


@pytest.mark.parametrize("order", [1, 2])
def test_sums_and_remainders_match_analytic_taylor(setup, order):
    X, y, lik, theta_hat = setup
    cv = TaylorControlVariate(lik, theta_hat, order)
    g, w = _logistic_pieces(X, y, theta_hat)
    np.testing.assert_allclose(cv.grad_sum, g.sum(axis=0), rtol=1e-10)
    np.testing.assert_allclose(cv.hess_sum, -(X * w[:, None]).T @ X, rtol=1e-10)
    rng = np.random.default_rng(order)
    for _ in range(5):
        t0 = theta_hat + rng.normal(scale=0.2, size=3)
        t1 = t0 + rng.normal(scale=0.05, size=3)
        idx = rng.integers(0, X.shape[0], size=11)
        r = _loglik(X[idx], y[idx], t1) - _loglik(X[idx], y[idx], t0)
        r_hat = g[idx] @ (t1 - t0)
        if order == 2:
            a, a1 = X[idx] @ (t0 - theta_hat), X[idx] @ (t1 - theta_hat)
            r_hat += 0.5 * (-w[idx] * a1**2 + w[idx] * a**2)
        np.testing.assert_allclose(cv.remainder(t0, t1, idx), r - r_hat, rtol=1e-7, atol=1e-13)


@pytest.mark.parametrize("exact", [True, False])
def test_generic_pass_hessian_matches_analytic(setup, exact):
    """Autodiff Jacobian to rounding; central differences of the gradient to ~ε^(2/3)."""
    X, y, lik, theta_hat = setup
    data_pass = GenericPass(lik, exact_hessian=exact)
    for theta in (theta_hat, np.array([1.5, -4.0, 1e-4])):
        res = data_pass.full(theta)
        g, w = _logistic_pieces(X, y, theta)
        np.testing.assert_allclose(res.loglik, _loglik(X, y, theta).sum(), rtol=1e-12)
        np.testing.assert_allclose(res.grad, g.sum(axis=0), rtol=1e-10)
        hess = -(X * w[:, None]).T @ X
        np.testing.assert_allclose(res.hess, hess, rtol=1e-10 if exact else 1e-7,
                                   atol=1e-12 * np.abs(hess).max())
    assert data_pass.n_passes == 2


@pytest.mark.parametrize("order", [1, 2])
def test_estimate_plus_remainders_is_exact_difference(setup, order):
    X, y, lik, theta_hat = setup
    cv = TaylorControlVariate(lik, theta_hat, order)
    t0, t1 = theta_hat + 0.1, theta_hat - np.array([0.05, 0.2, 0.0])
    all_rows = np.arange(X.shape[0])
    exact = (_loglik(X, y, t1) - _loglik(X, y, t0)).sum()
    total = cv.estimate_sum(t0, t1) + cv.remainder(t0, t1, all_rows).sum()
    assert total == pytest.approx(exact, rel=1e-9)


def test_order_two_is_exact_for_gaussian_linear_model():
    X, y = glm_data(500, 3, "gaussian", seed=2)
    lik = SubsampledLikelihood(glm_model(X, y, "gaussian"))
    cv = TaylorControlVariate(lik, np.zeros(3), 2)
    xi = cv.remainder(np.ones(3), -np.ones(3), np.arange(500))
    assert np.max(np.abs(xi)) < 1e-9


@pytest.mark.parametrize("bad", [0, 3, None, 1.5, True, "2"])
def test_invalid_order_is_rejected(bad):
    with pytest.raises(ValueError, match="cv_order must be 1 or 2"):
        validate_cv_order(bad)


@pytest.mark.parametrize("family", ["logistic", "poisson", "probit", "gaussian"])
@pytest.mark.parametrize("order", [1, 2])
def test_glm_remainder_graph_equals_the_generic_one(family, order):
    """The small GLM graph of ξ_i and the directional-derivative graph agree on every row."""
    X, y = glm_data(300, 3, family, seed=5)
    lik = SubsampledLikelihood(glm_model(X, y, family))
    theta_hat = np.array([0.1, -0.2, 0.3])
    generic = TaylorControlVariate(lik, theta_hat, order)
    glm = TaylorControlVariate(lik, theta_hat, order, glm_terms=detect_glm_terms(lik))
    rng = np.random.default_rng(order)
    idx = np.arange(300, dtype=np.int64)
    # probit: both use log Φ(±η), but PyMC's normal_lcdf switches formulas at -1 and the two
    # graphs differentiate it along different paths (directional vs elementwise): 2e-7 apart
    atol = 1e-6 if family == "probit" else 1e-10
    for _ in range(5):
        t0, t1 = theta_hat + 0.3 * rng.normal(size=3), theta_hat + 0.3 * rng.normal(size=3)
        np.testing.assert_allclose(glm.remainder(t0, t1, idx), generic.remainder(t0, t1, idx),
                                   rtol=1e-7, atol=atol)


@pytest.mark.parametrize("family", ["student_t_scale", "logistic"])
def test_compiled_remainder_does_not_depend_on_the_reference_point(family, monkeypatch):
    """θ̂ enters the compiled ξ as an input: a constant θ̂ (a scale σ̂ folded into a fused
    loop's C code) made every new data set compile new C code however warm the cache. Each
    remainder compiled anew (the function cache would hand the second the first's graph)."""
    import re

    import pytensor

    from pymc_subsample.model import likelihood
    from pymc_subsample.model.location_scale import detect_location_scale_terms

    monkeypatch.setattr(likelihood, "compile_cached",
                        lambda inputs, outputs, name, mode, build, *rest: build())

    X, y = glm_data(300, 3, family, seed=5)
    lik = SubsampledLikelihood(glm_model(X, y, family))
    terms = detect_location_scale_terms(lik) or detect_glm_terms(lik)
    d = lik.dim
    printed = []
    for theta_hat in (np.full(d, 0.1), np.linspace(-0.3, 0.4, d)):
        cv = TaylorControlVariate(lik, theta_hat, 2, glm_terms=terms, tabulate=False)
        # the compiled graph as printed, without PyTensor's running names of temporaries
        printed.append(re.sub(r"'t\d+'", "", pytensor.printing.debugprint(cv._xi_fn,
                                                                            file="str")))
        # and the remainder is still that of this θ̂: zero at θ = θ' = θ̂ ± nothing
        idx = np.arange(300, dtype=np.int64)
        np.testing.assert_allclose(cv.remainder(theta_hat, theta_hat, idx), 0.0, atol=1e-12)
    assert printed[0] == printed[1]


def _terms_of(lik):
    from pymc_subsample.model.setup import glm_data_pass

    return glm_data_pass(lik, 2).terms


@pytest.mark.parametrize(("family", "order"), [
    *((f, 2) for f in ("logistic", "poisson", "poisson_log", "cloglog", "gaussian",
                       "gaussian_scale", "gamma_log", "gamma_log_scale", "negative_binomial",
                       "negative_binomial_scale", "student_t", "student_t_scale",
                       "student_t_nu")),
    ("logistic", 1), ("gaussian_scale", 1)])
def test_tabulated_remainder_equals_the_compiled_one(family, order):
    """The NumPy remainders from the table of per-row constants (no C compiled) are the
    graph's to rounding, at random points near and far from θ̂, on random rows (repeated ones
    included) and on one row. The graph runs in PyTensor's Python mode (the same graph as the
    C code, without compiling it for every family)."""
    X, y = glm_data(400, 3, family, seed=3)
    lik = SubsampledLikelihood(glm_model(X, y, family),
                               compile_kwargs={"mode": "FAST_COMPILE"})
    terms = _terms_of(lik)
    rng = np.random.default_rng(order)
    theta_hat = 0.1 * rng.normal(size=lik.dim)
    sums = (0.0, np.zeros(lik.dim), np.zeros((lik.dim, lik.dim)))
    table = TaylorControlVariate(lik, theta_hat, order, sums=sums, glm_terms=terms,
                                 tabulate=True)
    compiled = TaylorControlVariate(lik, theta_hat, order, sums=sums, glm_terms=terms,
                                    tabulate=False)
    assert type(table._xi_fn).__name__ == "TabulatedRemainder"
    for scale in (0.01, 0.3):
        for rows in (rng.integers(0, 400, 200), np.array([7])):
            rows = rows.astype(np.int64)
            t0 = theta_hat + scale * rng.normal(size=lik.dim)
            t1 = t0 + scale * rng.normal(size=lik.dim)
            want = compiled.remainder(t0, t1, rows)
            np.testing.assert_allclose(table.remainder(t0, t1, rows), want, rtol=1e-9,
                                       atol=1e-12 * (1.0 + np.abs(want).max()))


def test_tabulated_remainder_is_refused_where_it_does_not_apply(monkeypatch):
    """Beyond the table's size, or for probit (SciPy's log Φ is not the model's to rounding),
    the compiled graph is used, and asking for the table says so."""
    from pymc_subsample.model import row_table

    X, y = glm_data(400, 3, "logistic", seed=3)
    lik = SubsampledLikelihood(glm_model(X, y, "logistic"))
    terms = detect_glm_terms(lik)
    monkeypatch.setattr(row_table, "TABLE_NUMBERS", 400 * 5)  # one column short
    sums = (0.0, np.zeros(lik.dim), np.zeros((lik.dim, lik.dim)))
    cv = TaylorControlVariate(lik, np.zeros(3), 2, sums=sums, glm_terms=terms)
    assert type(cv._xi_fn).__name__ != "TabulatedRemainder"
    with pytest.raises(ValueError, match="cannot be tabulated"):
        TaylorControlVariate(lik, np.zeros(3), 2, sums=sums, glm_terms=terms, tabulate=True)
    probit = SubsampledLikelihood(glm_model(*glm_data(400, 3, "probit", seed=3), "probit"))
    assert not row_table.tabulable(probit, detect_glm_terms(probit))


def test_tabulated_remainder_gives_way_to_the_compiled_one(monkeypatch):
    """After COMPILE_AFTER_CALLS calls the compiled graph takes over, with the same values."""
    from pymc_subsample.model import control_variates

    monkeypatch.setattr(control_variates, "COMPILE_AFTER_CALLS", 2)
    X, y = glm_data(400, 3, "logistic", seed=3)
    lik = SubsampledLikelihood(glm_model(X, y, "logistic"))
    sums = (0.0, np.zeros(lik.dim), np.zeros((lik.dim, lik.dim)))
    cv = TaylorControlVariate(lik, np.zeros(3), 2, sums=sums, glm_terms=detect_glm_terms(lik))
    rows, t0, t1 = np.arange(0, 400, 3, dtype=np.int64), np.full(3, 0.2), np.full(3, -0.1)
    values = [cv.remainder(t0, t1, rows) for _ in range(4)]
    assert type(cv._xi_fn).__name__ == "Function"
    np.testing.assert_allclose(values[-1], values[0], rtol=1e-9, atol=1e-14)


def test_tabulated_remainder_pickles_without_its_table():
    """The table is N rows: a worker process that receives the step fills its own (one pass
    at θ̂ over the data it has) instead of a copy in the message, with the same numbers."""
    import cloudpickle

    X, y = glm_data(4000, 3, "logistic", seed=3)
    lik = SubsampledLikelihood(glm_model(X, y, "logistic"))
    sums = (0.0, np.zeros(lik.dim), np.zeros((lik.dim, lik.dim)))
    cv = TaylorControlVariate(lik, np.full(3, 0.1), 2, sums=sums,
                              glm_terms=detect_glm_terms(lik), tabulate=True)
    rows, t0, t1 = np.arange(0, 4000, 7, dtype=np.int64), np.full(3, 0.2), np.full(3, -0.1)
    want = cv.remainder(t0, t1, rows)
    table_bytes = sum(a.nbytes for pair in cv._xi_fn.tables for a in pair)
    message = cloudpickle.dumps(cv._xi_fn)
    assert len(message) < len(cloudpickle.dumps(lik)) + table_bytes / 4
    clone = cloudpickle.loads(message)
    assert clone.tables is None
    np.testing.assert_array_equal(clone(t0, t1, rows), want)
