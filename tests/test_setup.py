"""The build of a step, alone: :func:`pymc_subsample.model.setup.build_setup` on a small
logistic regression, without a step or PyMC's sampler."""

from __future__ import annotations

import numpy as np
import pytest

from pymc_subsample.datasets import glm_data, glm_model
from pymc_subsample.model.passes import GLMPass
from pymc_subsample.model.setup import Setup, build_setup, glm_data_pass
from pymc_subsample.proposals.proposal import PCNProposal, RandomWalkProposal
from pymc_subsample.proposals.tuning import ESJDTuner, ScaleAdapter


@pytest.fixture(scope="module")
def model():
    X, y = glm_data(400, 3, "logistic", seed=3)
    return glm_model(X, y, "logistic")


def test_a_setup_holds_the_pieces_of_a_step(model):
    setup = build_setup(model=model, cv_order=2, proposal="pcn", data_pass=glm_data_pass,
                        bound_order=2)
    assert isinstance(setup, Setup)
    assert [v.name for v in setup.user_vars] == ["b"] and setup.centring is None
    assert setup.likelihood.n_rows == 400 and setup.likelihood.dim == 3
    assert isinstance(setup.reference_pass, GLMPass)
    # θ̂ is the reference fit's, and the frame whitens it to 0
    np.testing.assert_array_equal(setup.theta_hat, setup.reference.theta_hat)
    np.testing.assert_allclose(setup.frame.whiten(setup.theta_hat), 0.0, atol=1e-12)
    assert setup.reference.row_constants.shape == (400,)
    # order-2 control variates are exact at θ̂ to second order: tiny remainders nearby
    theta = setup.theta_hat
    theta_new = setup.frame.unwhiten(np.full(3, 1e-3))
    cv_sum, rows = setup.row_differences(theta, theta_new, np.asarray)
    exact = setup.likelihood.loglik_diff(theta, theta_new, np.arange(400)).sum()
    assert abs(cv_sum + rows(np.arange(400)).sum() - exact) < 1e-9
    assert np.max(np.abs(rows(np.arange(400)))) < 1e-6
    # pCN tuned by jump distance per cost: no acceptance-rate adapter
    assert isinstance(setup.proposal, PCNProposal) and setup.proposal_kind == "pcn"
    assert setup.adapter is None and setup.target_accept is None
    assert isinstance(setup.tuner, ESJDTuner)
    assert setup.init == "laplace" and setup.pymc_default_start.shape == (3,)
    # PyMC's own start point, read once (the likelihood's) rather than compiled again
    np.testing.assert_array_equal(setup.pymc_default_start,
                                  np.ravel(model.initial_point()["b"]))
    assert setup.setup_profile["full_data_passes"] == setup.reference.full_data_passes >= 1
    draw = setup.laplace_draw(np.random.default_rng(0), fallback=np.zeros(3))
    assert np.isfinite(setup.likelihood.logp0(draw)) and not np.allclose(draw, 0.0)


def test_a_random_walk_with_a_covariance_needs_no_reference_point(model):
    setup = build_setup(model=model, proposal_cov=np.eye(3), default_target_accept=0.234)
    assert setup.reference is None and setup.reference_pass is None
    assert setup.theta_hat is None and setup.control_variate is None
    assert setup.setup_profile["full_data_passes"] == 0 and setup.init == "pymc"
    assert isinstance(setup.proposal, RandomWalkProposal)
    assert setup.target_accept == 0.234 and isinstance(setup.adapter, ScaleAdapter)


def test_target_accept_is_refused_for_a_proposal_it_cannot_tune(model):
    with pytest.raises(ValueError, match="target_accept only applies"):
        build_setup(model=model, proposal="pcn", target_accept=0.3)


def test_a_centred_hierarchical_model_reaches_its_mode_in_three_passes():
    """From PyMC's initial point (group effects at zero, the mouth of the funnel) the search
    runs on a subsample, not in passes over all N rows (issue 31: 18 passes at 10⁵ rows)."""
    from pymc_subsample.datasets import random_effects_data, random_effects_model

    x, group, y = random_effects_data(50_000, 5, 50, seed=1)
    with random_effects_model(x, group, y):
        setup = build_setup(cv_order=2, proposal="pcn", data_pass=glm_data_pass, bound_order=2)
    assert setup.setup_profile["full_data_passes"] <= 3
    assert setup.reference.newton_distance <= 0.25  # a mode, to the default tolerance


def test_random_intercepts_after_a_warm_start_take_few_subsample_evaluations(monkeypatch):
    """A subsample of 10⁵ rows or more starts on a tenth of them; from there Newton on the
    whole subsample moves the group scale with the rest (no run with it held first) and stops
    at 0.25 of the subsample's sds: 3 or 4 evaluations on the 10⁵ rows here, where holding the
    scale first and converging to 10⁻³ took 8 (issue 31), for the same full-data passes."""
    from pymc_subsample.datasets import random_effects_data, random_effects_model

    sizes = []
    full = GLMPass.full

    def counted(self, theta, **kwargs):
        chunks = kwargs.get("idx_chunks")
        sizes.append(None if chunks is None else sum(len(c) for c in chunks))
        return full(self, theta, **kwargs)

    monkeypatch.setattr(GLMPass, "full", counted)
    x, group, y = random_effects_data(400_000, 10, 100, seed=2)
    with random_effects_model(x, group, y):
        setup = build_setup(cv_order=2, proposal="pcn", data_pass=glm_data_pass, bound_order=2)
    assert setup.reference_pass.levels is not None  # rows split by level: the arrow sums
    assert 1 <= sizes.count(100_000) <= 4  # the subsample: N/4 rows
    assert setup.setup_profile["full_data_passes"] == sizes.count(None) <= 3
    assert setup.reference.newton_distance <= 0.25
