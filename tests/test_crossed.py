"""Rows on two crossed grouping factors (``pymc_subsample.bounds.crossed``,
``pymc_subsample.model.crossed``, ``pymc_subsample.model.crossed_cubic``,
``pymc_subsample.steps.crossed_moves``; docs/methods/mhss.md "Rows on two crossed factors" and
"Third-order terms on two crossed factors").

The crossed rates against remainders from the logistic formula on random pairs of the three
kinds of move (one factor's levels, the other's, all coordinates), orders 1 to 3: bound,
symmetry, each level's envelope; the bound's coordinates reproduce every row's displacement;
the step, with order-2 control variates and with the third-order terms (the default): the
third-order sums against the rows' own ``f‴a³``, its rates bound the true remainders on all
rows, the second factor's per-level decisions satisfy detailed balance against the model's own
density; the posterior against the stored NUTS reference.
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
import pytest
from scipy.special import expit

import pymc_subsample as pms
from pymc_subsample.bounds import CrossedBound, CrossedRows, crossed_level_rows, family
from pymc_subsample.model.crossed_cubic import CellSums
from pymc_subsample.model.level_cubic import LOGIT_FOURTH_SUP
from pymc_subsample.model.levels import SplitRows
from pymc_subsample.steps.crossed_moves import SecondFactorMoves
from tests.family_checks import check_posterior
from tests.make_glm_references import CROSSED_GROUPS, crossed_model
from tests.pairs import assert_poisson_counts, poisson_process_counts

G1, G2, D_R, N_ROWS = 40, 12, 4, 3000


def _crossed_rows(rng, order):
    """Whitened rows on a level of each factor, η̂, y and their crossed bound (logistic)."""
    n = N_ROWS
    dense = rng.normal(size=(n, D_R)) * 10 ** rng.uniform(-3, -1, size=(n, 1))
    first = 10 ** rng.uniform(-1.5, -0.5, n)
    second = 10 ** rng.uniform(-2.0, -1.0, n) * (rng.uniform(size=n) < 0.9)
    level, level2 = rng.integers(0, G1, n), rng.integers(0, G2, n)
    eta_hat = rng.normal(size=n)
    y = rng.binomial(1, expit(eta_hat)).astype(float)
    sup = (np.full(n, LOGIT_FOURTH_SUP) if order == 3
           else family("bernoulli_logit").row_sup(order, np.ones(n), y))
    pieces = crossed_level_rows(order, sup, dense, first, level, second, level2,
                                math.sqrt(D_R))
    rows = CrossedRows(*pieces, n_levels=G1, n_levels2=G2, order=order)
    return (dense, first, level, second, level2), eta_hat, y, CrossedBound(rows, D_R)


def _displacement(rows, psi):
    dense, first, level, second, level2 = rows
    return first * psi[level] + second * psi[G1 + level2] + dense @ psi[G1 + G2:]


def _remainders(order, eta_hat, y, a, a_new):
    def f(eta):
        return y * eta - np.logaddexp(0.0, eta)
    p = expit(eta_hat)
    taylor = (y - p) * (a_new - a)
    if order >= 2:
        taylor = taylor + 0.5 * (-p * (1 - p)) * (a_new**2 - a**2)
    if order == 3:
        taylor = taylor - p * (1 - p) * (1 - 2 * p) * (a_new**3 - a**3) / 6
    return f(eta_hat + a_new) - f(eta_hat + a) - taylor


@pytest.mark.parametrize("order", [1, 2, 3])
def test_crossed_rates_bound_the_remainders_on_random_pairs(order):
    """Moves of the first factor's levels, of the second's and of everything, 0.05 to 5 sds:
    ``|ξ_i| ≤ B_i``, ``B_i`` symmetric in the pair, under each level's envelope."""
    rng = np.random.default_rng(order)
    rows, eta_hat, y, bound = _crossed_rows(rng, order)
    dim, every = G1 + G2 + D_R, np.arange(N_ROWS)
    worst = np.zeros(3)
    for k in range(1500):
        size, kind = 0.05 * 100 ** (k / 1499), k % 3
        psi = size * rng.standard_normal(dim) * 3.0 / math.sqrt(dim)
        psi_new = psi.copy()
        moved = [slice(0, G1), slice(G1, G1 + G2), slice(0, dim)][kind]
        psi_new[moved] += size * rng.uniform(0.05, 2.0) * rng.standard_normal(
            moved.stop - moved.start)
        b = bound.row_rates(bound.factors(psi, psi_new), every)
        xi = _remainders(order, eta_hat, y, _displacement(rows, psi),
                         _displacement(rows, psi_new))
        assert np.all(np.abs(xi) <= b * (1 + 1e-9) + 1e-13), k
        worst[kind] = max(worst[kind], float(np.max(np.abs(xi) / np.where(b > 0, b, np.inf))))
        back = bound.row_rates(bound.factors(psi_new, psi), every)
        np.testing.assert_allclose(back, b, rtol=1e-12)
        for factor in (0, 1):
            rates = (bound.level_rates(psi, psi_new, factor) if kind == factor
                     else bound.category_rates(psi, psi_new) if factor == 0 else None)
            if rates is None:
                continue
            level = (bound.level if factor == 0 else bound.level2)
            ceiling = bound.sampler.weights * rates._envelope[level]
            assert np.all(b <= ceiling * (1 + 1e-12)), (k, factor)
    assert np.all(worst > 0.02), worst


