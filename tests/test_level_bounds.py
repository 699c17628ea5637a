"""Rows that touch one level of a grouping factor: the frame's levels-first order and the level
bound (``pymc_subsample.bounds.levels``, docs/methods/mhss.md "Rows that touch one level").

The bound ``|ξ_i| ≤ B_i(θ, θ')`` is checked on 10⁴ random pairs against remainders computed
here from the logistic and Poisson log-link formulas, on rows with one level, none and two;
its total against the sum of its rates; its draws against a Poisson process of those rates;
and, on a random-intercept model, against the model's own compiled remainders.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from scipy.special import expit

import pymc_subsample as pms
from pymc_subsample.bounds import LevelBound, LevelRows, family, level_rows
from pymc_subsample.bounds.levels import LEVEL_WEIGHT, SHARE_MARGIN
from pymc_subsample.datasets import random_effects_data, random_effects_model
from pymc_subsample.model.frame import LaplaceFrame
from tests.make_glm_references import RE_GROUPS
from tests.pairs import assert_poisson_counts, poisson_process_counts

N_LEVELS, N_DENSE, N_ROWS = 30, 5, 2000
REGION = 5.0


def _arrowhead(rng, g, d):
    """A random-intercept precision (levels uncoupled, a dense block coupled to all), its
    coordinates shuffled, and the shuffle."""
    p = np.zeros((g + d, g + d))
    p[:g, :g] = np.diag(rng.uniform(50.0, 200.0, g))
    a = rng.normal(size=(d, d))
    p[g:, g:] = a @ a.T + g * 10.0 * np.eye(d)
    p[g:, :g] = rng.normal(size=(d, g))
    p[:g, g:] = p[g:, :g].T
    perm = rng.permutation(g + d)
    return p[np.ix_(perm, perm)], perm


def test_frame_puts_levels_first_and_keeps_whitened_rows_sparse():
    rng = np.random.default_rng(0)
    g, d = 12, 4
    precision, perm = _arrowhead(rng, g, d)
    frame = LaplaceFrame(rng.normal(size=g + d), precision)
    assert frame.n_levels == g
    r = frame.chol_precision
    np.testing.assert_allclose(r @ r.T, precision, rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(frame.cov, np.linalg.inv(precision), rtol=1e-9, atol=1e-12)
    theta = rng.normal(size=g + d)
    np.testing.assert_allclose(frame.unwhiten(frame.whiten(theta)), theta, rtol=1e-12)
    grad = rng.normal(size=g + d)
    np.testing.assert_allclose(frame.newton_step(grad), np.linalg.solve(precision, grad))
    # a row touching level 3 and the dense block: whitened, non-zero on one level only
    where = np.argsort(perm)  # where each original coordinate went
    x = np.zeros(g + d)
    x[where[3]] = 1.0
    x[where[g:]] = rng.normal(size=d)
    xt = frame.whiten_rows(x[None, :])[0]
    assert np.count_nonzero(xt[:g]) == 1
    np.testing.assert_allclose(xt @ frame.whiten(theta), x @ (theta - frame.theta_hat))


def test_dense_precision_keeps_the_natural_order():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(6, 6))
    precision = a @ a.T + 6 * np.eye(6)
    frame = LaplaceFrame(np.zeros(6), precision)
    assert frame.n_levels == 0
    np.testing.assert_array_equal(frame.order, np.arange(6))
    np.testing.assert_allclose(frame.chol_precision,
                               scipy.linalg.cholesky(precision, lower=True))


def _rows(rng, order, family_name):
    """Whitened rows with one level (80 %), none (10 %) or two (10 %), their η̂, y and the
    level bound built from them."""
    n, g = N_ROWS, N_LEVELS
    xt = np.zeros((n, g + N_DENSE))
    xt[:, g:] = rng.normal(size=(n, N_DENSE)) * 10 ** rng.uniform(-3, -1, size=(n, 1))
    kind = rng.uniform(size=n)
    one, two = kind < 0.8, kind >= 0.9
    xt[one, rng.integers(0, g, one.sum())] = 10 ** rng.uniform(-2.5, -1, one.sum())
    for level in (rng.integers(0, g // 2, two.sum()), rng.integers(g // 2, g, two.sum())):
        xt[np.flatnonzero(two), level] = 10 ** rng.uniform(-2.5, -1, two.sum())
    eta_hat = rng.normal(size=n)
    fam = family(family_name)
    norms = np.linalg.norm(xt, axis=1)
    if family_name == "bernoulli_logit":
        y = rng.binomial(1, expit(eta_hat)).astype(float)
        sup = fam.row_sup(order, norms, y)
    else:
        y = rng.poisson(np.exp(eta_hat)).astype(float)
        sup = fam.row_sup(order, norms, y, eta_hat=eta_hat, radius=REGION)
    rows = LevelRows(*level_rows(order, sup, xt, g), n_levels=g, order=order)
    return xt, eta_hat, y, LevelBound(rows, g + N_DENSE)


def _remainders(family_name, order, eta_hat, y, a, a_new):
    """ξ_i from the family's formulas: f at both points minus its Taylor polynomial at η̂."""
    if family_name == "bernoulli_logit":
        def f(eta):
            return y * eta - np.logaddexp(0.0, eta)
        p = expit(eta_hat)
        f1, f2 = y - p, -p * (1 - p)
    else:
        def f(eta):
            return y * eta - np.exp(eta)
        f1, f2 = y - np.exp(eta_hat), -np.exp(eta_hat)
    taylor = f1 * (a_new - a) + (0.5 * f2 * (a_new**2 - a**2) if order == 2 else 0.0)
    return f(eta_hat + a_new) - f(eta_hat + a) - taylor


