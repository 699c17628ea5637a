"""MHSS's moves of the levels (``pymc_subsample.steps.level_moves``; docs/methods/mhss.md
"Moves of the levels").

The per-level rates against remainders computed from the logistic formula on random pairs that
move the levels only (bound, symmetry, totals), their draws against Poisson processes of those
rates level by level; the per-level kernel's acceptance against the exact MHSS acceptance
probability; the levels' prior split and its refusals; the prior-only move of the group scale
against its exact conditional. The posterior of the three moves against NUTS is
``tests/test_many_levels.py::test_many_levels_match_nuts``.
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
import pytest
from scipy.special import expit
from scipy.stats import poisson

import pymc_subsample as pms
from pymc_subsample.bounds import LevelBound, LevelRows, family, level_rows
from pymc_subsample.datasets import random_effects_data, random_effects_model
from pymc_subsample.kernels.mhss import mhss_accept_levels
from pymc_subsample.model.levels import LevelPrior, prior_derivatives, scale_coordinate
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.model.passes import GLMPass
from pymc_subsample.steps.hyper_moves import HyperMove
from tests.pairs import (
    assert_level_rates_consistent,
    assert_poisson_counts,
    poisson_process_counts,
    synthetic_level_rows,
)

N_LEVELS, N_DENSE, N_ROWS = 30, 5, 2000


def _level_rows(rng, order):
    """Whitened rows with one level (90 %) or none, η̂, y and their level bound (logistic)."""
    g = N_LEVELS
    xt, eta_hat, y = synthetic_level_rows(rng, N_ROWS, g, N_DENSE)
    sup = family("bernoulli_logit").row_sup(order, np.linalg.norm(xt, axis=1), y)
    rows = LevelRows(*level_rows(order, sup, xt, g), n_levels=g, order=order)
    return xt, eta_hat, y, LevelBound(rows, g + N_DENSE)


def _remainders(order, eta_hat, y, a, a_new):
    def f(eta):
        return y * eta - np.logaddexp(0.0, eta)
    p = expit(eta_hat)
    taylor = (y - p) * (a_new - a)
    if order == 2:
        taylor = taylor + 0.5 * (-p * (1 - p)) * (a_new**2 - a**2)
    return f(eta_hat + a_new) - f(eta_hat + a) - taylor


def _level_pair(rng, size, dim):
    phi = size * rng.standard_normal(dim) / math.sqrt(dim) * 3.0
    phi_new = phi.copy()
    phi_new[:N_LEVELS] += size * rng.uniform(0.05, 2.0) * rng.standard_normal(N_LEVELS)
    return phi, phi_new


@pytest.mark.parametrize("order", [1, 2])
def test_level_move_rates_bound_the_remainders_on_random_pairs(order):
    """Pairs that move the levels only, 0.05 to 5 sds: ``|ξ_i| ≤ B_i``, ``B_i`` symmetric in
    the pair, zero on rows of no level, ``Λ_k = Σ_{i∈k} B_i``."""
    rng = np.random.default_rng(order)
    xt, eta_hat, y, bound = _level_rows(rng, order)
    dim, every = xt.shape[1], np.arange(N_ROWS)
    worst = 0.0
    for k in range(3000):
        phi, phi_new = _level_pair(rng, 0.05 * 100 ** (k / 2999), dim)
        rates = bound.level_rates(phi, phi_new)
        coefficients, _ = bound.coefficients(phi, phi_new)
        b = bound.sampler.weights * bound.polynomial(coefficients, every)
        xi = _remainders(order, eta_hat, y, xt @ phi, xt @ phi_new)
        assert np.all(np.abs(xi) <= b * (1 + 1e-9) + 1e-13), k
        worst = max(worst, float(np.max(np.abs(xi) / np.where(b > 0, b, np.inf))))
        assert_level_rates_consistent(bound, rates, phi, phi_new, b, N_LEVELS,
                                      totals=k % 500 == 0)
        if k % 500 == 0:
            back, _ = bound.coefficients(phi_new, phi)
            np.testing.assert_allclose(bound.polynomial(back, every),
                                       bound.polynomial(coefficients, every), rtol=1e-12)
    assert worst > 0.05


def test_level_move_rates_draw_a_poisson_process_per_level():
    rng = np.random.default_rng(3)
    xt, _, _, bound = _level_rows(rng, 2)
    phi, phi_new = _level_pair(rng, 1.0, xt.shape[1])
    rates = bound.level_rates(phi, phi_new)
    coefficients, _ = bound.coefficients(phi, phi_new)
    b = bound.sampler.weights * bound.polynomial(coefficients, np.arange(N_ROWS))
    chosen = np.arange(N_LEVELS) % 3 != 0  # a mask: the other levels draw nothing
    assert not rates.fallback.any()
    counts, reps = np.zeros(N_ROWS), 4000
    for _ in range(reps):
        idx, level, kept = rates.draw(rng, chosen)
        np.testing.assert_array_equal(level, bound.category[idx])
        np.testing.assert_allclose(kept, b[idx], rtol=1e-12)
        counts += np.bincount(idx, minlength=N_ROWS)
    in_chosen = (bound.category < N_LEVELS) & chosen[np.minimum(bound.category, N_LEVELS - 1)]
    assert counts[~in_chosen].sum() == 0
    assert_poisson_counts(counts[in_chosen], b[in_chosen] * reps, least=20)
    per_level = np.bincount(bound.category[in_chosen], counts[in_chosen], N_LEVELS)
    np.testing.assert_array_equal(per_level == 0, ~chosen)
    assert_poisson_counts(per_level[chosen], rates.expected[chosen] * reps, least=10)


class _StubRates:
    """Every level the same two rows, rates ``lam`` (the kernel's per-level interface)."""

    def __init__(self, n_levels, lam, fallback=False):
        self.lam = np.asarray(lam)
        self.expected = np.full(n_levels, self.lam.sum())
        self.fallback = np.full(n_levels, fallback)

    def draw(self, rng, levels):
        counts = rng.poisson(np.where(levels[:, None], self.lam[None, :], 0.0))
        level, row = np.nonzero(counts)
        level, row = np.repeat(level, counts[level, row]), np.repeat(row, counts[level, row])
        return 2 * level + row, level, self.lam[row]

    def rows_of(self, levels):
        level = np.repeat(np.flatnonzero(levels), 2)
        return 2 * level + np.tile([0, 1], level.size // 2), level


def _exact_acceptance(xi, lam):
    """``E[min(1, Π_i (φ'_i/φ_i)^{B_i})]``, ``B_i ~ Poisson(φ_i)``, by enumeration."""
    phi, phi_rev = lam - np.maximum(xi, 0), lam - np.maximum(-xi, 0)
    total = 0.0
    for b0 in range(40):
        for b1 in range(40):
            ratio = (phi_rev[0] / phi[0]) ** b0 * (phi_rev[1] / phi[1]) ** b1
            total += poisson.pmf(b0, phi[0]) * poisson.pmf(b1, phi[1]) * min(1.0, ratio)
    return total


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_level_kernel_accepts_with_the_mhss_probability(sign):
    """4000 levels at once, each two rows with ``ξ = ±(0.3, −0.5)``: the share accepted is
    the exact MHSS acceptance probability (whose forward/backward ratio is ``e^{Σξ}``)."""
    xi, lam, g = sign * np.array([0.3, -0.5]), np.array([0.8, 0.6]), 4000
    exact = _exact_acceptance(xi, lam)
    if sign > 0:  # detailed balance of the two directions, on the enumeration itself
        assert exact / _exact_acceptance(-xi, lam) == pytest.approx(math.exp(xi.sum()),
                                                                     rel=1e-9)
    rng_index, rng_accept = np.random.default_rng(1), np.random.default_rng(2)
    info = mhss_accept_levels(np.zeros(g), _StubRates(g, lam), remainder=lambda idx: xi[idx % 2],
                              rng_index=rng_index, rng_accept=rng_accept)
    share = info.accepted.mean()
    assert abs(share - exact) < 4.5 * math.sqrt(exact * (1 - exact) / g)
    assert info.clipped == 0 and info.fallbacks == 0
    # the fallback sums ξ over the level's rows: acceptance min(1, e^{Σξ})
    info = mhss_accept_levels(np.zeros(g), _StubRates(g, lam, fallback=True),
                              remainder=lambda idx: xi[idx % 2], rng_index=rng_index,
                              rng_accept=rng_accept)
    p = min(1.0, math.exp(xi.sum()))
    assert info.n_data == 2 * g and info.fallbacks == g
    assert abs(info.accepted.mean() - p) < 4.5 * math.sqrt(p * (1 - p) / g) + 1e-12
    # stage 1 rejects before any row is read
    info = mhss_accept_levels(np.full(g, -np.inf), _StubRates(g, lam),
                              remainder=lambda idx: xi[idx % 2], rng_index=rng_index,
                              rng_accept=rng_accept)
    assert not info.accepted.any() and info.n_data == 0


@pytest.fixture(scope="module")
def levels_model():
    return random_effects_model(*random_effects_data(6000, 3, 80, seed=2), groups=80)


def test_level_prior_splits_the_prior(levels_model):
    lik = SubsampledLikelihood(levels_model)
    layout = GLMPass(lik).levels
    prior = LevelPrior.build(lik, layout)
    assert prior is not None
    rng = np.random.default_rng(0)
    theta = rng.normal(scale=0.5, size=lik.dim)
    terms = prior.terms(theta)
    assert terms.shape == (80,)
    # moving one level changes its own term only, by the prior's difference
    moved = theta.copy()
    moved[layout.start + 7] += 0.3
    change = prior.terms(moved) - terms
    assert np.count_nonzero(change) == 1
    assert change[7] == pytest.approx(lik.logp0(moved) - lik.logp0(theta), rel=1e-10)
    first, second = prior.derivatives(theta)
    h = 1e-5
    up, down = theta.copy(), theta.copy()
    up[layout.start :layout.stop] += h
    down[layout.start :layout.stop] -= h
    np.testing.assert_allclose(first, (prior.terms(up) - prior.terms(down)) / (2 * h), rtol=1e-6)
    s = np.exp(theta[layout.start - 1])  # u ~ N(0, s): ∂²/∂u² = −1/s²
    np.testing.assert_allclose(second, -1.0 / s**2, rtol=1e-10)


@pytest.mark.parametrize("which", ["scale", "whole variables, reordered", "part of one"])
def test_prior_derivatives_in_a_few_coordinates(levels_model, which):
    """``(log p0, ∇_H log p0, ∇²_H log p0)`` against differences of ``log p0``: in the value
    variables when ``H`` is whole variables (any order), over all of ``θ`` when it splits one.
    The graphs are what is checked: compiled without C code (seconds less a case)."""
    lik = SubsampledLikelihood(levels_model, compile_kwargs={"mode": "FAST_COMPILE"})
    layout = GLMPass(lik).levels
    scale = layout.start - 1  # b (3), log s, u
    coords = {"scale": [scale], "whole variables, reordered": [scale, 2, 0, 1],
              "part of one": [1, scale]}[which]
    rng = np.random.default_rng(3)
    theta = rng.normal(scale=0.5, size=lik.dim)
    value, grad, hess = prior_derivatives(lik, np.array(coords))(theta)
    assert float(value) == pytest.approx(lik.logp0(theta), rel=1e-12)
    h = 1e-4

    def gradient(at):
        out = np.empty(len(coords))
        for p, j in enumerate(coords):
            up, down = at.copy(), at.copy()
            up[j] += h
            down[j] -= h
            out[p] = (lik.logp0(up) - lik.logp0(down)) / (2 * h)
        return out

    np.testing.assert_allclose(grad, gradient(theta), rtol=1e-6, atol=1e-6)
    for p, j in enumerate(coords):
        up, down = theta.copy(), theta.copy()
        up[j] += h
        down[j] -= h
        np.testing.assert_allclose(hess[:, p], (gradient(up) - gradient(down)) / (2 * h),
                                   rtol=1e-4, atol=1e-4)


def _model_with_level_prior(kind):
    rng = np.random.default_rng(1)
    n, g = 3000, 70
    group = rng.integers(0, g, n)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 5.0)
        s = pm.HalfNormal("s", 1.0)
        if kind == "mvnormal":
            cov = 0.5 * np.eye(g) + 0.5
            u = pm.MvNormal("u", mu=np.zeros(g), cov=cov)
        else:
            u = pm.Normal("u", 0.0, s, shape=g)
            pm.Potential("sum_to_zero", pm.logp(pm.Normal.dist(0.0, 0.01), u.sum()))
        pm.Bernoulli("y", logit_p=b + u[pm.Data("g", group)], observed=rng.integers(0, 2, n))
    return model


@pytest.mark.parametrize("kind", ["mvnormal", "potential"])
def test_coupled_level_priors_have_no_level_moves(kind):
    """A prior that couples the levels has no per-level split: the joint move (None), and
    ``level_moves=True`` says why."""
    model = _model_with_level_prior(kind)
    lik = SubsampledLikelihood(model)
    layout = GLMPass(lik).levels
    assert LevelPrior.build(lik, layout) is None


@pytest.mark.parametrize("kind, reason", [
    ("normal", None), ("student_t", "not Normal"), ("mean", "mean is not the constant 0"),
    ("product", "not one scalar variable"), ("positive", "not sampled on the log scale")])
def test_scale_move_applies_to_normal_levels_around_zero(kind, reason):
    """The scale move's coordinate (``log s`` of ``u ~ Normal(0, s)``) or why there is none."""
    rng = np.random.default_rng(1)
    n, g = 1000, 70
    group = rng.integers(0, g, n)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 5.0)
        s = (pm.Uniform("s", 0.0, 5.0, default_transform=pm.distributions.transforms.Interval(
            0.0, 5.0)) if kind == "positive" else pm.HalfNormal("s", 1.0))
        if kind == "student_t":
            u = pm.StudentT("u", nu=4.0, mu=0.0, sigma=s, shape=g)
        else:
            mu = pm.Normal("m", 0.0, 1.0) if kind == "mean" else 0.0
            u = pm.Normal("u", mu, 2.0 * s if kind == "product" else s, shape=g)
        pm.Bernoulli("y", logit_p=b + u[pm.Data("g", group)], observed=rng.integers(0, 2, n))
    lik = SubsampledLikelihood(model)
    layout = GLMPass(lik).levels
    hyper = np.array([j for j in range(lik.dim) if not layout.start <= j < layout.stop
                      and j != 0])  # every fixed coordinate but b's
    found = scale_coordinate(lik, layout, hyper)
    if reason is None:
        assert found == lik.unravel(np.arange(lik.dim, dtype=float))["s_log__"]
    else:
        assert isinstance(found, str) and reason in found, found