@pytest.mark.parametrize("factor", [0, 1])
def test_crossed_level_rates_draw_a_poisson_process_per_level(factor):
    """One factor's levels moved: each chosen level's draws are a Poisson process of rates
    ``B_i`` on its rows (drawn by weight, thinned), none from the levels not chosen; the
    category rates of a move of everything likewise."""
    rng = np.random.default_rng(3 + factor)
    _, _, _, bound = _crossed_rows(rng, 2)
    dim = G1 + G2 + D_R
    psi = rng.standard_normal(dim)
    psi_new = psi.copy()
    moved = slice(0, G1) if factor == 0 else slice(G1, G1 + G2)
    psi_new[moved] += 3.0 * rng.standard_normal(moved.stop - moved.start)
    rates = bound.level_rates(psi, psi_new, factor)
    b = bound.row_rates(bound.factors(psi, psi_new), np.arange(N_ROWS))
    level = bound.level if factor == 0 else bound.level2
    g = G1 if factor == 0 else G2
    chosen = np.arange(g) % 3 != 0
    assert not rates.fallback.any()
    counts, reps = np.zeros(N_ROWS), 3000
    for _ in range(reps):
        idx, lev, kept = rates.draw(rng, chosen)
        np.testing.assert_array_equal(lev, level[idx])
        np.testing.assert_allclose(kept, b[idx], rtol=1e-12)
        counts += np.bincount(idx, minlength=N_ROWS)
    in_chosen = chosen[level]
    assert counts[~in_chosen].sum() == 0
    assert_poisson_counts(counts[in_chosen], b[in_chosen] * reps, least=20)
    if factor == 0:
        psi_new = 0.8 * psi + 0.6 * rng.standard_normal(dim)
        every = bound.category_rates(psi, psi_new)
        counts, expected = poisson_process_counts(every, N_ROWS, rng, reps=3000)
        assert_poisson_counts(counts, expected, least=20)


@pytest.fixture(scope="module", params=[2, 3], ids=["order2", "order3"])
def crossed_step(request):
    model = crossed_model(3000, seed=3)
    with model:
        step = pms.MHSS(level_cv_order=request.param)
    assert step.second_moves is not None and step.level_moves is not None
    assert step.level_cv_order == request.param
    return model, step


def _remainder(step):
    """The rows' remainders of the step's control variates (the third-order terms out)."""
    order2, cubic = step.control_variate.remainder, step.level_moves.cubic
    if cubic is None:
        return order2
    return lambda t, t_new, idx: order2(t, t_new, idx) - cubic.row_terms(t, t_new, idx)


@pytest.mark.parametrize("crossed_step", [3], indirect=True, ids=["order3"])
def test_crossed_third_order_sums_give_the_rows_cubic(crossed_step):
    """``Σ f‴_i a_i³`` over all rows, each level's change in a move of either factor's
    levels, and the rows' own terms, from the per-level and per-cell sums, against the rows'
    ``f‴(η̂_i)a_i³`` directly."""
    _, step = crossed_step
    cubic = step.level_moves.cubic
    every = np.arange(step.likelihood.n_rows)
    _, (piece,) = step._reference_pass.rows(step.theta_hat, every, check=False)
    x, eta_hat = piece[0], piece[4]
    p = expit(eta_hat)
    f3 = -p * (1 - p) * (1 - 2 * p)
    rng = np.random.default_rng(0)
    lv, lv2 = slice(step.frame.layout.start, step.frame.layout.stop), step.second_moves._levels
    for _ in range(3):
        theta = step.setup.laplace_draw(rng, step.theta_hat)
        a = x.dense() @ (theta - step.theta_hat)
        np.testing.assert_allclose(cubic.cubic(theta), np.sum(f3 * a**3), rtol=1e-10)
        for levels, level, terms in ((lv, x.level, cubic.level_terms),
                                     (lv2, step.rate_bound.level2, cubic.second_level_terms)):
            theta_new = theta.copy()
            theta_new[levels] += 0.5 * rng.normal(size=levels.stop - levels.start)
            a_new = x.dense() @ (theta_new - step.theta_hat)
            row = f3 * (a_new**3 - a**3) / 6
            np.testing.assert_allclose(cubic.row_terms(theta, theta_new, every), row,
                                       rtol=1e-9, atol=1e-15)
            want = np.bincount(level, row, minlength=levels.stop - levels.start)
            np.testing.assert_allclose(terms(theta, theta_new[levels]), want, rtol=1e-9,
                                       atol=1e-13)


