"""Third- and fourth-order control variates for the level moves
(``pymc_subsample.model.level_cubic``, ``pymc_subsample.model.level_quartic``;
docs/methods/mhss.md "Fourth-order terms for the level moves").

The per-level sums ``T_k``, ``V_k``, ``W_k`` against the logistic formula's
``Σ_{i∈k} f‴(η̂_i)(t³, t²x_F, t x_F x_Fᵀ)``, and the quartic's ``Q_{4,k}``, ``Q_{3,k}``
against ``f⁗``'s (the others through the identities below); stage 1's terms against the rows'
own (their sum over each level's rows: the identity that keeps the decision exact); the
order-3 and order-4 level bounds against every row's remainder computed from the logistic
formula on random pairs, both orders of the pair, on synthetic whitened rows and on the
model's own rows; the refusals; and the posterior of the moves with the terms against the
stored NUTS reference.
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
import pytest
from scipy.special import expit

import pymc_subsample as pms
from pymc_subsample.bounds import LevelBound, LevelRows, level_rows
from pymc_subsample.datasets import random_effects_data, random_effects_model
from pymc_subsample.model.crossed_cubic import CrossedCubic
from pymc_subsample.model.level_cubic import LOGIT_FOURTH_SUP
from pymc_subsample.model.level_quartic import LOGIT_FIFTH_SUP
from pymc_subsample.steps.mhss import QUARTIC_FROM
from tests.family_checks import check_posterior
from tests.make_glm_references import MANY_GROUPS
from tests.pairs import assert_level_rates_consistent, synthetic_level_rows

N_LEVELS, N_DENSE, N_ROWS = 30, 5, 2000
CASE = (6000, 3, 80, 2)  # rows, fixed effects, levels, data seed


def _f(eta, y):
    return y * eta - np.logaddexp(0.0, eta)


def _remainders(eta_hat, y, a, a_new, order):
    """``ξ_i`` after the Taylor terms of order ``order`` (3 or 4) of the logistic ``f`` at
    ``η̂``."""
    p = expit(eta_hat)
    f1, f2 = y - p, -p * (1 - p)
    f3 = f2 * (1 - 2 * p)
    taylor = (f1 * (a_new - a) + 0.5 * f2 * (a_new**2 - a**2)
              + f3 / 6.0 * (a_new**3 - a**3))
    if order == 4:
        taylor = taylor + f2 * (1 - 6 * p * (1 - p)) / 24.0 * (a_new**4 - a**4)
    return _f(eta_hat + a_new, y) - _f(eta_hat + a, y) - taylor


#: ``L_k`` of the level bound at each order
SUPREMUM = {3: LOGIT_FOURTH_SUP, 4: LOGIT_FIFTH_SUP}


def test_logit_fourth_derivative_sup():
    """``|f⁗| ≤ 1/8`` on a fine grid, reached at ``η = 0``."""
    p = expit(np.linspace(-40, 40, 400_001))
    f4 = -p * (1 - p) * (1 - 6 * p * (1 - p))
    assert np.max(np.abs(f4)) <= LOGIT_FOURTH_SUP
    assert np.max(np.abs(f4)) == pytest.approx(LOGIT_FOURTH_SUP, rel=1e-9)


def test_logit_fifth_derivative_sup():
    """``|f^{(5)}| = |σ⁗| ≤ L₄`` on a fine grid, within ``10⁻⁴`` of it."""
    p = expit(np.linspace(-40, 40, 800_001))
    f5 = p * (1 - p) * (1 - 2 * p) * (1 - 12 * p + 12 * p * p)
    assert np.max(np.abs(f5)) <= LOGIT_FIFTH_SUP
    assert np.max(np.abs(f5)) == pytest.approx(LOGIT_FIFTH_SUP, abs=1e-4)


@pytest.mark.parametrize("order", [3, 4])
def test_level_rates_bound_the_remainders_on_random_pairs(order):
    """Synthetic whitened rows (one level, 90 %, or none), pairs that move the levels only,
    0.05 to 5 sds: ``|ξ_i| ≤ B_i`` for every row, ``B_i`` symmetric in the pair, zero on rows
    of no level, ``Λ_k = Σ_{i∈k} B_i``, each level's envelope above its rows' rates."""
    rng = np.random.default_rng(3)
    n, g = N_ROWS, N_LEVELS
    xt, eta_hat, y = synthetic_level_rows(rng, n, g, N_DENSE)
    sup = np.full(n, SUPREMUM[order])
    bound = LevelBound(LevelRows(*level_rows(order, sup, xt, g), n_levels=g, order=order),
                       xt.shape[1])
    every, worst = np.arange(n), 0.0
    for k in range(1500):
        size = 0.05 * 100 ** (k / 1499)
        phi = size * rng.standard_normal(xt.shape[1]) / math.sqrt(xt.shape[1]) * 3.0
        phi_new = phi.copy()
        phi_new[:g] += size * rng.uniform(0.05, 2.0) * rng.standard_normal(g)
        rates = bound.level_rates(phi, phi_new)
        for first, second in ((phi, phi_new), (phi_new, phi)):
            coefficients, _ = bound.coefficients(first, second)
            b = bound.sampler.weights * bound.polynomial(coefficients, every)
            xi = _remainders(eta_hat, y, xt @ first, xt @ second, order)
            assert np.all(np.abs(xi) <= b * (1 + 1e-9) + 1e-13), k
            worst = max(worst, float(np.max(np.abs(xi) / np.where(b > 0, b, np.inf))))
        back, _ = bound.coefficients(phi_new, phi)
        np.testing.assert_allclose(bound.polynomial(back, every),
                                   bound.polynomial(coefficients, every), rtol=1e-12)
        assert_level_rates_consistent(bound, rates, phi, phi_new, b, g, totals=k % 500 == 0)
    assert worst > 0.02  # the bound is not vacuous


@pytest.fixture(scope="module")
def cubic_model():
    n, d, g, seed = CASE
    return random_effects_model(*random_effects_data(n, d, g, seed=seed), groups=g)


@pytest.fixture(scope="module", params=[3, 4])
def cubic_step(cubic_model, request):
    with cubic_model:
        step = pms.MHSS(level_cv_order=request.param)
    assert step.level_moves is not None and step.level_moves.cubic is not None
    assert step.level_cv_order == step.level_moves.cubic.order == request.param
    return step


def _design(step):
    """``η̂_i``, the rows' ``x_F`` (in ``layout.fixed`` order), ``t_i`` and levels."""
    n, d, g, seed = CASE
    X, group, _ = random_effects_data(n, d, g, seed=seed)
    lay = step.frame.layout
    point = step.likelihood.unravel(step.theta_hat)
    dense = np.zeros((n, lay.dim))
    b = step.likelihood.unravel(np.arange(lay.dim, dtype=np.float64))["b"].astype(int)
    dense[:, b] = X
    dense[np.arange(n), lay.start + group] = 1.0
    return X @ point["b"] + point["u"][group], dense[:, lay.fixed], group