def test_hyper_move_samples_the_scales_conditional():
    """The prior-only move of ``λ = log s`` given 200 levels (``u ~ N(0, s)``, ``s`` HalfNormal
    with its log Jacobian): 8,000 moves against the conditional by quadrature."""
    rng = np.random.default_rng(5)
    u = rng.normal(0.0, 0.4, 200)
    a, g = float(u @ u), u.size

    def log_target(lam):
        return -0.5 * a * np.exp(-2 * lam) - g * lam - 0.5 * np.exp(2 * lam) + lam

    def derivatives(theta):
        lam = theta[0]
        grad = a * math.exp(-2 * lam) - g - math.exp(2 * lam) + 1
        hess = -2 * a * math.exp(-2 * lam) - 2 * math.exp(2 * lam)
        return log_target(lam), np.array([grad]), np.array([[hess]])

    move = HyperMove(derivatives, np.array([0]), np.array([-3.0]))  # Newton from far away
    theta, draws, accepted = np.array([0.0]), np.empty(8_000), 0
    r1, r2 = np.random.default_rng(6), np.random.default_rng(7)
    for k in range(draws.size):
        theta, ok = move.move(theta, log_target(theta[0]), r1, r2)
        draws[k], accepted = theta[0], accepted + ok
    grid = np.linspace(-3.0, 1.0, 20_001)
    w = np.exp(log_target(grid) - log_target(grid).max())
    mean = float(np.sum(grid * w) / w.sum())
    sd = float(np.sqrt(np.sum((grid - mean) ** 2 * w) / w.sum()))
    assert accepted / draws.size > 0.9
    assert abs(draws[1000:].mean() - mean) < 4.5 * sd / math.sqrt(draws.size / 2)
    assert draws[1000:].std() == pytest.approx(sd, rel=0.05)