def test_cell_sums_of_blocks_merge_to_the_sums_of_all_rows():
    """The pass's per-block cell sums (a cell's rows in several blocks) merged: the sums over
    all rows at once, cell for cell."""
    rng = np.random.default_rng(5)
    n, g2 = 5000, 7
    level, level2 = rng.integers(0, 30, n), rng.integers(0, g2, n)
    t, r, f3 = rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)
    rest = rng.normal(size=(n, 3))
    cell = level * g2 + level2
    whole = CellSums.of(cell, g2, t, r, f3, rest)
    blocks = [CellSums.of(cell[i], g2, t[i], r[i], f3[i], rest[i])
              for i in np.array_split(rng.permutation(n), 4)]
    merged = CellSums.merged(blocks, g2)
    for name in ("first", "second"):
        np.testing.assert_array_equal(getattr(merged, name), getattr(whole, name))
    for name in ("s", "p", "q"):
        np.testing.assert_allclose(getattr(merged, name), getattr(whole, name), rtol=1e-12,
                                   atol=1e-12)


def test_crossed_coordinates_give_every_rows_displacement(crossed_step):
    """``x_iᵀ(θ − θ̂) = α_i ψ_{U,k_i} + β_i ψ_{V,l_i} + γ_iᵀψ_R`` on all rows, at Laplace
    draws (the scales, which no row reads, anywhere)."""
    _, step = crossed_step
    coords, data_pass = step.second_moves.coords, step._reference_pass
    idx = np.arange(step.likelihood.n_rows)
    _, (piece,) = data_pass.rows(step.theta_hat, idx, check=False)
    x = piece[0]
    dense, first, level, second, level2 = coords.rows(x)
    rng = np.random.default_rng(0)
    for _ in range(4):
        theta = step.setup.laplace_draw(rng, step.theta_hat)
        psi = coords.point(theta)
        g = coords.n_levels
        got = (first * psi[level] + second * psi[g + level2]
               + dense @ psi[g + coords.n_levels2:])
        np.testing.assert_allclose(got, x.dense() @ (theta - step.theta_hat), atol=1e-10)


def test_crossed_coordinates_read_the_second_factor_from_the_pass(crossed_step):
    """The pass keeps the second factor's columns as each row's level and value: the rows'
    pieces read from there are those of the dense one-hot block, to the bit."""
    _, step = crossed_step
    coords, data_pass = step.second_moves.coords, step._reference_pass
    _, (piece,) = data_pass.rows(step.theta_hat, np.arange(step.likelihood.n_rows),
                                 check=False)
    x = piece[0]
    assert x.second is not None
    dense_rows = SplitRows(x.fixed_block(), x.level, x.value, x.layout)
    for got, want in zip(coords.rows(x), coords.rows(dense_rows), strict=True):
        np.testing.assert_array_equal(got, want)
    # a row on a held coordinate (the scales no row reads) is refused either way
    held = x.fixed.copy()
    held[0, coords._second_columns(x)[1]] = 1.0
    assert coords.rows(SplitRows(held, x.level, x.value, x.layout, x.second)) is None


def test_step_rates_bound_the_true_remainders(crossed_step):
    """The step's own moves (the fixed block's, each factor's levels) from Laplace draws:
    the crossed bound's ``B_i`` against the model's remainders on every row."""
    _, step = crossed_step
    lik, bound, moves = step.likelihood, step.rate_bound, step.second_moves
    assert isinstance(bound, CrossedBound)
    every = np.arange(lik.n_rows)
    rng = np.random.default_rng(1)
    lv = slice(step.frame.layout.start, step.frame.layout.stop)
    for k in range(12):
        theta = step.setup.laplace_draw(rng, step.theta_hat)
        if k % 3 == 0:
            theta_new = step.frame.unwhiten(step.proposal.propose(rng, step.frame.whiten(theta))[0])
        elif k % 3 == 1:
            theta_new = theta.copy()
            theta_new[lv] += rng.normal(size=lv.stop - lv.start) / step.frame.level_scale
        else:
            theta_new = theta.copy()
            theta_new[moves._levels] = moves.propose(theta, rng)[0]
        psi = step.level_moves.rows_phi(theta)
        psi_new = step.level_moves.rows_phi(theta_new)
        b = bound.row_rates(bound.factors(psi, psi_new), every)
        xi = _remainder(step)(theta, theta_new, every)
        assert np.all(np.abs(xi) <= b * (1 + 1e-9) + 1e-12), k