@pytest.mark.parametrize("family_name", ["bernoulli_logit", "poisson_log"])
@pytest.mark.parametrize("order", [1, 2])
def test_level_bound_holds_on_random_pairs(order, family_name):
    rng = np.random.default_rng([order, len(family_name)])
    xt, eta_hat, y, bound = _rows(rng, order, family_name)
    dim = xt.shape[1]
    worst = 0.0
    for k in range(10_000):
        size = 0.05 * 200 ** (k / 9_999)  # 0.05 to 10 sds
        phi = size * rng.standard_normal(dim) / np.sqrt(dim)
        phi_new = phi + size * rng.uniform(0.01, 1.5) * rng.standard_normal(dim) / np.sqrt(dim)
        if family_name == "poisson_log":  # the region's constants hold in the ball only
            phi, phi_new = (v * min(1.0, REGION / np.linalg.norm(v)) for v in (phi, phi_new))
        rates = bound.rates(phi, phi_new)
        b = rates.row_rates(np.arange(N_ROWS))
        xi = _remainders(family_name, order, eta_hat, y, xt @ phi, xt @ phi_new)
        assert np.all(np.abs(xi) <= b * (1 + 1e-9) + 1e-13), k
        worst = max(worst, float(np.max(np.abs(xi) / b)))
        if k % 1000 == 0:
            # Λ from the per-level moments is the sum of the rates; the envelope dominates them
            np.testing.assert_allclose(rates.expected, b.sum(), rtol=1e-8)
            assert np.all(b <= bound.sampler.weights * rates.envelope / bound.sampler.total
                          * (1 + 1e-12))
            swapped = bound.rates(phi_new, phi)
            np.testing.assert_allclose(swapped.row_rates(np.arange(N_ROWS)), b, rtol=1e-12)
    assert worst > 0.05  # the bound is not loose by orders of magnitude


