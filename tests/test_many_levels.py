"""Many levels of one grouping factor (``pymc_subsample.model.levels``, the
:class:`~pymc_subsample.model.frame.LevelFrame`; docs/methods/reference.md "Many levels").

The split rows, the per-level Hessian sums, the structured prior Hessian, the arrow Cholesky
frame and the split level-bound pieces are each checked against the dense computation they
replace; a model with many levels builds with them, its reference point a mode.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.bounds import LevelBound, level_rows, split_level_rows
from pymc_subsample.datasets import random_effects_data, random_effects_model
from pymc_subsample.model import levels as levels_module
from pymc_subsample.model.frame import LaplaceFrame, LevelFrame, NotPositiveDefiniteError
from pymc_subsample.model.levels import LevelHessian, LevelLayout, SplitRows
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.model.passes import GLMPass
from pymc_subsample.model.prior_hessian import level_prior_hessian, prior_terms
from tests.family_checks import check_posterior
from tests.make_glm_references import MANY_GROUPS

GROUPS, ROWS, DIM = 80, 12_000, 3


@pytest.fixture(scope="module")
def many_levels():
    model = random_effects_model(*random_effects_data(ROWS, DIM, GROUPS, seed=3), groups=GROUPS)
    lik = SubsampledLikelihood(model)
    theta = np.random.default_rng(4).normal(scale=0.3, size=lik.dim)
    return model, lik, theta


def _random_level_hessian(rng, layout: LevelLayout) -> LevelHessian:
    g, d_fixed = layout.n_levels, layout.dim - layout.n_levels
    a = rng.normal(size=(d_fixed, d_fixed))
    return LevelHessian(rng.uniform(1.0, 3.0, g), 0.3 * rng.normal(size=(g, d_fixed)),
                        a @ a.T + g * np.eye(d_fixed), layout)


def test_structured_pass_equals_dense_pass(many_levels, monkeypatch):
    """Split rows and per-level sums give the dense pass's Σℓ, Σ∇ℓ and Σ∇²ℓ."""
    _, lik, theta = many_levels
    split = GLMPass(lik)
    assert split.levels == LevelLayout(DIM + 1, DIM + 1 + GROUPS, lik.dim)
    res = split.full(theta)
    assert isinstance(res.hess, LevelHessian)
    monkeypatch.setattr(levels_module, "MIN_SPLIT_LEVELS", 10**9)
    dense = GLMPass(lik)
    assert dense.levels is None
    ref = dense.full(theta)
    np.testing.assert_allclose(res.loglik, ref.loglik, rtol=1e-12)
    np.testing.assert_allclose(res.grad, ref.grad, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(res.hess.dense(), ref.hess, rtol=1e-10, atol=1e-10)
    # the rows themselves, as the pass reads them
    idx = np.arange(50, dtype=np.int64)
    _, (piece,) = split.rows(theta, idx)
    _, (dense_piece,) = dense.rows(theta, idx)
    assert isinstance(piece[0], SplitRows)
    np.testing.assert_array_equal(piece[0].dense(), dense_piece[0])


def test_structured_prior_hessian_equals_differences(many_levels):
    _, lik, theta = many_levels
    layout = GLMPass(lik).levels
    v, g, h = prior_terms(lik, theta, layout)
    v_dense, g_dense, h_dense = prior_terms(lik, theta)
    assert isinstance(h, LevelHessian)
    assert v == v_dense
    np.testing.assert_array_equal(g, g_dense)
    np.testing.assert_allclose(h.dense(), h_dense, rtol=1e-6,
                               atol=1e-7 * np.abs(h_dense).max())


def test_prior_hessian_with_coupled_levels_is_left_dense():
    """Two levels coupled in the prior: the coloured differences disagree, None (dense)."""
    layout = LevelLayout(0, 6, 8)
    h = np.diag(np.arange(1.0, 9.0))
    h[2, 3] = h[3, 2] = 0.5
    assert level_prior_hessian(lambda t: -h @ t, np.zeros(8), layout) is None
    h[2, 3] = h[3, 2] = 0.0
    h[0, 7] = h[7, 0] = 0.25  # a level coupled to a fixed coordinate is the arrow
    got = level_prior_hessian(lambda t: -h @ t, np.zeros(8), layout)
    np.testing.assert_allclose(got.dense(), -h, atol=1e-9)


def test_prior_hessian_probes_uncoupled_vectors_together():
    """Vectors of the fixed block uncoupled in the prior are probed as groups (a handful of
    gradients); one coupled inside, or to another group, is probed column by column; the
    Hessian is exact either way."""
    layout = LevelLayout(0, 30, 60)
    rng = np.random.default_rng(2)
    h = np.diag(rng.uniform(1.0, 3.0, 60))
    h[:30, 50] = h[50, :30] = 0.3  # the levels' scale
    h[40:45, 51] = h[51, 40:45] = 0.2  # a vector's scale, a single
    h[46, 47] = h[47, 46] = 0.1  # two coordinates of the group 45…49 coupled
    h[36, 52] = h[52, 36] = 0.05  # the group 30…39 coupled to the group 52…59
    calls = []

    def gradient(t):
        calls.append(1)
        return -h @ t

    groups = [(30, 40), (40, 45), (45, 50), (52, 60)]
    got = level_prior_hessian(gradient, np.zeros(60), layout, groups)
    np.testing.assert_allclose(got.dense(), -h, atol=1e-9)
    # every group probed (3 patterns, 2 gradients each); the scalars 50 and 51, the group
    # 45…49 and the smaller of the coupled 30…39 and 52…59 by columns (2 gradients each)
    assert len(calls) == 6 * 5 + 2 * (2 + 5 + 8)
    calls.clear()
    assert np.allclose(level_prior_hessian(gradient, np.zeros(60), layout).dense(), -h,
                       atol=1e-9)
    assert len(calls) == 6 + 2 * 30


@pytest.mark.parametrize("start", [0, 3])
def test_level_frame_equals_dense_frame(start):
    rng = np.random.default_rng(start)
    layout = LevelLayout(start, start + 40, 46)
    precision = _random_level_hessian(rng, layout)
    theta_hat = rng.normal(size=layout.dim)
    frame, dense = LevelFrame(theta_hat, precision), LaplaceFrame(theta_hat, precision.dense())
    assert dense.n_levels == frame.n_levels == 40
    np.testing.assert_array_equal(frame.order, dense.order)
    theta, grad = rng.normal(size=(2, layout.dim))
    for name in ("whiten", "unwhiten", "whiten_gradient", "newton_step"):
        np.testing.assert_allclose(getattr(frame, name)(theta), getattr(dense, name)(theta),
                                   rtol=1e-10, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(frame.unwhiten(frame.whiten(theta)), theta, rtol=1e-12)
    assert frame.newton_distance(grad) == pytest.approx(dense.newton_distance(grad), rel=1e-12)
    np.testing.assert_allclose(frame.chol_precision, dense.chol_precision, atol=1e-12)
    np.testing.assert_allclose(frame.cov, dense.cov, rtol=1e-10, atol=1e-14)
    rows = SplitRows(rng.normal(size=(30, 6)), rng.integers(0, 40, 30), rng.normal(size=30),
                     layout)
    whitened_dense = dense.whiten_rows(rows.dense())
    np.testing.assert_allclose(frame.whiten_rows(rows.dense()), whitened_dense, atol=1e-12)
    split = frame.whiten_rows(rows)
    np.testing.assert_allclose(split.fixed, whitened_dense[:, 40:], atol=1e-12)
    np.testing.assert_allclose(split.value, whitened_dense[np.arange(30), rows.level],
                               atol=1e-12)
    # the level bound's pieces from the split rows are those from the dense whitened rows
    sup = rng.uniform(0.1, 1.0, 30)
    for order in (1, 2):
        got = split_level_rows(order, sup, split.fixed, split.level, split.value, 40)
        want = level_rows(order, sup, whitened_dense, 40)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6)


def test_level_frame_refuses_what_is_not_positive_definite():
    rng = np.random.default_rng(1)
    layout = LevelLayout(0, 10, 13)
    precision = _random_level_hessian(rng, layout)
    with pytest.raises(NotPositiveDefiniteError, match="not positive definite"):
        LevelFrame(np.zeros(13), precision.shifted(-10.0))


@pytest.fixture(scope="module")
def built(many_levels):
    model = many_levels[0]
    with model:
        return pms.MHSS()


def test_many_levels_build_structured_at_a_mode(built):
    """MHSS on 80 levels (150 rows each): the arrow frame, a handful of passes, a mode."""
    ref = built.setup.reference
    assert isinstance(built.frame, LevelFrame)
    assert isinstance(ref.hess_sum, LevelHessian)
    assert ref.newton_distance <= 0.25
    assert ref.full_data_passes <= 10


@pytest.mark.slow
def test_many_levels_match_nuts():
    """64 levels (the rows split, the arrow frame, the level bound, and the level moves: the
    fixed block, the group scale given the levels, each level on its own rows) against the
    stored NUTS reference on 12,000 rows, every coordinate (``b``, ``u``, ``s``)."""
    with random_effects_model(*random_effects_data(12_000, 3, MANY_GROUPS, seed=5),
                              groups=MANY_GROUPS) as model:
        step = pms.MHSS()
    assert isinstance(step.frame, LevelFrame)
    assert isinstance(step.rate_bound, LevelBound)
    assert step.level_moves is not None and step.hyper_move is not None
    # the slowest coordinate mixes at about 0.3 ESS an iteration: 2 × 3000 draws give every
    # coordinate an ESS above 1000
    check_posterior(model, step, "random_effects_many", others=("u", "s"), max_rows=40,
                    case=(12_000, 3, 5), draws=3000)


def test_many_levels_take_a_map_point_and_a_proposal_cov(many_levels, built):
    """The structured frame behind the other entries: a ``map_point`` at the mode is checked
    in a pass or two, and a random walk's ``proposal_cov`` is whitened through the dense ``R``
    (``V`` itself becomes the identity)."""
    model, lik, _ = many_levels
    mode = built.setup.reference.mode
    with model:
        again = pms.MHSS(map_point=lik.unravel(mode))
        walk = pms.MHSS(proposal="random_walk", proposal_cov=built.frame.cov)
    assert again.setup.reference.full_data_passes <= 2
    # level moves by default; a covariance for all coordinates keeps the joint move
    assert again.level_moves is not None and walk.level_moves is None
    np.testing.assert_allclose(again.frame.theta_hat, mode, atol=1e-6)
    chol = walk.setup.proposal.chol
    np.testing.assert_allclose(chol @ chol.T, np.eye(lik.dim), atol=1e-8)


def test_crossed_factors_split_the_larger(monkeypatch):
    """Crossed random intercepts (100 × 70 levels): the larger factor is split, the smaller
    joins the fixed block as per-row levels (its columns summed per level), and the pass and
    its rows still equal the dense ones."""
    rng = np.random.default_rng(7)
    n = 3000
    X = np.column_stack([np.ones(n), rng.normal(size=n)])
    g1, g2 = rng.integers(0, 100, n), rng.integers(0, 70, n)
    y = rng.binomial(1, 0.4, n)
    with pm.Model():
        b = pm.Normal("b", 0.0, 5.0, shape=2)
        s = pm.HalfNormal("s", 1.0, shape=2)
        u = pm.Normal("u", 0.0, s[0], shape=100)
        v = pm.Normal("v", 0.0, s[1], shape=70)
        pm.Bernoulli("y", logit_p=pm.Data("X", X) @ b + u[pm.Data("g1", g1)]
                     + v[pm.Data("g2", g2)], observed=y)
        lik = SubsampledLikelihood(pm.modelcontext(None))
    theta = rng.normal(scale=0.3, size=lik.dim)
    split = GLMPass(lik)
    names = [v.name for v in lik.value_vars]
    start = sum(lik.unravel(np.zeros(lik.dim))[nm].size for nm in names[: names.index("u")])
    assert split.levels == LevelLayout(start, start + 100, lik.dim)
    second = split.terms[0].split.second_columns
    assert second.stop - second.start == 70
    res = split.full(theta)
    idx = np.arange(200, dtype=np.int64)
    x = split.rows(theta, idx)[1][0][0]
    assert x.second is not None and x.fixed.shape[1] == lik.dim - 100 - 70
    monkeypatch.setattr(levels_module, "MIN_SPLIT_LEVELS", 10**9)
    dense = GLMPass(lik)
    ref = dense.full(theta)
    np.testing.assert_allclose(res.grad, ref.grad, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(res.hess.dense(), ref.hess, rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(x.dense(), dense.rows(theta, idx)[1][0][0])
    np.testing.assert_allclose(x.norms(), np.linalg.norm(x.dense(), axis=1), rtol=1e-12)
