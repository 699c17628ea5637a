"""The contract every subsampling step keeps inside ``pm.sample``, run over all three steps.

Seeding, multiprocessing, the declared sampler stats, frozen tuning, knob validation, models
with several observed variables or a parameter-only ``pm.Potential``, the NUMBA backend and
``pms.UserBound`` with callables.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.bounds import remainder_scale
from pymc_subsample.datasets import glm_data
from pymc_subsample.model.passes import glm_bound_constants
from tests.posterior import assert_matches, summary
from tests.steps.conftest import N_ROWS, SAMPLE

STEPS = {
    "MHSS": (pms.MHSS, {}),
    "AusterityMH": (pms.AusterityMH, dict(epsilon=0.01, batch_size=500, cv_order=2)),
    "BarkerMinibatch": (pms.BarkerMinibatch, dict(batch_size=100, cv_order=2)),
}
STEP_IDS = list(STEPS)


def _get(step_cache, name):
    cls, kwargs = STEPS[name]
    return step_cache(cls, **kwargs)


@pytest.mark.parametrize("name", STEP_IDS)
def test_random_seed_reproducible(logistic, step_cache, name):
    model, _ = logistic
    step = _get(step_cache, name)
    with model:
        a = pm.sample(100, tune=50, chains=1, step=step, random_seed=11, **SAMPLE)
        b = pm.sample(100, tune=50, chains=1, step=step, random_seed=11, **SAMPLE)
        c = pm.sample(100, tune=50, chains=1, step=step, random_seed=12, **SAMPLE)
    np.testing.assert_array_equal(a.posterior["b"], b.posterior["b"])
    for stat in step.stats_dtypes_shapes:
        np.testing.assert_array_equal(a.sample_stats[stat], b.sample_stats[stat], err_msg=stat)
    assert not np.array_equal(a.posterior["b"], c.posterior["b"])
    # the chain moved: a seed that changes nothing would make the test above vacuous
    assert np.unique(a.posterior["b"].values[0, :, 0]).size > 5


@pytest.mark.parametrize("name", STEP_IDS)
def test_two_cores_give_the_draws_of_one(logistic, step_cache, name):
    model, _ = logistic
    step = _get(step_cache, name)
    with model:
        one = pm.sample(100, tune=50, chains=2, cores=1, step=step, random_seed=21, **SAMPLE)
        two = pm.sample(100, tune=50, chains=2, cores=2, step=step, random_seed=21, **SAMPLE)
    np.testing.assert_array_equal(one.posterior["b"], two.posterior["b"])
    np.testing.assert_array_equal(one.sample_stats["n_data"], two.sample_stats["n_data"])
    np.testing.assert_array_equal(one.sample_stats["scaling"], two.sample_stats["scaling"])
    assert not np.array_equal(one.posterior["b"][0], one.posterior["b"][1])


@pytest.mark.slow
@pytest.mark.parametrize("mp_ctx", ["spawn", "forkserver"])
def test_mhss_start_methods_give_the_draws_of_one_core(logistic, step_cache, mp_ctx):
    model, _ = logistic
    step = _get(step_cache, "MHSS")
    with model:
        one = pm.sample(60, tune=30, chains=2, cores=1, step=step, random_seed=31, **SAMPLE)
        two = pm.sample(60, tune=30, chains=2, cores=2, step=step, random_seed=31,
                        mp_ctx=mp_ctx, **SAMPLE)
    np.testing.assert_array_equal(one.posterior["b"], two.posterior["b"])
    np.testing.assert_array_equal(one.sample_stats["n_data"], two.sample_stats["n_data"])


@pytest.mark.parametrize("name", STEP_IDS)
def test_every_declared_stat_has_its_dtype_and_shape(logistic, step_cache, name):
    model, _ = logistic
    step = _get(step_cache, name)
    with model:
        idata = pm.sample(80, tune=20, chains=2, step=step, random_seed=41, **SAMPLE)
    stats = idata.sample_stats
    for stat, (dtype, shape) in step.stats_dtypes_shapes.items():
        assert stat in stats, stat
        assert stats[stat].dtype == np.dtype(dtype), (stat, stats[stat].dtype)
        assert stats[stat].shape == (2, 80, *shape), (stat, stats[stat].shape)
    # and the values mean what they say
    accepted = stats["accepted"].values
    assert 0.0 < accepted.mean() <= 1.0
    n_data = stats["n_data"].values
    assert n_data.min() >= 0 and n_data.max() <= N_ROWS
    moved = np.any(np.diff(idata.posterior["b"].values, axis=1) != 0, axis=-1)
    np.testing.assert_array_equal(moved, accepted[:, 1:])
    assert np.all(stats["scaling"].values > 0)


@pytest.mark.parametrize("name", STEP_IDS)
def test_tuning_is_frozen_after_tune(logistic, step_cache, name):
    model, _ = logistic
    step = _get(step_cache, name)
    with model:
        idata = pm.sample(60, tune=120, chains=2, step=step, random_seed=51,
                          discard_tuned_samples=False, **SAMPLE)
    post = idata.sample_stats["scaling"].values
    assert np.all(post == post[:, :1]), "scaling moved after tuning"
    warm = idata.warmup_sample_stats["scaling"].values
    if name == "MHSS":
        # the pCN proposal cycles a grid of ρ during tuning
        assert np.all([np.unique(w).size > 1 for w in warm])
        assert np.all((warm >= 0) & (warm < 1))  # ρ ∈ [0, 1)


def _bad_knobs():
    cases = [
        (pms.MHSS, dict(cv_order=3), ValueError, r"cv_order must be 1 or 2"),
        (pms.MHSS, dict(cv_order=None), ValueError, r"cv_order must be 1 or 2.*AusterityMH"),
        (pms.MHSS, dict(proposal="hmc"), ValueError, r"proposal must be one of.*'hmc'"),
        (pms.AusterityMH, dict(epsilon=1.5), ValueError, r"epsilon.*1\.5"),
        (pms.AusterityMH, dict(epsilon=-0.1), ValueError, r"epsilon"),
        (pms.AusterityMH, dict(batch_size=0), ValueError, r"batch_size must be a positive"),
        (pms.BarkerMinibatch, dict(batch_size=0), ValueError, r"batch_size must be a positive"),
        (pms.BarkerMinibatch, dict(batch_size=10**6), ValueError, r"batch_size"),
        (pms.MHSS, dict(scaling=-1.0, proposal="random_walk"), ValueError, r"scaling.*positive"),
        (pms.MHSS, dict(init="map"), ValueError, r'init must be "laplace" or "pymc"'),
    ]
    for cls in (pms.MHSS, pms.AusterityMH, pms.BarkerMinibatch):
        for temperature in (0.0, -2.0, np.inf):
            cases.append((cls, dict(temperature=temperature), ValueError,
                          r"temperature must be a positive finite number"))
    return [pytest.param(*c, id=f"{c[0].__name__}-{c[1]}") for c in cases]


@pytest.mark.parametrize("cls, kwargs, exc, match", _bad_knobs())
def test_bad_knobs_are_refused(logistic, cls, kwargs, exc, match):
    model, map_point = logistic
    with model, pytest.raises(exc, match=match):
        cls(map_point=map_point, **kwargs)


def test_pcn_scaling_of_one_or_more_names_the_knob(logistic):
    model, map_point = logistic
    with model:
        with pytest.raises(ValueError, match=r"rho must be in \[0, 1\)") as err:
            pms.MHSS(proposal="pcn", scaling=1.5, map_point=map_point)
    assert "scaling=1.5" in str(err.value) and "random_walk" in str(err.value)


# ---------------------------------------------------------------- several observed variables


@pytest.fixture(scope="module")
def two_observed():
    """A Bernoulli and a Normal (known σ) on the same 1500 rows sharing the coefficients."""
    X, yb = glm_data(1500, 3, "logistic", seed=8)
    rng = np.random.default_rng(8)
    beta = np.array([0.5, -1.0, 0.3])
    yn = X @ beta + rng.normal(scale=2.0, size=1500)
    with pm.Model() as model:
        Xd = pm.Data("X", X)
        b = pm.Normal("b", 0, 10, shape=3)
        pm.Bernoulli("yb", logit_p=Xd @ b, observed=yb)
        pm.Normal("yn", mu=Xd @ b, sigma=2.0, observed=yn)
        map_point = pm.find_MAP(progressbar=False)
    return model, map_point


@pytest.mark.parametrize("name", STEP_IDS)
def test_several_observed_variables_on_the_same_rows(two_observed, name):
    model, map_point = two_observed
    cls, kwargs = STEPS[name]
    with model:
        step = cls(map_point=map_point, **kwargs)
        idata = pm.sample(300, tune=100, chains=1, step=step, random_seed=61, **SAMPLE)
    assert step.n_rows == 1500
    n_data = idata.sample_stats["n_data"].values
    assert n_data.dtype == np.int64 and n_data.min() >= 0 and n_data.max() <= 1500
    if name != "MHSS":  # every minibatch test reads at least one batch
        assert n_data.min() >= kwargs["batch_size"]
    # the draws sit around the joint mode of both likelihoods, not around one of them alone
    sd = np.sqrt(np.diag(step.frame.cov))
    mean = idata.posterior["b"].values.mean(axis=(0, 1))
    assert np.all(np.abs(mean - map_point["b"]) < 1.5 * sd), (mean, map_point["b"], sd)
    assert float(idata.sample_stats["accepted"].mean()) > 0.05


# ---------------------------------------------------------------- a Potential on the parameters


@pytest.fixture(scope="module")
def potential_model():
    """The contract logistic regression plus a soft constraint on b[0] as strong as the data."""
    X, y = glm_data(N_ROWS, 3, "logistic", seed=7)
    with pm.Model() as model:
        Xd = pm.Data("X", X)
        b = pm.Normal("b", 0, 10, shape=3)
        pm.Bernoulli("y", logit_p=Xd @ b, observed=y)
        pm.Potential("c", -200.0 * b[0] ** 2)
        nuts = pm.sample(1000, tune=500, chains=2, random_seed=71, **SAMPLE)
    return model, summary(nuts)


@pytest.mark.slow
@pytest.mark.parametrize("name", STEP_IDS)
def test_potential_on_the_parameters_matches_nuts(logistic, potential_model, name):
    model, (ref_mean, ref_sd, ref_mcse) = potential_model
    plain_mean = logistic[1]["b"]
    # the potential matters: it pulls b[0] many posterior sds towards 0
    assert abs(plain_mean[0] - ref_mean[0]) > 4 * ref_sd[0]
    cls, kwargs = STEPS[name]
    with model:
        idata = pm.sample(2500, tune=300, chains=2, step=cls(**kwargs), random_seed=72,
                          **SAMPLE)
    assert_matches(idata, ref_mean, ref_sd, ref_mcse, z_max=4.5, sd_rtol=0.15)


# ---------------------------------------------------------------- NUMBA backend


@pytest.mark.slow
def test_numba_backend_gives_the_draws_of_the_c_backend(logistic, step_cache):
    model, map_point = logistic
    c_step = _get(step_cache, "MHSS")
    with model:
        numba_step = pms.MHSS(map_point=map_point, compile_kwargs={"mode": "NUMBA"})
        a = pm.sample(150, tune=50, chains=1, step=c_step, random_seed=81, **SAMPLE)
        b = pm.sample(150, tune=50, chains=1, step=numba_step, random_seed=81, **SAMPLE)
    np.testing.assert_allclose(a.posterior["b"], b.posterior["b"], rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(a.sample_stats["n_data"], b.sample_stats["n_data"])
    np.testing.assert_array_equal(a.sample_stats["accepted"], b.sample_stats["accepted"])


# ---------------------------------------------------------------- UserBound with callables


def test_user_bound_callables_reproduce_the_automatic_bound(logistic):
    model, map_point = logistic
    calls = []
    with model:
        auto = pms.MHSS(cv_order=1, map_point=map_point)
        frame, lik = auto.frame, auto.likelihood

        def row_constants(theta_hat):
            calls.append(np.array(theta_hat))
            return glm_bound_constants(lik, theta_hat, 1, frame=frame)

        def whitened_m(theta, theta_new, theta_hat):
            return remainder_scale(frame.whiten(theta), frame.whiten(theta_new), 0 * theta, 1)

        user = pms.MHSS(cv_order=1, map_point=map_point,
                        bound=pms.UserBound(row_constants, remainder_scale=whitened_m))
        a = pm.sample(150, tune=30, chains=1, step=auto, random_seed=91, **SAMPLE)
        b = pm.sample(150, tune=30, chains=1, step=user, random_seed=91, **SAMPLE)
    # called once, at the reference point
    assert len(calls) == 1
    np.testing.assert_allclose(calls[0], auto.theta_hat)
    np.testing.assert_allclose(user.row_constants, auto.row_constants, rtol=1e-10)
    np.testing.assert_array_equal(a.posterior["b"], b.posterior["b"])
    np.testing.assert_array_equal(a.sample_stats["n_data"], b.sample_stats["n_data"])
    assert int(b.sample_stats["clipped"].sum()) == 0


@pytest.mark.parametrize("name", STEP_IDS)
def test_initvals_are_honoured_by_the_laplace_start(logistic, name):
    """init="laplace" draws the start from N(θ̂, V) unless the chain was given initvals."""
    model, _ = logistic
    cls, kwargs = STEPS[name]
    # a random walk too small to move far in one draw shows where the chain started
    kwargs = {**kwargs, "proposal": "random_walk", "scaling": 1e-6, "tune": False}
    kwargs.pop("target_accept", None)
    with model:
        step = cls(**kwargs)
        start = {"b": np.array([0.3, -0.2, 0.1])}
        given = pm.sample(1, tune=0, chains=1, step=step, random_seed=3, initvals=start,
                          **SAMPLE)
        default = pm.sample(1, tune=0, chains=1, step=step, random_seed=3, **SAMPLE)
    np.testing.assert_allclose(given.posterior["b"].values[0, 0], start["b"], atol=1e-4)
    first = default.posterior["b"].values[0, 0]
    sd = np.sqrt(np.diag(step.frame.cov))
    np.testing.assert_allclose(first, step.theta_hat, atol=8 * sd.max())
    assert np.abs(first - step.likelihood.ravel(step.likelihood.initial_point)).max() > 1e-3


# ---------------------------------------------------------------- one policy for non-finite values


@pytest.mark.parametrize("name", STEP_IDS)
def test_a_zero_prior_density_is_rejected_and_counted(logistic, name):
    """A hard cut in a Potential: proposals beyond it have log p0 = -inf, are rejected and
    counted in ``non_finite``; the chain never crosses the cut."""
    _, map_point = logistic
    X, y = glm_data(N_ROWS, 3, "logistic", seed=7)
    cut = float(map_point["b"][0]) + 0.05
    with pm.Model():
        Xd = pm.Data("X", X)
        b = pm.Normal("b", 0, 10, shape=3)
        pm.Bernoulli("y", logit_p=Xd @ b, observed=y)
        pm.Potential("cut", pm.math.switch(b[0] > cut, -np.inf, 0.0))
        cls, kwargs = STEPS[name]
        idata = pm.sample(300, tune=0, chains=1, step=cls(map_point=map_point, **kwargs),
                          random_seed=5, **SAMPLE)
    stats = idata.sample_stats
    non_finite = stats["non_finite"].values
    assert non_finite.sum() > 10
    assert not np.any(stats["accepted"].values & non_finite)
    assert np.all(idata.posterior["b"].values[..., 0] <= cut)


@pytest.mark.parametrize("cls", [pms.AusterityMH, pms.BarkerMinibatch])
def test_nan_row_terms_are_rejected_and_counted(cls):
    """``mu = log(c)`` is NaN for c < 0, where proposals often land: those proposals are
    rejected (not an error mid-sample) and counted; every draw keeps c > 0."""
    y = np.random.default_rng(3).normal(np.log(0.05), 1.0, size=50)
    with pm.Model():
        c = pm.Normal("c", 0.05, 1.0)
        pm.Normal("y", mu=pm.math.log(c), sigma=1.0, observed=y)
        step = cls(proposal_cov=np.array([[0.03**2]]), init="pymc", batch_size=10)
        idata = pm.sample(300, tune=0, chains=1, step=step, random_seed=6, **SAMPLE)
    stats = idata.sample_stats
    non_finite = stats["non_finite"].values
    assert non_finite.sum() > 10
    assert not np.any(stats["accepted"].values & non_finite)
    assert stats["accepted"].values.sum() > 10
    assert np.all(idata.posterior["c"].values > 0)