def test_category_rates_draw_a_poisson_process_of_any_move():
    """The fixed block's rates (any pair), drawn category by category: a Poisson process of
    the rates ``B_i`` of :meth:`LevelBound.rates`, on rows of a level and of none."""
    rng = np.random.default_rng(9)
    xt, _, _, bound = _level_rows(rng, 2)
    dim = xt.shape[1]
    phi = rng.standard_normal(dim)
    phi_new = 0.8 * phi + 0.6 * rng.standard_normal(dim)
    rates = bound.category_rates(phi, phi_new)
    b = bound.rates(phi, phi_new).row_rates(np.arange(N_ROWS))
    np.testing.assert_allclose(rates.row_rates(np.arange(N_ROWS)), b, rtol=1e-12)
    assert rates.expected == pytest.approx(b.sum(), rel=1e-8)
    counts, expected = poisson_process_counts(rates, N_ROWS, rng, reps=5000)
    assert_poisson_counts(counts, expected, least=20)
    none = bound.category == N_LEVELS
    assert abs(counts[none].sum() - expected[none].sum()) < 4.5 * math.sqrt(expected[none].sum())


@pytest.fixture(scope="module")
def levels_step(levels_model):
    with levels_model:
        step = pms.MHSS()
    assert step.level_moves is not None and step.hyper_move is not None
    return step