def test_level_cubic_sums_are_the_rows_third_derivatives(cubic_step):
    """``T_k``, ``V_k``, ``W_k`` against ``Σ_{i∈k} f‴(η̂_i)(1, x_F, x_F x_Fᵀ)`` (``t_i = 1``)."""
    eta, xf, group = _design(cubic_step)
    p = expit(eta)
    third = -p * (1 - p) * (1 - 2 * p)
    cubic, g = cubic_step.level_moves.cubic, CASE[2]
    np.testing.assert_allclose(cubic.t_sum, np.bincount(group, third, minlength=g),
                               rtol=1e-9, atol=1e-12)
    v = np.stack([np.bincount(group, third * xf[:, j], minlength=g)
                  for j in range(xf.shape[1])], axis=1)
    np.testing.assert_allclose(cubic.v_sum, v, rtol=1e-9, atol=1e-12)
    w = np.einsum("i,ij,il->ijl", third, xf, xf)
    expected = np.stack([w[group == k].sum(axis=0) for k in range(g)])
    np.testing.assert_allclose(cubic.w_sum, expected, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(cubic.e_sum, np.einsum("i,ij,il,im->jlm", third, xf, xf, xf),
                               rtol=1e-9, atol=1e-12)
    if cubic.order == 4:  # Q_{4,k} and Q_{3,k} (on all fixed coordinates) against f⁗'s
        fourth = -p * (1 - p) * (1 - 6 * p * (1 - p))
        np.testing.assert_allclose(cubic.q_sums[3], np.bincount(group, fourth, minlength=g),
                                   rtol=1e-9, atol=1e-12)
        q3 = np.stack([np.bincount(group, fourth * xf[:, j], minlength=g)
                       for j in range(xf.shape[1])], axis=1)
        np.testing.assert_allclose(cubic.q_sums[2], q3, rtol=1e-9, atol=1e-12)


def _level_pair(step, rng, spread):
    """A point off ``θ̂`` (the scale too) and a move of every level from it."""
    moves = step.level_moves
    hyper = step.hyper_move.coordinates
    theta = step.theta_hat + rng.normal(scale=0.1 * spread, size=step.theta_hat.size)
    theta[hyper] += rng.uniform(-1.0, 1.0)
    theta_new = theta.copy()
    theta_new[moves._levels] += rng.normal(scale=0.3 * spread, size=moves.n_levels)
    return theta, theta_new


def test_stage_one_cubic_is_the_rows_sum(cubic_step):
    """Each level's stage-1 cubic term is the sum of its rows' subtracted terms (so
    stage 1 plus the remainders is the exact log-likelihood difference)."""
    step, rng = cubic_step, np.random.default_rng(5)
    moves, cubic = step.level_moves, step.level_moves.cubic
    every = np.arange(step.likelihood.n_rows)
    _, _, group = _design(step)
    for _ in range(10):
        theta, theta_new = _level_pair(step, rng, 1.0)
        rows = cubic.row_terms(theta, theta_new, every)
        np.testing.assert_allclose(cubic.level_terms(theta, theta_new[moves._levels]),
                                   np.bincount(group, rows, minlength=CASE[2]),
                                   rtol=1e-9, atol=1e-12)


def _any_pair(step, rng, spread):
    """A point off ``θ̂`` and a move of every coordinate from it (the fixed block's and the
    scale's moves change the fixed coordinates and all levels)."""
    theta, theta_new = _level_pair(step, rng, spread)
    theta_new += rng.normal(scale=0.03 * spread, size=theta.size)
    return theta, theta_new


def test_all_rows_cubic_is_the_rows_sum(cubic_step):
    """The cubic of all rows (``E``, ``W``, ``V``, ``T``) for moves of every coordinate is
    the sum of the rows' subtracted terms."""
    step, rng = cubic_step, np.random.default_rng(6)
    cubic = step.level_moves.cubic
    every = np.arange(step.likelihood.n_rows)
    for _ in range(10):
        theta, theta_new = _any_pair(step, rng, 1.0)
        total = cubic.row_terms(theta, theta_new, every).sum()
        assert cubic.total_terms(theta, theta_new) == pytest.approx(total, rel=1e-9, abs=1e-10)


def test_bound_holds_on_the_models_rows(cubic_step):
    """The order-3 or order-4 level bound at :meth:`LevelMoves.rows_phi` against every row's
    remainder (the step's order-2 remainder minus the higher terms) on random pairs whose scale
    is far from ``θ̂``'s (moves of the levels, and of every coordinate), both orders of the
    pair; the rates symmetric; the remainders those of the logistic formula."""
    step, rng = cubic_step, np.random.default_rng(7)
    moves, cubic = step.level_moves, step.level_moves.cubic
    every = np.arange(step.likelihood.n_rows)
    eta_hat, xf, group = _design(step)
    y = random_effects_data(*CASE[:3], seed=CASE[3])[2]
    worst = 0.0
    for k in range(60):
        pair = _level_pair if k % 2 else _any_pair  # a level sweep, or a move of everything
        theta, theta_new = pair(step, rng, 0.2 + 3.0 * k / 59)
        for first, second in ((theta, theta_new), (theta_new, theta)):
            rates = cubic.bound.category_rates(moves.rows_phi(first), moves.rows_phi(second))
            b = rates.row_rates(every)
            xi = (step.control_variate.remainder(first, second, every)
                  - cubic.row_terms(first, second, every))
            assert np.all(np.abs(xi) <= b * (1 + 1e-9) + 1e-12), k
            worst = max(worst, float(np.max(np.abs(xi) / np.where(b > 0, b, np.inf))))
            back = cubic.bound.category_rates(moves.rows_phi(second), moves.rows_phi(first))
            np.testing.assert_allclose(back.row_rates(every), b, rtol=1e-12)
            a = xf @ (first - step.theta_hat)[step.frame.layout.fixed] + (
                first - step.theta_hat)[moves._levels][group]
            a_new = xf @ (second - step.theta_hat)[step.frame.layout.fixed] + (
                second - step.theta_hat)[moves._levels][group]
            np.testing.assert_allclose(xi, _remainders(eta_hat, y, a, a_new, cubic.order),
                                       rtol=1e-6, atol=1e-10)
    assert worst > 0.01  # the bound is not vacuous


def test_newton_proposal_depends_on_the_fixed_coordinates_only(cubic_step):
    """The levels' proposal Gaussians with the cubic's Newton step: the same from any value
    of the levels (a fixed density of each level's move)."""
    step, rng = cubic_step, np.random.default_rng(9)
    moves = step.level_moves
    theta, theta_new = _level_pair(step, rng, 1.0)
    for a, b in zip(moves.conditional_gaussian(theta), moves.conditional_gaussian(theta_new),
                    strict=True):
        np.testing.assert_array_equal(a, b)


def test_level_cv_order_refusals(cubic_model):
    with cubic_model:
        with pytest.raises(ValueError, match="cv_order=2"):
            pms.MHSS(cv_order=1, level_cv_order=3)
        with pytest.raises(ValueError, match="level moves"):
            pms.MHSS(level_moves=False, level_cv_order=3)
        with pytest.raises(ValueError, match="must be None, 2, 3 or 4"):
            pms.MHSS(level_cv_order=5)
    with _probit_model():
        with pytest.raises(ValueError, match="'obs' is bernoulli_probit"):
            pms.MHSS(level_cv_order=3)
    X, group, y = random_effects_data(2000, 2, 20, seed=4)
    with random_effects_model(X, group, y, groups=20):
        with pytest.raises(ValueError, match="level_cv_order=3 needs level moves, but the "
                                             "model has no grouping factor with 64"):
            pms.MHSS(level_cv_order=3)


def test_level_cv_order_by_default_is_three_or_four_where_they_apply(cubic_model):
    """``level_cv_order=None`` (the default): on logistic rows of one factor the third-order
    terms, and the fourth-order ones too for many levels of few rows (``G² ≥ QUARTIC_FROM·N``);
    order 2 without a refusal elsewhere (``cv_order=1``, probit rows, rows on two crossed
    factors in memory)."""
    with cubic_model:  # 80 levels, 6,000 rows
        step = pms.MHSS()
        assert step.level_cv_order == 3 and step.level_moves.cubic is not None
        step = pms.MHSS(cv_order=1)  # the terms extend order-2 control variates
        assert step.level_cv_order == 2 and step.level_moves.cubic is None
    n = 3000
    g = math.ceil(math.sqrt(QUARTIC_FROM * n))
    with random_effects_model(*random_effects_data(n, 2, g, seed=3), groups=g):
        assert pms.MHSS().level_cv_order == 4
    with _probit_model():
        step = pms.MHSS()
    assert step.level_cv_order == 2 and step.level_moves.cubic is None
    with _crossed_model():
        step = pms.MHSS()
    assert step.level_cv_order == 2 and step.level_moves.cubic is None
    assert step.second_moves is not None


def test_level_cv_order_by_default_is_four_for_rows_from_zarr(tmp_path):
    """Rows read from Zarr chunks cost more than the fourth-order terms: the default adds them
    for any number of levels (80 levels of 75 rows here, order 3 from memory)."""
    zarr = pytest.importorskip("zarr")
    n, d, g, seed = CASE
    arrays = {}
    for name, values in zip(("X", "group", "y"), random_effects_data(n, d, g, seed=seed),
                            strict=True):
        arrays[name] = zarr.open_array(tmp_path / f"{name}.zarr", mode="w", shape=values.shape,
                                       dtype=values.dtype, chunks=(1024,) + values.shape[1:])
        arrays[name][...] = values
    with pm.Model():
        b = pm.Normal("b", 0.0, 10.0, shape=d)
        u = pm.Normal("u", 0.0, pm.HalfNormal("s", 1.0), shape=g)
        pm.Bernoulli("y", logit_p=pms.Data("X", arrays["X"]) @ b
                     + u[pms.Data("g", arrays["group"])], observed=pms.Data("y", arrays["y"]))
        assert pms.MHSS().level_cv_order == 4


def _probit_model() -> pm.Model:
    """Probit rows on one factor of 70 levels."""
    X, group, y = random_effects_data(3000, 2, 70, seed=4)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 1.0, shape=2)
        u = pm.Normal("u", 0.0, pm.HalfNormal("s", 1.0), shape=70)
        pm.Bernoulli("obs", p=pm.math.invprobit(X @ b + u[group]), observed=y)
    return model


