"""AusterityMH posteriors against NUTS: close at ε = 0.01, visibly biased at ε = 0.2.

AusterityMH is approximate: its bias grows with ε (Korattikara et al. 2014, Theorem 1). It shows
mostly as too wide a posterior: a wrong decision near the threshold accepts downhill moves more
often than it rejects uphill ones. At ε = 0.01 the bias is below the tolerances used here; at
ε = 0.2 it is not. The Langevin (SGLD) proposal's q-ratio correction is checked with the exact
test (ε = 0), where any error in the correction would show as bias.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from pymc_subsample.datasets import glm_data, glm_model
from pymc_subsample.steps.austerity import AusterityMH
from tests.posterior import SAMPLE, assert_matches, summary

pytestmark = pytest.mark.slow

N_ROWS = 4000
#: The paper's setting, where ε's bias shows: a random walk on the raw differences (the
#: defaults, pCN with order-2 control variates, are in test_posterior_approx_defaults.py).
RANDOM_WALK = dict(proposal="random_walk", cv_order=None)


@pytest.fixture(scope="module")
def problem():
    X, y = glm_data(N_ROWS, 3, "logistic", seed=9)
    model = glm_model(X, y, "logistic")
    with model:
        map_point = pm.find_MAP(progressbar=False)
        ref = pm.sample(1000, tune=1000, chains=2, cores=1, random_seed=12, **SAMPLE)
    return model, map_point, summary(ref)


@pytest.fixture(scope="module")
def run(problem):
    model, map_point, _ = problem
    cache = {}

    def get(draws=3000, **kwargs):
        key = (draws, *sorted(kwargs.items()))
        if key not in cache:
            with model:
                step = AusterityMH(map_point=map_point, **kwargs)
                cache[key] = pm.sample(draws, tune=500, chains=2, cores=1, step=step,
                                       random_seed=13, **SAMPLE)
        return cache[key]

    return get


def test_epsilon_zero_is_exact_mh(problem, run):
    """ε = 0 (here as one batch of all rows) is exact MH: no bias beyond Monte Carlo error."""
    *_, (ref_mean, ref_sd, ref_mcse) = problem
    idata = run(epsilon=0.0, batch_size=N_ROWS)
    assert_matches(idata, ref_mean, ref_sd, ref_mcse)
    assert np.all(idata.sample_stats["exact_decision"].values)


def test_random_walk_close_to_nuts_at_epsilon_001(problem, run):
    *_, (ref_mean, ref_sd, ref_mcse) = problem
    idata = run(epsilon=0.01, batch_size=200, **RANDOM_WALK)
    # ε = 0.01 widens the posterior by ~5-15% here (wrong decisions accept downhill moves);
    # 20% is the tolerance the issue sets for sd.
    assert_matches(idata, ref_mean, ref_sd, ref_mcse, sd_rtol=0.2)
    frac = float(idata.sample_stats["n_data"].mean()) / N_ROWS
    assert frac < 0.9  # it does subsample


def test_control_variates_close_to_nuts_reading_one_batch(problem, run):
    *_, (ref_mean, ref_sd, ref_mcse) = problem
    idata = run(epsilon=0.01, batch_size=200, proposal="random_walk", cv_order=2)
    assert_matches(idata, ref_mean, ref_sd, ref_mcse)
    assert float(idata.sample_stats["n_data"].mean()) < 1.2 * 200


def test_bias_visibly_larger_at_epsilon_02(problem, run):
    *_, (ref_mean, ref_sd, ref_mcse) = problem

    def sd_error(idata):
        return float(np.max(np.abs(summary(idata)[1] / ref_sd - 1)))

    small = sd_error(run(epsilon=0.01, batch_size=200, **RANDOM_WALK))
    large = sd_error(run(epsilon=0.2, batch_size=200, **RANDOM_WALK))
    assert large > 0.5, large
    assert large > 4 * small, (small, large)


# The SGLD proposal: minibatch gradients are noisy, so steps are small and mixing is slow;
# a 500-row gradient batch and a 0.3 acceptance target keep the Monte Carlo error manageable.
SGLD = dict(proposal="langevin", gradient_batch_size=500, target_accept=0.3, draws=2500,
            cv_order=None)


def test_sgld_correction_exact_with_epsilon_zero(problem, run):
    """SGLD proposal (minibatch gradient shared by both directions) + exact MH test."""
    *_, (ref_mean, ref_sd, ref_mcse) = problem
    idata = run(epsilon=0.0, batch_size=N_ROWS, **SGLD)
    assert_matches(idata, ref_mean, ref_sd, ref_mcse, sd_rtol=0.2)
    assert np.all(idata.sample_stats["exact_decision"].values)


def test_sgld_proposal_with_austerity_test(problem, run):
    *_, (ref_mean, ref_sd, ref_mcse) = problem
    idata = run(epsilon=0.01, batch_size=200, **SGLD)
    assert_matches(idata, ref_mean, ref_sd, ref_mcse, sd_rtol=0.2)
    assert float(idata.sample_stats["n_data"].mean()) < 0.9 * N_ROWS


def test_surrogate_langevin_with_control_variates(problem, run):
    *_, (ref_mean, ref_sd, ref_mcse) = problem
    idata = run(draws=2000, epsilon=0.01, batch_size=200, proposal="langevin", cv_order=2)
    assert_matches(idata, ref_mean, ref_sd, ref_mcse)
    assert float(idata.sample_stats["accepted"].mean()) > 0.4
