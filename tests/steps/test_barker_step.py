"""BarkerMinibatch inside pm.sample and on fixed (θ, θ') pairs: wiring, stats, seeding, errors.

The kernel is tested on stubbed rows in ``tests/test_barker.py``; here the rows are a real
model's ``l_i`` (or control-variate remainders) through the step, and ``Δ`` is recomputed
independently from the PyMC model's own log densities.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pymc as pm
import pytest
from scipy.special import expit

from pymc_subsample.datasets import glm_data, glm_model
from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.kernels.barker_correction import SIGMA_MAX
from pymc_subsample.steps.barker import BarkerMinibatch
from tests.steps.conftest import N_ROWS, SAMPLE


@pytest.fixture(scope="module")
def steps(step_cache):
    """One compiled BarkerMinibatch per configuration, shared by the tests of this module."""
    return partial(step_cache, BarkerMinibatch)


# ---------------------------------------------------------------------- stats through pm.sample
@pytest.mark.parametrize(
    "kwargs",
    [dict(batch_size=100, cv_order=2, proposal="random_walk"),
     dict(batch_size=50, temperature=8.0, proposal="random_walk", cv_order=None)],
    ids=["cv2", "no_cv_hot"],
)
def test_stats_contract(logistic, steps, kwargs):
    model, _ = logistic
    with model:
        idata = pm.sample(300, tune=300, chains=1, step=steps(**kwargs), random_seed=1, **SAMPLE)
    stats = idata.sample_stats
    for name, (dtype, shape) in BarkerMinibatch.stats_dtypes_shapes.items():
        assert name in stats, name
        assert stats[name].dtype == np.dtype(dtype), name
        assert stats[name].shape == (1, 300, *shape), name
    m = kwargs["batch_size"]
    n_data = stats["n_data"].values.ravel()
    s2 = stats["s2"].values.ravel()
    error = stats["error_bound"].values.ravel()
    full = n_data == N_ROWS
    assert np.all((n_data % m == 0) | full) and np.all(n_data >= m)
    assert np.all((s2 >= 0) & (s2 < 1.0))  # the test only decides once s² < σ² = 1
    assert np.all(s2[full] == 0) and np.all(error[full] == 0)
    # Corollary 1 estimate: never below 8.4/√b for a partial read
    assert np.all(error[~full] >= 8.4 / np.sqrt(n_data[~full]) * (1 - 1e-12))
    if kwargs["cv_order"] is not None:
        assert np.all(n_data == m)  # remainders: the first minibatch is always enough
        assert float(s2.max()) < 0.05
    else:
        assert (n_data > m).any()  # the batch does grow
    assert abs(float(stats["accepted"].mean()) - BarkerMinibatch.default_target_accept) < 0.12


def test_random_seed_reproducible_and_cores_agree(logistic, steps):
    model, _ = logistic
    step = steps(batch_size=50, temperature=8.0, proposal="random_walk", cv_order=None)
    kw = dict(tune=50, chains=2, step=step, **SAMPLE)
    with model:
        a = pm.sample(100, cores=1, random_seed=3, **kw)
        b = pm.sample(100, cores=1, random_seed=3, **kw)
        c = pm.sample(100, cores=2, random_seed=3, **kw)
        d = pm.sample(100, cores=1, random_seed=4, **kw)
    for name in ("n_data", "s2"):
        np.testing.assert_array_equal(a.sample_stats[name], b.sample_stats[name])
        np.testing.assert_array_equal(a.sample_stats[name], c.sample_stats[name])
    np.testing.assert_array_equal(a.posterior["b"], b.posterior["b"])
    np.testing.assert_array_equal(a.posterior["b"], c.posterior["b"])
    assert not np.array_equal(a.posterior["b"], d.posterior["b"])
    assert not np.array_equal(a.posterior["b"][0], a.posterior["b"][1])


def test_a_chain_reading_many_rows_warns_naming_batch_size(logistic, steps):
    model, _ = logistic
    step = steps(batch_size=400)  # 13 % of N: every test reads at least that
    with model, pytest.warns(UserWarning, match=r"BarkerMinibatch read \d+ of the N = 3000 "
                             r"rows per iteration.*smaller batch_size \(now 400\)"):
        pm.sample(520, tune=50, chains=1, step=step, random_seed=1, **SAMPLE)


def test_defaults_tune_pcn_by_jump_distance_with_a_barker_acceptance_floor(logistic, steps,
                                                                           recwarn):
    """pCN's floor 0.7 is a Metropolis rate Barker never reaches; in Barker's terms it is
    0.7/1.7, and tuning then picks a ρ well below the most-accepted 0.93–0.97."""
    model, _ = logistic
    step = steps()
    assert (step.proposal_kind, step.cv_order, step.batch_size) == ("pcn", 2, 100)
    assert step._tuner.min_accept == pytest.approx(0.7 / 1.7)
    with model:
        idata = pm.sample(600, tune=700, chains=1, step=step, random_seed=2, **SAMPLE)
    assert step.proposal.parameter <= 0.7
    assert 0.35 < float(idata.sample_stats["accepted"].mean()) < 0.6
    assert np.all(idata.sample_stats["n_data"].values == 100)
    assert not any("rows per iteration" in str(w.message) for w in recwarn)


def test_tuning_moves_scale_toward_target_then_freezes(logistic):
    model, map_point = logistic
    with model:
        step = BarkerMinibatch(batch_size=100, cv_order=2, map_point=map_point, scaling=8.0,
                               proposal="random_walk")
        idata = pm.sample(400, tune=400, chains=2, step=step, random_seed=5,
                          discard_tuned_samples=False, **SAMPLE)
    kappa = idata.warmup_sample_stats["scaling"].values
    post = idata.sample_stats["scaling"].values
    np.testing.assert_allclose(kappa[:, 0], 8.0, rtol=0.2)  # every chain starts afresh
    assert np.all(kappa[:, -1] < 5.0)
    assert np.all(post == post[:, :1])
    assert abs(float(idata.sample_stats["accepted"].mean()) - 0.2) < 0.08


# ---------------------------------------------------------------------- wiring on fixed pairs
K_WIRING = 16.0
# (θ, θ' − θ) on the model below; prior and likelihood both move Δ by more than 0.6, and at
# batch 100 without control variates s² ≈ 0.47 ("one_batch") or ≈ 2.6 ("grows").
PAIRS = {
    "one_batch": ([1.06, -0.59, -0.37], [0.10, -0.13, 0.07]),
    "grows": ([1.06, -0.74, -0.02], [-0.06, 0.30, 0.19]),
}


@pytest.fixture(scope="module")
def wiring():
    """Logistic regression with a tight prior at temperature 16, its steps and the exact Δ."""
    X, y = glm_data(2000, 3, "logistic", seed=11)
    model = glm_model(X, y, "logistic", prior_sd=0.5)
    cov = np.eye(3) * 0.01
    with model:
        map_point = pm.find_MAP(progressbar=False)
        built = {
            "none": BarkerMinibatch(batch_size=100, temperature=K_WIRING, proposal_cov=cov,
                                    cv_order=None),
            "cv2": BarkerMinibatch(batch_size=100, temperature=K_WIRING, cv_order=2,
                                   map_point=map_point),
            "full": BarkerMinibatch(batch_size=2000, temperature=K_WIRING, proposal_cov=cov,
                                    cv_order=None),
        }
    # Δ from PyMC's own densities, independently of the subsampled likelihood layer
    prior = model.compile_logp(vars=model.free_RVs)
    loglik = model.compile_logp(vars=model.observed_RVs)

    def exact(theta, theta_new):
        d_prior = prior({"b": theta_new}) - prior({"b": theta})
        d_lik = (loglik({"b": theta_new}) - loglik({"b": theta})) / K_WIRING
        return float(d_prior + d_lik), float(d_prior), float(d_lik)

    return built, exact


def _pair(name):
    theta, h = PAIRS[name]
    return np.array(theta), np.array(theta) + np.array(h)


@pytest.mark.parametrize("pair", list(PAIRS))
@pytest.mark.parametrize("which", ["none", "cv2", "full"])
def test_acceptance_probability_is_logistic_of_exact_delta(wiring, pair, which):
    built, exact = wiring
    step = built[which]
    theta, theta_new = _pair(pair)
    delta, d_prior, d_lik = exact(theta, theta_new)
    assert abs(d_prior) > 0.6 and abs(d_lik) > 0.6  # a dropped term would show
    rng = np.random.default_rng([5, len(pair), len(which)])
    draws = 3000
    results = [step.barker_test(theta, theta_new, d_prior, rng=rng) for _ in range(draws)]
    rate = np.mean([r.accepted for r in results])
    n_data = np.array([r.n_data for r in results])
    p = expit(delta)
    tol = 4.5 * math.sqrt(p * (1 - p) / draws) + step.correction.linf_error(refine=1)
    assert abs(rate - p) < tol, (rate, p)
    if which == "full":
        assert np.all(n_data == 2000) and all(r.s2 == 0 and r.error_bound == 0 for r in results)
    elif which == "cv2":
        assert np.all(n_data == 100)
    elif pair == "grows":
        assert n_data.mean() > 150  # the growth path is exercised
    else:
        assert np.median(n_data) == 100


def test_delta_bound_forces_larger_batches(wiring):
    built, exact = wiring
    theta, theta_new = _pair("one_batch")
    with built["none"].likelihood.model:
        step = BarkerMinibatch(batch_size=100, temperature=K_WIRING, delta=0.3,
                               proposal_cov=np.eye(3) * 0.01, cv_order=None)
    rng = np.random.default_rng(9)
    results = [step.barker_test(theta, theta_new, exact(theta, theta_new)[1], rng=rng)
               for _ in range(30)]
    for r in results:
        assert r.n_data % 100 == 0 and r.n_data >= (8.4 / 0.3) ** 2  # ≥ 784 rows
        assert r.n_data == 2000 or r.error_bound <= 0.3


def test_non_finite_terms_reject(wiring, monkeypatch):
    built, _ = wiring
    step = built["none"]
    theta, theta_new = _pair("one_batch")
    rng = np.random.default_rng(0)
    for rest in (math.nan, -math.inf):
        r = step.barker_test(theta, theta_new, rest, rng=rng)
        assert not r.accepted and r.n_data == 0
    monkeypatch.setattr(
        step.likelihood, "loglik_diff", lambda t, t_new, idx: np.full(idx.shape, np.nan)
    )
    r = step.barker_test(theta, theta_new, 0.0, rng=rng)
    assert not r.accepted and r.n_data == 100


# ---------------------------------------------------------------------- errors
X_SMALL, Y_SMALL = glm_data(60, 2, "logistic", seed=3)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(batch_size=0), ValueError, r"batch_size must be a positive integer.*batch_size=0"),
        (dict(batch_size=-5), ValueError, "batch_size must be a positive integer"),
        (dict(batch_size=1), ValueError, r"batch_size must be an integer >= 2"),
        (dict(batch_size=2.5), TypeError, "batch_size must be an integer"),
        (dict(batch_size=61), ValueError, r"batch_size must be at most .* N = 60.*batch_size=61"),
        (dict(temperature=0.0), ValueError, "temperature must be a positive finite number"),
        (dict(temperature=-2.0), ValueError, "temperature must be a positive finite number"),
        (dict(temperature=math.inf), ValueError, "temperature must be a positive finite"),
        (dict(sigma=0.0), ValueError, r"0 < sigma < pi/sqrt\(3\)"),
        (dict(sigma=SIGMA_MAX), ValueError, r"room for the\s+correction variable X_corr"),
        (dict(sigma=2.0), ValueError, "sigma must satisfy"),
        (dict(delta=0.0), ValueError, r"delta must be in \(0, 1\)"),
        (dict(delta=1.5), ValueError, r"delta must be in \(0, 1\)"),
        (dict(cv_order=3), ValueError, "cv_order"),
        (dict(proposal_cov=np.eye(3)), ValueError, "proposal_cov has shape"),
    ],
)
def test_bad_knobs(kwargs, exc, match):
    with glm_model(X_SMALL, Y_SMALL, "logistic"):
        kwargs.setdefault("batch_size", 20)
        with pytest.raises(exc, match=match):
            BarkerMinibatch(proposal_cov=kwargs.pop("proposal_cov", np.eye(2)), **kwargs)


def test_batch_size_equal_to_n_is_allowed():
    with glm_model(X_SMALL, Y_SMALL, "logistic"):
        step = BarkerMinibatch(batch_size=60, proposal_cov=np.eye(2) * 0.01, cv_order=None)
    assert step.batch_size == step.n_rows == 60


def _mixture_model():
    x = np.random.default_rng(0).normal(size=50)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1, shape=2)
        pm.NormalMixture("x", w=[0.5, 0.5], mu=mu, sigma=1.0, observed=x)
    return model


def test_cheap_knobs_checked_before_model_analysis():
    # the knob error comes before any model analysis (no setup cost)
    with _mixture_model():
        with pytest.raises(ValueError, match="batch_size must be a positive integer"):
            BarkerMinibatch(batch_size=0)
        with pytest.raises(ValueError, match="sigma must satisfy"):
            BarkerMinibatch(sigma=5.0)


def test_foundation_errors_pass_through():
    with pm.Model() as two:
        a = pm.Normal("a", 0, 1)
        s = pm.HalfNormal("s", 1)
        pm.Normal("y", a, s, observed=Y_SMALL.astype(float))
    with two, pytest.raises(SubsamplingModelError, match="every free variable"):
        BarkerMinibatch([a], batch_size=10, proposal_cov=np.eye(1))