def _crossed_arrays() -> dict[str, np.ndarray]:
    """Logistic rows on two crossed factors, 100 × 20 levels."""
    rng = np.random.default_rng(1)
    X = np.column_stack([np.ones(20_000), rng.normal(size=(20_000, 2))])
    group, group2 = rng.integers(0, 100, 20_000), rng.integers(0, 20, 20_000)
    y = rng.binomial(1, expit(0.3 * X[:, 1] + 0.5 * rng.normal(size=100)[group]))
    return {"X": X, "group": group, "group2": group2, "y": y}


def _crossed_model(data=None, probit: bool = False) -> pm.Model:
    """:func:`_crossed_arrays`' model (or ``data``'s: the same names, each read through
    ``pms.Data``), logistic or probit."""
    with pm.Model() as model:
        data = (_crossed_arrays() if data is None
                else {name: pms.Data(name, values) for name, values in data.items()})
        b = pm.Normal("b", 0.0, 10.0, shape=3)
        u = pm.Normal("u", 0.0, pm.HalfNormal("s", 1.0), shape=100)
        v = pm.Normal("v", 0.0, pm.HalfNormal("s2", 1.0), shape=20)
        eta = data["X"] @ b + u[data["group"]] + v[data["group2"]]
        if probit:
            pm.Bernoulli("y", p=pm.math.invprobit(eta), observed=data["y"])
        else:
            pm.Bernoulli("y", logit_p=eta, observed=data["y"])
    return model