def _eta_hat(step):
    """``η̂_i`` of the 6000 rows of :func:`levels_model` from ``θ̂``, and the data."""
    X, group, _ = random_effects_data(6000, 3, 80, seed=2)
    point = step.likelihood.unravel(step.theta_hat)
    return X @ point["b"] + point["u"][group], X, group


def test_level_third_sums_are_the_rows_third_derivatives(levels_step):
    """``T_k``, ``V_k`` from one more pass (a difference of the per-level Hessian sums) against
    ``Σ_{i∈k} f‴(η̂_i)`` and ``Σ_{i∈k} f‴(η̂_i) x_i`` of the logistic formula."""
    eta, X, group = _eta_hat(levels_step)
    p = expit(eta)
    third = -p * (1 - p) * (1 - 2 * p)
    t_sum, v_sum = levels_step.proposal._third
    np.testing.assert_allclose(t_sum, np.bincount(group, third, minlength=80),
                               rtol=1e-3, atol=1e-3)
    expected = np.stack([np.bincount(group, third * X[:, j], minlength=80)
                         for j in range(3)], axis=1)
    np.testing.assert_allclose(v_sum, expected, rtol=1e-3, atol=1e-3)


def test_fixed_block_proposal_with_the_cubic_is_a_fixed_pcn_of_the_move(levels_step):
    """The fixed block's proposal with its cubic shift, from points whose scale is far from
    ``θ̂``'s: it holds ``θ_H`` and the levels' offsets ``v``; the reverse move from ``θ'``
    builds the same Gaussian, so ``log q(θ|θ') − log q(θ'|θ)`` is the returned
    ``log g(b) − log g(b')``; and the shift is not zero (it moves the mean)."""
    step = levels_step
    prop, frame = step.proposal, step.frame
    hyper, moved, lv = step.hyper_move.coordinates, prop._moved, prop._levels
    rng = np.random.default_rng(11)
    shifts = []
    tuned = prop.parameter  # the fixture is shared: put ρ back after
    try:
        _check_cubic_pcn(step, prop, frame, hyper, moved, lv, rng, shifts)
    finally:
        prop.parameter = tuned
    assert max(shifts) > 0.05


