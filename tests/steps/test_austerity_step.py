"""AusterityMH inside pm.sample and on fixed (θ, θ', u) triples; the Langevin proposal.

The kernel itself is tested on stubbed populations in ``tests/test_austerity.py``; here the
population is the real model's ``l_i`` (or control-variate remainders) through the step.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pymc as pm
import pytest

from pymc_subsample.datasets import glm_data, glm_model
from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.proposals.proposal import LangevinProposal
from pymc_subsample.steps.austerity import AusterityMH
from pymc_subsample.steps.rows_warning import ROWS_WARN_SHARE
from tests.steps.conftest import N_ROWS, SAMPLE


@pytest.fixture(scope="module")
def steps(step_cache):
    """One compiled AusterityMH per configuration, shared by the tests of this module."""
    return partial(step_cache, AusterityMH)


# ---------------------------------------------------------------------- stats through pm.sample
@pytest.mark.parametrize(
    "kwargs",
    [
        dict(epsilon=0.05, batch_size=200, proposal="random_walk", cv_order=None),
        dict(epsilon=0.05, batch_size=200, proposal="random_walk", cv_order=1),
        dict(epsilon=0.05, batch_size=200, proposal="langevin", gradient_batch_size=300,
             cv_order=None),
    ],
    ids=["random_walk", "cv1", "sgld"],
)
def test_stats_contract(logistic, steps, kwargs):
    model, _ = logistic
    step = steps(**kwargs)
    with model:
        idata = pm.sample(300, tune=200, chains=1, step=step, random_seed=1, **SAMPLE)
    stats = idata.sample_stats
    for name, (dtype, shape) in AusterityMH.stats_dtypes_shapes.items():
        assert name in stats, name
        assert stats[name].dtype == np.dtype(dtype), name
        assert stats[name].shape == (1, 300, *shape), name
    n_data = stats["n_data"].values.ravel()
    n_batches = stats["n_batches"].values.ravel()
    p_value = stats["p_value"].values.ravel()
    exact = stats["exact_decision"].values.ravel()
    assert np.all((n_data >= 1) & (n_data <= N_ROWS))
    np.testing.assert_array_equal(n_batches, np.ceil(n_data / kwargs["batch_size"]))
    np.testing.assert_array_equal(exact, n_data == N_ROWS)
    assert np.all(p_value[exact] == 0.0)
    assert np.all(p_value[~exact] < kwargs["epsilon"])
    assert (~exact).any()  # the test does stop early
    target = 0.574 if kwargs.get("proposal") == "langevin" else 0.234
    assert abs(float(stats["accepted"].mean()) - target) < 0.15


def test_epsilon_zero_reads_every_row(logistic, steps):
    model, _ = logistic
    with model:
        idata = pm.sample(30, tune=0, chains=1, step=steps(epsilon=0.0, batch_size=700),
                          random_seed=2, **SAMPLE)
    stats = idata.sample_stats
    assert np.all(stats["n_data"].values == N_ROWS)
    assert np.all(stats["n_batches"].values == 5)  # 4 x 700 + 200
    assert np.all(stats["exact_decision"].values)


@pytest.mark.parametrize(
    "kwargs",
    [dict(proposal="random_walk", cv_order=None),
     dict(proposal="langevin", gradient_batch_size=300, cv_order=None)],
    ids=["random_walk", "sgld"],
)
def test_random_seed_reproducible_and_cores_agree(logistic, steps, kwargs):
    """Same seed, same draws, also across processes (the step, with its compiled gradient
    closures, is pickled for cores=2)."""
    model, _ = logistic
    step = steps(epsilon=0.05, batch_size=200, **kwargs)
    kw = dict(tune=50, chains=2, step=step, **SAMPLE)
    with model:
        a = pm.sample(100, cores=1, random_seed=3, **kw)
        b = pm.sample(100, cores=1, random_seed=3, **kw)
        c = pm.sample(100, cores=2, random_seed=3, **kw)
        d = pm.sample(100, cores=1, random_seed=4, **kw)
    np.testing.assert_array_equal(a.posterior["b"], b.posterior["b"])
    np.testing.assert_array_equal(a.sample_stats["n_data"], b.sample_stats["n_data"])
    np.testing.assert_array_equal(a.posterior["b"], c.posterior["b"])
    np.testing.assert_array_equal(a.sample_stats["n_data"], c.sample_stats["n_data"])
    assert not np.array_equal(a.posterior["b"], d.posterior["b"])
    assert not np.array_equal(a.posterior["b"][0], a.posterior["b"][1])


def test_a_chain_reading_many_rows_warns_naming_epsilon(logistic, steps):
    """The random walk without control variates reads a large share of the rows: once 500
    draws after tuning average more than 10 % of N, the chain warns once, naming ε."""
    model, _ = logistic
    step = steps(epsilon=0.05, batch_size=200, proposal="random_walk", cv_order=None)
    with model, pytest.warns(UserWarning, match=r"AusterityMH read \d+ of the N = 3000 rows "
                             r"per iteration.*first 500 draws after tuning.*cv_order=2.*"
                             r"larger epsilon \(now 0.05\)") as record:
        idata = pm.sample(600, tune=50, chains=1, step=step, random_seed=1, **SAMPLE)
    assert float(idata.sample_stats["n_data"].mean()) > ROWS_WARN_SHARE * N_ROWS
    assert sum("rows per iteration" in str(w.message) for w in record) == 1  # once a chain


def test_defaults_read_few_rows_and_do_not_warn(logistic, steps, recwarn):
    model, _ = logistic
    step = steps()
    assert (step.proposal_kind, step.cv_order, step.batch_size) == ("pcn", 2, 100)
    with model:
        idata = pm.sample(600, tune=300, chains=1, step=step, random_seed=1, **SAMPLE)
    assert float(idata.sample_stats["n_data"].mean()) < ROWS_WARN_SHARE * N_ROWS
    assert not any("rows per iteration" in str(w.message) for w in recwarn)


def test_tuning_starts_from_requested_scaling_in_every_chain(logistic):
    model, map_point = logistic
    with model:
        step = AusterityMH(epsilon=0.05, batch_size=500, cv_order=2, map_point=map_point,
                           proposal="random_walk", scaling=8.0)
        idata = pm.sample(50, tune=200, chains=2, step=step, random_seed=5,
                          discard_tuned_samples=False, **SAMPLE)
    kappa = idata.warmup_sample_stats["scaling"].values
    np.testing.assert_allclose(kappa[:, 0], 8.0, rtol=0.2)
    assert np.all(kappa[:, -1] < 5.0)
    post = idata.sample_stats["scaling"].values
    assert np.all(post == post[:, :1])


# ---------------------------------------------------------------------- fixed (θ, θ', u) triples
EPSILONS = (0.0, 0.001, 0.01, 0.1, 0.3)
TRIPLE_BATCH = 150


@pytest.fixture(scope="module")
def triples(steps):
    """Triples around the posterior: θ ~ Laplace, θ' = θ + (2.4/√d)·chol(V)·z, u ~ U(0, 1).

    Returns the triples, their exact MH decisions (full-data Σ l_i against log u − log_rest,
    i.e. Σ l_i against N·μ0) and the row counts and decisions of the sequential test for each
    ε, with and without control variates.
    """
    step = steps(epsilon=0.0, batch_size=TRIPLE_BATCH, cv_order=None)
    lik = step.likelihood
    rng = np.random.default_rng(11)
    chol = np.linalg.cholesky(step.frame.cov)
    out = []
    for _ in range(300):
        theta = step.theta_hat + chol @ rng.standard_normal(lik.dim)
        theta_new = theta + 2.4 / math.sqrt(lik.dim) * (chol @ rng.standard_normal(lik.dim))
        log_u = math.log1p(-rng.random())
        log_rest = lik.logp0(theta_new) - lik.logp0(theta)
        out.append((theta, theta_new, log_u, log_rest))
    exact = np.array([step.loglik_diff_sum(t, tn) > lu - lr for t, tn, lu, lr in out])
    results = {}
    for cv_order in (None, 2):
        s = steps(epsilon=0.0, batch_size=TRIPLE_BATCH, cv_order=cv_order)
        for eps in EPSILONS:
            rng = np.random.default_rng(12)
            res = [s.sequential_test(*t, epsilon=eps, rng=rng) for t in out]
            results[cv_order, eps] = (
                np.array([r.accepted for r in res]),
                np.array([r.n_data for r in res]),
            )
    return out, exact, results


def test_triples_are_informative(triples):
    _, exact, _ = triples
    assert 0.2 < exact.mean() < 0.8  # neither always-accept nor always-reject


@pytest.mark.parametrize("cv_order", [None, 2])
def test_wrong_decisions_vanish_at_epsilon_zero_and_shrink_with_epsilon(triples, cv_order):
    _, exact, results = triples
    wrong = {eps: float(np.mean(results[cv_order, eps][0] != exact)) for eps in EPSILONS}
    assert wrong[0.0] == 0.0
    assert np.all(results[cv_order, 0.0][1] == N_ROWS)
    if cv_order is None:
        assert wrong[0.3] > wrong[0.1] > wrong[0.01] >= wrong[0.001], wrong
        assert wrong[0.3] >= 0.05  # the knob really is a knob
    else:  # near the mode the remainder test is nearly always right
        assert wrong[0.3] >= wrong[0.01] >= wrong[0.001], wrong
        assert wrong[0.01] <= 0.01, wrong


@pytest.mark.parametrize("cv_order", [None, 2])
def test_rows_read_shrink_as_epsilon_grows(triples, cv_order):
    _, _, results = triples
    rows = [results[cv_order, eps][1].mean() for eps in EPSILONS]
    assert rows[0] == N_ROWS
    assert all(a > b for a, b in zip(rows, rows[1:], strict=False)) or cv_order == 2, rows
    assert rows[-1] < 0.5 * N_ROWS


def test_control_variates_cut_rows(triples):
    _, _, results = triples
    plain = results[None, 0.01][1].mean()
    with_cv = results[2, 0.01][1].mean()
    assert plain > 8 * with_cv, (plain, with_cv)


def test_exact_decision_uses_the_prior_ratio(triples, steps):
    """Dropping log_rest would change decisions: the prior term really enters μ0."""
    out, exact, _ = triples
    step = steps(epsilon=0.0, batch_size=TRIPLE_BATCH, cv_order=None)
    shifted = [(t, tn, lu, lr + 5.0) for t, tn, lu, lr in out[:60]]
    rng = np.random.default_rng(0)
    acc = np.array([step.sequential_test(*t, rng=rng).accepted for t in shifted])
    acc_ref = np.array([step.loglik_diff_sum(t, tn) > lu - lr for t, tn, lu, lr in shifted])
    np.testing.assert_array_equal(acc, acc_ref)
    assert (acc != exact[:60]).any()


def test_zero_density_proposal_rejected_without_reading(steps):
    step = steps(epsilon=0.0, batch_size=TRIPLE_BATCH)
    theta = step.theta_hat
    for log_rest in (-np.inf, np.nan):
        res = step.sequential_test(theta, theta + 0.01, -0.1, log_rest)
        assert not res.accepted and res.n_data == 0


# ---------------------------------------------------------------------- Langevin proposal
def _gaussian_target_mh(n_iter: int, use_q_ratio: bool, seed: int) -> np.ndarray:
    """Exact MH on N(0, 1) with a Langevin proposal whose gradient is −θ + b, b ~ N(0, 1)
    drawn once per proposal (an SGLD-like noisy gradient, shared by the forward and reverse
    densities). ``use_q_ratio=False`` is the mistake of treating the proposal as symmetric."""
    rng = np.random.default_rng(seed)

    def draw(r):
        b = r.standard_normal()
        return lambda th: -th + b

    prop = LangevinProposal(np.eye(1), 0.8, draw)
    theta, out = np.zeros(1), np.empty(n_iter)
    for i in range(n_iter):
        theta_new, log_q = prop.propose(rng, theta)
        log_ratio = -0.5 * float(theta_new @ theta_new - theta @ theta)
        if math.log1p(-rng.random()) < log_ratio + (log_q if use_q_ratio else 0.0):
            theta = theta_new
        out[i] = theta[0]
    return out


def test_noisy_gradient_langevin_with_q_ratio_is_exact():
    draws = _gaussian_target_mh(15_000, use_q_ratio=True, seed=1)
    assert abs(draws.mean()) < 0.06
    assert abs(draws.var() - 1.0) < 0.08


def test_noisy_gradient_langevin_without_q_ratio_is_biased():
    draws = _gaussian_target_mh(15_000, use_q_ratio=False, seed=1)
    assert draws.var() < 0.8  # the q ratio matters: the check above can fail


def test_langevin_log_ratio_matches_densities():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(3, 3))
    cov = a @ a.T + np.eye(3)
    prec = np.linalg.inv(cov) * 2.0
    offsets = []

    def draw(r):
        b = r.normal(size=3)
        offsets.append(b)
        return lambda th: -prec @ th + b

    prop = LangevinProposal(cov, 0.7, draw)
    theta = rng.normal(size=3)
    theta_new, log_q = prop.propose(np.random.default_rng(4), theta)
    assert len(offsets) == 1  # one gradient function per proposal, used at θ and θ'
    g = -prec @ theta + offsets[0]
    g_new = -prec @ theta_new + offsets[0]
    direct = prop.log_density(theta, theta_new, g_new) - prop.log_density(theta_new, theta, g)
    assert log_q == pytest.approx(direct, rel=1e-10, abs=1e-10)
    assert abs(log_q) > 1e-3  # asymmetric


def test_langevin_non_finite_gradient_rejects():
    prop = LangevinProposal(np.eye(2), 0.5, lambda r: (lambda th: np.full(2, np.nan)))
    _, log_q = prop.propose(np.random.default_rng(0), np.zeros(2))
    assert log_q == -np.inf


def test_minibatch_gradient_is_the_exact_gradient_with_all_rows(logistic, steps):
    model, _ = logistic
    step = steps(epsilon=0.05, batch_size=200, proposal="langevin",
                 gradient_batch_size=N_ROWS)
    dlogp = model.compile_dlogp()
    rng = np.random.default_rng(5)
    theta = step.theta_hat + 0.05 * rng.normal(size=step.likelihood.dim)
    grad_fn = step.gradient_draw(rng)
    np.testing.assert_allclose(grad_fn(theta), dlogp(step.likelihood.unravel(theta)),
                               rtol=1e-8, atol=1e-8)


def test_minibatch_gradient_is_unbiased(logistic, steps):
    model, _ = logistic
    step = steps(epsilon=0.05, batch_size=200, proposal="langevin", gradient_batch_size=300)
    assert step.proposal_rows == 300 and step.langevin_gradient == "minibatch"
    rng = np.random.default_rng(6)
    theta = step.theta_hat + 0.05 * rng.normal(size=step.likelihood.dim)
    exact = model.compile_dlogp()(step.likelihood.unravel(theta))
    est = np.array([step.gradient_draw(rng)(theta) for _ in range(400)])
    se = est.std(axis=0) / np.sqrt(len(est))
    assert np.all(np.abs(est.mean(axis=0) - exact) < 4.5 * se)
    assert np.all(est.std(axis=0) > 0)  # really a minibatch estimate


def test_surrogate_gradient_is_exact_at_the_mode_and_default_with_cv(logistic, steps):
    model, _ = logistic
    step = steps(epsilon=0.05, batch_size=200, proposal="langevin", cv_order=2)
    assert step.langevin_gradient == "surrogate" and step.proposal_rows == 0
    assert step.target_accept == pytest.approx(0.574)
    grad_fn = step.gradient_draw(np.random.default_rng(0))
    dlogp = model.compile_dlogp()
    at_mode = dlogp(step.likelihood.unravel(step.theta_hat))
    np.testing.assert_allclose(grad_fn(step.theta_hat), at_mode, atol=1e-6)
    theta = step.theta_hat + 0.02
    # a quadratic expansion: close near the mode, not identical
    np.testing.assert_allclose(grad_fn(theta), dlogp(step.likelihood.unravel(theta)),
                               rtol=0.05, atol=0.5)


def test_surrogate_gradient_exact_for_gaussian_regression():
    X, y = glm_data(500, 2, "gaussian", seed=2)
    model = glm_model(X, y, "gaussian")
    with model:
        step = AusterityMH(batch_size=100, proposal="langevin", langevin_gradient="surrogate",
                           proposal_cov=np.eye(2) * 1e-3)
    theta = np.array([0.7, -1.3])
    np.testing.assert_allclose(step.gradient_draw(None)(theta),
                               model.compile_dlogp()(step.likelihood.unravel(theta)),
                               rtol=1e-8)


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(epsilon=-0.1), ValueError, r"epsilon must be in \[0, 1\)"),
        (dict(epsilon=1.0), ValueError, r"epsilon must be in \[0, 1\)"),
        (dict(epsilon=float("nan")), ValueError, r"epsilon must be in \[0, 1\)"),
        (dict(batch_size=0), ValueError, "batch_size must be a positive integer"),
        (dict(batch_size=-3), ValueError, "batch_size must be a positive integer"),
        (dict(batch_size=2.5), TypeError, "batch_size must be an integer"),
        (dict(proposal="hmc"), ValueError, "proposal must be one of"),
        (dict(proposal="langevin", langevin_gradient="exact"), ValueError,
         "langevin_gradient must be one of"),
        (dict(proposal="langevin", gradient_batch_size=0), ValueError,
         "gradient_batch_size must be a positive integer"),
        (dict(langevin_gradient="minibatch"), ValueError, "only apply to proposal='langevin'"),
    ],
)
def test_knob_errors_before_any_model_setup(kwargs, error, match):
    """Raised before the model is analysed: this model has no data at all."""
    with pm.Model():
        pm.Normal("a")
        with pytest.raises(error, match=match):
            AusterityMH(**kwargs)
        with pytest.raises(SubsamplingModelError, match="no observed variables"):
            AusterityMH()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(batch_size=N_ROWS + 1), r"batch_size must be in \[1, n_total\] = \[1, 3000\]"),
        (dict(proposal="langevin", gradient_batch_size=N_ROWS + 1),
         r"gradient_batch_size must be in \[1, N\] = \[1, 3000\]"),
        (dict(cv_order=3), "cv_order must be 1 or 2"),
        (dict(temperature=0.0), "temperature must be a positive"),
        (dict(scaling=-1.0, proposal="random_walk"), "scaling must be a positive"),
        (dict(proposal_cov=np.eye(2)), "proposal_cov has shape"),
    ],
)
def test_errors_needing_the_model(logistic, kwargs, match):
    model, map_point = logistic
    with model, pytest.raises(ValueError, match=match):
        AusterityMH(map_point=map_point, **kwargs)


def test_foundation_rejects_partial_vars_and_per_row_latents():
    X, y = glm_data(50, 2, "gaussian")
    with pm.Model():
        b = pm.Normal("b", shape=2)
        sigma = pm.HalfNormal("sigma")
        pm.Normal("y", mu=X @ b, sigma=sigma, observed=y)
        with pytest.raises(SubsamplingModelError, match="every free variable"):
            AusterityMH(vars=[b], batch_size=10)  # sigma would be left to another step
    with pm.Model():
        z = pm.Normal("z", shape=50)
        pm.Normal("y", mu=z, observed=y)
        with pytest.raises(SubsamplingModelError, match="per-row latent"):
            AusterityMH(batch_size=10)