def test_crossed_third_order_terms_by_default_for_rows_from_zarr(tmp_path):
    """Two crossed factors read from Zarr chunks: the default adds the third-order terms (in
    memory it keeps order 2, ``test_level_cv_order_by_default_is_three_or_four_where_they_
    apply``)."""
    zarr = pytest.importorskip("zarr")
    arrays = {}
    for name, values in _crossed_arrays().items():
        arrays[name] = zarr.open_array(tmp_path / f"{name}.zarr", mode="w", shape=values.shape,
                                       dtype=values.dtype, chunks=(4096,) + values.shape[1:])
        arrays[name][...] = values
    with _crossed_model(arrays):
        step = pms.MHSS()
    assert step.level_cv_order == 3 and isinstance(step.level_moves.cubic, CrossedCubic)


def test_level_cv_order_on_crossed_factors():
    """Rows on two crossed factors: their third-order terms as asked, read by both factors'
    moves; the fourth-order terms are one factor's; probit rows have none (the reason named,
    and order 2 by default)."""
    with _crossed_model():
        step = pms.MHSS(level_cv_order=3)
        assert isinstance(step.level_moves.cubic, CrossedCubic)
        assert step.second_moves.cubic is step.level_moves.cubic
        with pytest.raises(ValueError, match="level_cv_order=4, but the model has a second, "
                                             "crossed grouping factor: its fourth-order terms "
                                             "are for one factor. Use level_cv_order=3"):
            pms.MHSS(level_cv_order=4)
    with _crossed_model(probit=True):
        assert pms.MHSS().level_cv_order == 2
        with pytest.raises(ValueError, match="level_cv_order=3, but observed variable 'y' is "
                                             "bernoulli_probit: the higher-derivative bounds "
                                             "are the logistic family's"):
            pms.MHSS(level_cv_order=3)


@pytest.mark.slow
@pytest.mark.parametrize("order", [3, 4])
def test_many_levels_with_higher_level_terms_match_nuts(order):
    """64 levels with the level moves' third- or fourth-order terms against the stored NUTS
    reference on 12,000 rows (the data and reference of ``tests/test_many_levels.py``), every
    coordinate."""
    with random_effects_model(*random_effects_data(12_000, 3, MANY_GROUPS, seed=5),
                              groups=MANY_GROUPS) as model:
        step = pms.MHSS(level_cv_order=order)
    assert step.level_moves.cubic.order == order
    check_posterior(model, step, "random_effects_many", others=("u", "s"), max_rows=40,
                    case=(12_000, 3, 5), draws=3000)