def test_second_factor_decisions_satisfy_detailed_balance(crossed_step):
    r"""Each of the second factor's levels decided from its own subsampled rows: for moves
    ``v_l → v'_l`` (every level at once, a symmetric pair: q-ratio 0),
    ``P(accept θ → θ') / P(accept θ' → θ)`` from 2000 decisions each way is ``π(θ'_l)/π(θ)``
    of the model's own density on all rows, level by level (|z| < 4.5 on the levels whose
    rows' order-2 remainders have ``|Σξ_i| > 0.05``, so that a decision on the quadratic
    control variates alone would fail)."""
    model, step = crossed_step
    moves: SecondFactorMoves = step.second_moves
    lik = step.likelihood
    logp = model.compile_logp()

    def log_pi(theta):
        return float(logp(lik.unravel(theta)))

    rng = np.random.default_rng(4)
    rng_index, rng_accept = np.random.default_rng(5), np.random.default_rng(6)
    remainder = step.control_variate.remainder  # decide() takes the third-order terms out
    lv, g = moves._levels, moves.n_levels
    every = np.arange(lik.n_rows)
    checked, reps = 0, 2000
    for _ in range(4):
        theta = step.setup.laplace_draw(rng, step.theta_hat)
        x_new = theta[lv] + rng.choice([-1.0, 1.0], g) * rng.uniform(1.0, 2.5, g) * np.sqrt(
            1.0 / moves.coords.second_precision)
        theta_new = theta.copy()
        theta_new[lv] = x_new
        zero = np.zeros(g)
        forward = np.zeros(g)
        backward = np.zeros(g)
        for _ in range(reps):
            forward += moves.decide(theta, x_new, zero, remainder, rng_index=rng_index,
                                    rng_accept=rng_accept).info.accepted
            backward += moves.decide(theta_new, theta[lv], zero, remainder,
                                     rng_index=rng_index, rng_accept=rng_accept).info.accepted
        forward, backward = forward / reps, backward / reps
        xi = remainder(theta, theta_new, every)
        xi_sum = np.bincount(step.rate_bound.level2, xi, minlength=g)
        base = log_pi(theta)
        for level in range(g):
            one = theta.copy()
            one[lv.start + level] = x_new[level]
            log_r = log_pi(one) - base
            f, b = forward[level], backward[level]
            if abs(xi_sum[level]) < 0.05 or not (0.05 < min(f, b) and max(f, b) < 1.0):
                continue
            sd = math.sqrt((1 - f) / (reps * f) + (1 - b) / (reps * b))
            z = (math.log(f / b) - log_r) / sd
            assert abs(z) < 4.5, (level, f, b, math.exp(log_r), xi_sum[level])
            checked += 1
    assert checked >= 8, checked


def test_a_second_factor_read_twice_keeps_the_one_factor_moves():
    """``v[g2] + v[g3]``: a row on two levels of the second factor couples them in the data
    Hessian, so it is no second factor; the step keeps the one-factor level moves."""
    rng = np.random.default_rng(2)
    n = 1500
    X = np.column_stack([np.ones(n), rng.normal(size=n)])
    g1, g2, g3 = rng.integers(0, 70, n), rng.integers(0, 8, n), rng.integers(0, 8, n)
    with pm.Model():
        b = pm.Normal("b", 0.0, 5.0, shape=2)
        u = pm.Normal("u", 0.0, pm.HalfNormal("s_u", 1.0), shape=70)
        v = pm.Normal("v", 0.0, pm.HalfNormal("s_v", 1.0), shape=8)
        pm.Bernoulli("y", logit_p=pm.Data("X", X) @ b + u[pm.Data("g1", g1)]
                     + v[pm.Data("g2", g2)] + v[pm.Data("g3", g3)],
                     observed=rng.binomial(1, 0.4, n))
        step = pms.MHSS()
    assert step.level_moves is not None and step.second_moves is None
    assert not isinstance(step.rate_bound, CrossedBound)


@pytest.mark.slow
@pytest.mark.parametrize("level_cv_order", [None, 3])
def test_crossed_factors_match_nuts(level_cv_order):
    """Crossed random intercepts (the bound on two levels, both factors' level moves, the
    fixed block's move, the scales) against the stored NUTS reference, every coordinate: with
    order-2 control variates (the default in memory) and with the third-order terms."""
    model = crossed_model(6000, seed=7)
    with model:
        step = pms.MHSS(level_cv_order=level_cv_order)
    assert step.second_moves is not None
    assert step.level_cv_order == (level_cv_order or 2)
    check_posterior(model, step, "random_effects_crossed", others=("u", "v", "s_u", "s_v"),
                    max_rows=200, case=(6000, 3, 7), draws=3000)
    assert CROSSED_GROUPS == (70, 12)
