"""MHSS inside pm.sample: stats contract, seeding, multiprocessing, tuning, user bounds."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.bounds import remainder_scale
from pymc_subsample.datasets import glm_data, glm_model
from pymc_subsample.model.passes import glm_bound_constants
from tests.steps.conftest import SAMPLE


@pytest.mark.parametrize("proposal, accept", [("pcn", (0.5, 1.0)), ("random_walk", (0.2, 0.8)),
                                              ("independence", (0.5, 1.0))])
def test_stats_contract(logistic, proposal, accept):
    model, map_point = logistic
    with model:
        step = pms.MHSS(cv_order=2, map_point=map_point, proposal=proposal)
        idata = pm.sample(200, tune=100, chains=1, step=step, random_seed=1, **SAMPLE)
    stats = idata.sample_stats
    for name, (dtype, shape) in pms.MHSS.stats_dtypes_shapes.items():
        assert name in stats, name
        assert stats[name].dtype == np.dtype(dtype), name
        assert stats[name].shape == (1, 200, *shape)
    # tall data: proposals built on the Laplace approximation are accepted almost always
    assert accept[0] < float(stats["accepted"].mean()) <= accept[1]
    assert int(stats["clipped"].sum()) == 0
    # rows are only read after the stage-1 screen passes
    assert np.all(stats["n_data"].values[~stats["accept_stage1"].values] == 0)


def test_random_seed_reproducible_and_cores_agree(logistic):
    model, map_point = logistic
    with model:
        step = pms.MHSS(cv_order=2, map_point=map_point)
        a = pm.sample(150, tune=50, chains=2, cores=1, step=step, random_seed=3, **SAMPLE)
        b = pm.sample(150, tune=50, chains=2, cores=1, step=step, random_seed=3, **SAMPLE)
        c = pm.sample(150, tune=50, chains=2, cores=2, step=step, random_seed=3, **SAMPLE)
        d = pm.sample(150, tune=50, chains=2, cores=1, step=step, random_seed=4, **SAMPLE)
    np.testing.assert_array_equal(a.posterior["b"], b.posterior["b"])
    np.testing.assert_array_equal(a.posterior["b"], c.posterior["b"])
    np.testing.assert_array_equal(a.sample_stats["n_data"], c.sample_stats["n_data"])
    assert not np.array_equal(a.posterior["b"], d.posterior["b"])
    # the two chains differ
    assert not np.array_equal(a.posterior["b"][0], a.posterior["b"][1])


@pytest.mark.parametrize("proposal", ["pcn", "random_walk", "independence"])
def test_tuning_by_jump_distance_cycles_then_freezes_the_best(logistic, proposal):
    model, map_point = logistic
    with model:
        step = pms.MHSS(cv_order=2, map_point=map_point, proposal=proposal)
        idata = pm.sample(50, tune=210, chains=2, step=step, random_seed=5,
                          discard_tuned_samples=False, **SAMPLE)
    warm = idata.warmup_sample_stats["scaling"].values
    post = idata.sample_stats["scaling"].values
    grid = np.asarray(step.proposal.candidates)
    # every chain cycles through the grid from the start, then freezes one grid value
    np.testing.assert_allclose(warm[:, : grid.size], np.tile(grid, (2, 1)))
    assert np.all(post == post[:, :1])
    assert np.all(np.isin(post[:, 0], grid))
    # the frozen value is the grid point with the best jump distance per cost (last chain)
    assert post[-1, 0] == grid[np.nanargmax(step._tuner.efficiency())]


def test_tuning_toward_an_acceptance_rate_adapts_then_freezes_and_resets(logistic):
    model, map_point = logistic
    with model:
        step = pms.MHSS(cv_order=2, map_point=map_point, scaling=6.0, proposal="random_walk",
                        target_accept=0.45)
        idata = pm.sample(100, tune=300, chains=2, step=step, random_seed=5,
                          discard_tuned_samples=False, **SAMPLE)
    kappa = idata.warmup_sample_stats["scaling"].values
    post = idata.sample_stats["scaling"].values
    # starts from the requested κ in every chain, moves during tuning, frozen afterwards
    np.testing.assert_allclose(kappa[:, 0], 6.0, rtol=0.2)  # after one update
    assert np.all(kappa[:, -1] < 4.0)
    assert np.all(post == post[:, :1])


def test_adaptation_off_keeps_scaling(logistic):
    model, map_point = logistic
    with model:
        step = pms.MHSS(cv_order=2, map_point=map_point, scaling=0.3, tune=False)
        idata = pm.sample(50, tune=50, chains=1, step=step, random_seed=5, **SAMPLE)
    assert np.all(idata.sample_stats["scaling"].values == pytest.approx(0.3))


def test_user_bound_reproduces_automatic_bound(logistic):
    model, map_point = logistic
    with model:
        auto = pms.MHSS(cv_order=1, map_point=map_point)
        frame = auto.frame
        consts = glm_bound_constants(auto.likelihood, auto.theta_hat, 1, frame=frame)
        np.testing.assert_allclose(consts, auto.row_constants, rtol=1e-10)

        def whitened_m(theta, theta_new, theta_hat):
            return remainder_scale(frame.whiten(theta), frame.whiten(theta_new), 0 * theta, 1)

        user = pms.MHSS(cv_order=1, map_point=map_point,
                        bound=pms.UserBound(consts, remainder_scale=whitened_m))
        a = pm.sample(100, tune=20, chains=1, step=auto, random_seed=2, **SAMPLE)
        b = pm.sample(100, tune=20, chains=1, step=user, random_seed=2, **SAMPLE)
    np.testing.assert_array_equal(a.posterior["b"], b.posterior["b"])


def test_gaussian_order_two_reads_no_rows():
    X, y = glm_data(1000, 2, "gaussian", seed=3)
    with glm_model(X, y, "gaussian"):
        idata = pm.sample(200, tune=50, chains=1, step=pms.MHSS(cv_order=2), random_seed=1,
                          **SAMPLE)
    assert int(idata.sample_stats["n_data"].sum()) == 0
    assert float(idata.sample_stats["accepted"].mean()) > 0.2


def test_full_data_fallback_is_taken_and_counted():
    X, y = glm_data(40, 2, "logistic", seed=3)
    with glm_model(X, y, "logistic"):
        step = pms.MHSS(cv_order=1, scaling=8.0, tune=False, proposal="random_walk")
        idata = pm.sample(300, tune=0, chains=1, step=step, random_seed=1, **SAMPLE)
    stats = idata.sample_stats
    fallback = stats["full_data_fallback"].values
    assert fallback.any()
    assert np.all(stats["n_data"].values[fallback] == 40)
    assert np.all(stats["expected_rows"].values[fallback] >= 40)


def test_competence():
    X, y = glm_data(50, 2, "logistic")
    model = glm_model(X, y, "logistic")
    from pymc.step_methods.compound import Competence

    assert pms.MHSS.competence(model.value_vars[0], True) == Competence.COMPATIBLE


def test_chains_start_from_the_laplace_approximation_by_default(logistic):
    model, map_point = logistic
    with model:
        laplace = pms.MHSS(cv_order=2, map_point=map_point)
        pymc_init = pms.MHSS(cv_order=2, map_point=map_point, init="pymc", tune=False,
                             scaling=0.01, proposal="random_walk")
        a = pm.sample(5, tune=0, chains=2, step=laplace, random_seed=1, **SAMPLE)
        b = pm.sample(5, tune=0, chains=2, step=pymc_init, random_seed=1, **SAMPLE)
    first = a.posterior["b"].values[:, 0]
    sd = np.sqrt(np.diag(laplace.frame.cov))
    # within a few posterior sds of the MAP, and the chains start apart
    assert np.all(np.abs(first - map_point["b"]) < 5 * sd)
    assert not np.allclose(first[0], first[1])
    # PyMC's initial point is b = 0, hundreds of posterior sds away; tiny steps stay there
    assert np.all(np.abs(b.posterior["b"].values[:, 0]) < 0.05)


def test_invalid_init():
    X, y = glm_data(50, 2, "logistic")
    with glm_model(X, y, "logistic"):
        with pytest.raises(ValueError, match='init must be "laplace" or "pymc"'):
            pms.MHSS(cv_order=2, init="map")