def _check_cubic_pcn(step, prop, frame, hyper, moved, lv, rng, shifts):
    for k in range(40):
        prop.parameter = (0.0, 0.5, 0.9)[k % 3]
        theta = step.theta_hat + rng.normal(scale=0.05, size=step.theta_hat.size)
        theta[lv] += rng.normal(scale=0.4, size=theta[lv].size)  # the levels off û
        theta[hyper] += rng.uniform(-0.8, 0.8)
        phi_new, log_ratio = prop.propose(rng, frame.whiten(theta))
        theta_new = frame.unwhiten(phi_new)
        np.testing.assert_allclose(theta_new[hyper], theta[hyper], rtol=1e-12)

        def gaussian(at):
            shear, mean, chol = prop.gaussian(at)
            shift = prop.cubic_shift(at, shear, mean, chol)
            return shear, mean + shift, chol, shift

        shear, mean, chol, shift = gaussian(theta)
        shear2, mean2, chol2, _ = gaussian(theta_new)
        np.testing.assert_allclose(mean2, mean, rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(chol2, chol, rtol=1e-10)
        # v = δ_L + shear δ_b is held
        d, d_new = theta - step.theta_hat, theta_new - step.theta_hat
        np.testing.assert_allclose(d_new[lv] + shear @ d_new[moved], d[lv] + shear @ d[moved],
                                   rtol=1e-8, atol=1e-12)
        rho = prop.rho
        if rho == 0.0:
            continue

        def log_q(to, frm, chol=chol, mean=mean, rho=rho):
            # pCN: N(m + ρ(frm − m), (1 − ρ²) S^{-1}) in δ_b
            w = chol.T @ (to - mean - rho * (frm - mean))
            return -0.5 * float(w @ w) / (1 - rho**2)

        b, b_new = d[moved], d_new[moved]
        assert log_q(b, b_new) - log_q(b_new, b) == pytest.approx(log_ratio, abs=1e-8)
        shifts.append(float(np.linalg.norm(chol.T @ shift)))


def test_rows_point_bounds_the_remainders_with_the_scale_far_away(levels_step):
    """The level bound read at :meth:`LevelMoves.rows_phi` (the scale put at ``θ̂``): on random
    pairs whose scale is far from ``θ̂``'s, fixed-block pairs and level pairs, ``B_i`` bounds
    every row's remainder, is symmetric in the pair, and expects fewer rows than at ``φ``;
    for level pairs the sweep's per-level rates are those rows' rates."""
    step = levels_step
    moves, bound, frame = step.level_moves, step.rate_bound, step.frame
    hyper, g = step.hyper_move.coordinates, moves.n_levels
    every = np.arange(step.likelihood.n_rows)
    rng = np.random.default_rng(12)
    fewer = 0
    for k in range(60):
        theta = step.theta_hat + rng.normal(scale=0.15, size=step.theta_hat.size)
        theta[hyper] += rng.uniform(-1.0, 1.0)
        theta_new = theta.copy()
        if k % 2:  # the levels only, as a sweep moves them
            theta_new[moves._levels] += rng.normal(scale=0.3, size=g)
        else:  # every coordinate, the scale too
            theta_new += rng.normal(scale=0.05, size=theta.size)
            theta_new[hyper] += rng.normal(scale=0.3)
        phi, phi_new = moves.rows_phi(theta), moves.rows_phi(theta_new)
        rates = bound.category_rates(phi, phi_new)
        b = rates.row_rates(every)
        xi = step.control_variate.remainder(theta, theta_new, every)
        assert np.all(np.abs(xi) <= b * (1 + 1e-9) + 1e-13), k
        back = bound.category_rates(phi_new, phi).row_rates(every)
        np.testing.assert_allclose(back, b, rtol=1e-12)
        plain = bound.category_rates(frame.whiten(theta), frame.whiten(theta_new))
        fewer += rates.expected < plain.expected
        if k % 2:  # the sweep's own rates: these rows' rates summed level by level
            own = bound.category < g
            np.testing.assert_allclose(bound.level_rates(phi, phi_new).expected,
                                       np.bincount(bound.category[own], b[own], g), rtol=1e-8)
    assert fewer >= 50


def test_scale_move_cancels_the_levels_prior(levels_step):
    """``log p0(T_ε θ) − log p0(θ) + Gε`` is the scale's own prior difference (``s ~
    HalfNormal(1)`` in ``τ = log s``: ``τ − e^{2τ}/2``) whatever the levels: the Jacobian
    ``e^{Gε}`` of ``(τ, u) ↦ (τ + ε, u e^ε)`` cancels the levels' ``Normal(0, s)`` terms."""
    step = levels_step
    move, lik = step.scale_move, step.likelihood
    assert move is not None and lik.unravel(np.arange(lik.dim, dtype=float))["s_log__"] == (
        move.coordinate)
    rng = np.random.default_rng(4)

    def scale_prior(tau):
        return tau - 0.5 * math.exp(2.0 * tau)

    for _ in range(5):
        theta = step.theta_hat + rng.normal(scale=0.5, size=lik.dim)
        eps = rng.normal(scale=0.3)
        theta_new, log_jacobian = move.apply(theta, eps)
        tau = theta[move.coordinate]
        assert lik.logp0(theta_new) - lik.logp0(theta) + log_jacobian == pytest.approx(
            scale_prior(tau + eps) - scale_prior(tau), rel=1e-9, abs=1e-9)
        back, log_back = move.apply(theta_new, -eps)
        np.testing.assert_allclose(back, theta, rtol=1e-12, atol=1e-12)
        assert log_back == -log_jacobian


def test_scale_move_satisfies_detailed_balance(levels_step, levels_model):
    r"""The scale move's decision from subsampled rows (control variates, the level bound's
    rates): for pairs ``θ' = T_ε θ``, ``P(accept θ → θ') / P(accept θ' → θ)`` estimated from
    4000 decisions each way is ``π(θ') e^{Gε} / π(θ)`` with ``π`` the model's own log density
    on all rows (|z| < 4.5; the pairs' ``|Σξ_i| > 0.25``, 5 sds or more of the estimate)."""
    step, move = levels_step, levels_step.scale_move
    logp = levels_model.compile_logp()
    lik = step.likelihood

    def log_pi(theta):
        return float(logp(lik.unravel(theta)))

    rng = np.random.default_rng(5)
    step.set_rng(np.random.default_rng(6))
    reps, checked = 4000, 0
    while checked < 3:
        theta = step.setup.laplace_draw(rng, step.theta_hat)
        eps = rng.choice([-1.0, 1.0]) * rng.uniform(0.05, 0.4)
        theta_new, log_j = move.apply(theta, eps)
        log_r = log_pi(theta_new) - log_pi(theta) + log_j
        # both directions' acceptance well inside (0, 1), and the rows' remainders
        # (Σξ_i, what stage 2 corrects) large enough that a decision ignoring them fails
        _, remainder = step._row_differences(theta, theta_new)
        if not (-2.0 < log_r < -0.1 and abs(lik.sum_over_rows(remainder)) > 0.25):
            continue
        forward = np.mean([step._scale_decision(theta, theta_new, log_j).accepted
                           for _ in range(reps)])
        backward = np.mean([step._scale_decision(theta_new, theta, -log_j).accepted
                            for _ in range(reps)])
        sd = math.sqrt((1 - forward) / (reps * forward) + (1 - backward) / (reps * backward))
        z = (math.log(forward / backward) - log_r) / sd
        assert abs(z) < 4.5, (checked, eps, forward, backward, math.exp(log_r))
        checked += 1