def test_level_rates_draw_a_poisson_process_of_the_row_rates():
    rng = np.random.default_rng(7)
    _, _, _, bound = _rows(rng, 2, "bernoulli_logit")
    dim = N_LEVELS + N_DENSE
    phi = rng.standard_normal(dim)
    phi_new = 0.7 * phi + np.sqrt(0.51) * rng.standard_normal(dim)
    counts, expected = poisson_process_counts(bound.rates(phi, phi_new), N_ROWS,
                                              np.random.default_rng(8))
    # Poisson counts: on the rows, and on the levels
    assert_poisson_counts(counts, expected, least=20)
    assert_poisson_counts(np.bincount(bound.category, counts),
                          np.bincount(bound.category, expected), least=20)


@pytest.fixture(scope="module")
def random_intercepts():
    data = random_effects_data(12_000, 3, RE_GROUPS, seed=5)
    with random_effects_model(*data, groups=RE_GROUPS) as model:
        step = pms.MHSS()
    return model, step


def test_random_intercepts_get_the_level_bound(random_intercepts):
    _, step = random_intercepts
    assert step.frame.n_levels == RE_GROUPS
    assert isinstance(step.rate_bound, LevelBound)
    profile = step.setup_profile
    assert profile["rate_bound_rows"] < profile["corollary2_rows"] / 10


def test_level_bound_holds_for_the_models_own_remainders(random_intercepts):
    """The compiled control variates' ξ_i on 2000 random rows, 200 pairs from 0.1 to 6 sds."""
    model, step = random_intercepts
    rng = np.random.default_rng(11)
    lik, frame = step.likelihood, step.frame
    rows = np.sort(rng.choice(lik.n_rows, 2000, replace=False)).astype(np.int64)
    for k in range(200):
        size = 0.1 * 60 ** (k / 199)
        phi = size * rng.standard_normal(lik.dim) / np.sqrt(lik.dim)
        phi_new = phi + size * rng.uniform(0.05, 1.0) * rng.standard_normal(lik.dim) / np.sqrt(
            lik.dim)
        xi = step.control_variate.remainder(frame.unwhiten(phi), frame.unwhiten(phi_new), rows)
        b = step.rate_bound.rates(phi, phi_new).row_rates(rows)
        assert np.all(np.abs(xi) <= b * (1 + 1e-9) + 1e-12), k


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_level_rate_polynomial_is_the_product_of_its_factors(order):
    """``P_k(ρ)`` of each category against ``H(ρ) Σ_j A(ρ)^j A'(ρ)^{k−j}`` from the linear
    factors of the module docstring (``u = ‖·_D‖/w_D``, ``v = |·_k|/w_K``), at random ``ρ``,
    and the envelope against its factors' largest values."""
    rng = np.random.default_rng(order)
    xt, _, _, _ = _rows(rng, 1, "bernoulli_logit")
    g, dim = N_LEVELS, xt.shape[1]
    sup = np.full(N_ROWS, 0.25)
    bound = LevelBound(LevelRows(*level_rows(order, sup, xt, g), n_levels=g, order=order), dim)
    phi, phi_new = rng.standard_normal(dim), rng.standard_normal(dim)
    coefficients, envelope = bound.coefficients(phi, phi_new)
    rho = rng.uniform(size=7)
    points = (phi, phi_new, phi_new - phi)
    u = [np.linalg.norm(vec[g:]) / bound.dense_weight for vec in points]
    v = [np.abs(vec[:g]) / LEVEL_WEIGHT for vec in points]
    for k in range(g):
        ends = [max(ui, vi[k]) for ui, vi in zip(u, v, strict=True)]
        a, b, h = ((vi[k] + SHARE_MARGIN * top + (ui - vi[k]) * rho)
                   for ui, vi, top in zip(u, v, ends, strict=True))
        expected = h * sum(a**j * b ** (order - j) for j in range(order + 1))
        got = np.polynomial.polynomial.polyval(rho, coefficients[k])
        np.testing.assert_allclose(got, expected, rtol=1e-12)
        top = [e * (1 + 2 * SHARE_MARGIN) for e in ends]
        assert envelope[k] == pytest.approx(
            top[2] * sum(top[0] ** j * top[1] ** (order - j) for j in range(order + 1)),
            rel=1e-12)
