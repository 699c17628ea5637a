"""Proposals in the whitened frame: q-ratios, exactness against a known posterior, tuning."""

from __future__ import annotations

import arviz as az
import numpy as np
import pymc as pm
import pytest
from scipy import stats

import pymc_subsample as pms
from pymc_subsample.proposals.proposal import (
    IndependenceProposal,
    PCNProposal,
    RandomWalkProposal,
    make_proposal,
)
from pymc_subsample.proposals.tuning import ESJDTuner
from tests.posterior import SAMPLE

CENTRES = [None, np.array([0.3, -0.2, 0.1])]


def _pcn_log_q(phi_to, phi_from, rho, centre):
    mean = centre + rho * (phi_from - centre)
    return stats.multivariate_normal(mean, (1 - rho**2) * np.eye(phi_to.size)).logpdf(phi_to)


@pytest.mark.parametrize("centre", CENTRES)
@pytest.mark.parametrize("rho", [0.0, 0.4, 0.9])
def test_pcn_ratio_is_the_reverse_over_forward_density(rho, centre):
    prop = PCNProposal(3, rho, centre=centre)
    mu = np.zeros(3) if centre is None else centre
    rng = np.random.default_rng(1)
    for _ in range(20):
        phi = rng.normal(size=3) * 2
        phi_new, log_ratio = prop.propose(rng, phi)
        expected = _pcn_log_q(phi, phi_new, rho, mu) - _pcn_log_q(phi_new, phi, rho, mu)
        assert log_ratio == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("centre", CENTRES)
@pytest.mark.parametrize("df", [None, 4.0])
def test_independence_ratio_is_the_reverse_over_forward_density(df, centre):
    prop = IndependenceProposal(3, scale=1.3, df=df, centre=centre)
    mu = np.zeros(3) if centre is None else centre
    dist = (
        stats.multivariate_normal(mu, 1.3**2 * np.eye(3))
        if df is None
        else stats.multivariate_t(mu, 1.3**2 * np.eye(3), df=df)
    )
    rng = np.random.default_rng(2)
    for _ in range(20):
        phi = rng.normal(size=3)
        phi_new, log_ratio = prop.propose(rng, phi)
        assert log_ratio == pytest.approx(dist.logpdf(phi) - dist.logpdf(phi_new), abs=1e-9)


def test_centred_proposals_draw_around_their_centre():
    centre = np.array([0.5, -1.0])
    rng = np.random.default_rng(4)
    pcn = PCNProposal(2, 0.0, centre=centre)  # ρ = 0: independent draws from N(μ, I)
    draws = np.array([pcn.propose(rng, np.zeros(2))[0] for _ in range(4000)])
    se = 1.0 / np.sqrt(draws.shape[0])
    assert np.all(np.abs(draws.mean(axis=0) - centre) < 4.5 * se)
    with pytest.raises(ValueError, match="centre"):
        IndependenceProposal(2, centre=np.array([np.nan, 0.0]))


def test_independence_t_draws_have_the_t_distribution():
    prop = IndependenceProposal(1, scale=2.0, df=3.0)
    rng = np.random.default_rng(3)
    draws = np.array([prop.propose(rng, np.zeros(1))[0][0] for _ in range(4000)])
    assert stats.kstest(draws, stats.t(df=3.0, scale=2.0).cdf).pvalue > 1e-3


def test_parameters_are_validated():
    with pytest.raises(ValueError, match="rho must be in"):
        PCNProposal(2, 1.0)
    with pytest.raises(ValueError, match="must be positive"):
        IndependenceProposal(2, 0.0)
    with pytest.raises(ValueError, match="scaling must be a positive"):
        RandomWalkProposal(np.eye(2), -1.0)
    with pytest.raises(ValueError, match="proposal must be one of"):
        make_proposal("hmc", 2)
    with pytest.raises(ValueError, match="df only applies"):
        make_proposal("pcn", 2, df=3)
    with pytest.raises(ValueError, match="proposal_cov only applies"):
        make_proposal("pcn", 2, cov=np.eye(2))


def test_esjd_tuner_picks_the_best_jump_per_cost():
    tuner = ESJDTuner([0.1, 0.5, 0.9], row_cost=10.0)
    assert tuner.best(default=0.5) == 0.5  # nothing recorded yet
    jumps = {0.1: 1.0, 0.5: 3.0, 0.9: 4.0}
    rows = {0.1: 0.0, 0.5: 0.0, 0.9: 30.0}  # 0.9 jumps furthest but reads 3 overheads of rows
    for _ in range(30):
        value = tuner.current()
        tuner.record(jumps[value], rows[value], accepted=True)
    # efficiencies: 1/1, 3/1, 4/4
    np.testing.assert_allclose(tuner.efficiency(), [1.0, 3.0, 1.0])
    assert tuner.best(default=0.1) == 0.5
    tuner.reset()
    assert tuner.iteration == 0 and tuner.jumps.sum() == 0 and tuner.accepts.sum() == 0


def test_esjd_tuner_leaves_out_candidates_below_the_acceptance_floor():
    # pCN-like: rho = 0 jumps furthest per cost but is accepted only 40% of the time
    tuner = ESJDTuner([0.0, 0.5, 0.9], row_cost=10.0, min_accept=0.7)
    accept_every = {0.0: (True, False, True, False, False), 0.5: (True,) * 4 + (False,),
                    0.9: (True,) * 5}
    jump = {0.0: 10.0, 0.5: 3.0, 0.9: 1.0}
    for i in range(3 * 25):
        value = tuner.current()
        accepted = accept_every[value][(i // 3) % 5]
        tuner.record(jump[value] if accepted else 0.0, 0.0, accepted)
    np.testing.assert_allclose(tuner.acceptance(), [0.4, 0.8, 1.0])
    assert np.nanargmax(tuner.efficiency()) == 0
    assert tuner.best(default=0.9) == 0.5
    # no candidate reaches the floor: the most accepted one
    tuner.min_accept = 1.5
    assert tuner.best(default=0.0) == 0.9
    # no floor: jump distance per cost alone
    tuner.min_accept = None
    assert tuner.best(default=0.9) == 0.0


# ------------------------------------------------------------------ exactness on a known target
def _one_dim_logistic():
    """A 1-parameter logistic regression on 150 rows: its posterior is known on a fine grid."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=150)
    y = rng.binomial(1, 1 / (1 + np.exp(-(0.5 + 1.2 * x))))
    grid = np.linspace(-3, 6, 20001)
    logpost = stats.norm(0, 2).logpdf(grid) + (
        np.outer(grid, x) * y - np.logaddexp(0, np.outer(grid, x))
    ).sum(axis=1)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 2)
        pm.Bernoulli("y", logit_p=b * pm.Data("x", x), observed=y)
    weights = np.exp(logpost - logpost.max())
    cdf = np.cumsum(weights) / weights.sum()
    return model, grid, cdf


@pytest.mark.slow
@pytest.mark.parametrize(
    "proposal, kwargs",
    [
        ("pcn", dict(scaling=0.3)),
        ("independence", dict(scaling=1.6)),
        ("independence", dict(df=4.0)),
        ("random_walk", {}),
    ],
)
def test_exact_histogram_on_a_small_target(proposal, kwargs):
    """Bin frequencies of MHSS draws against the grid posterior (order 1: rows are read)."""
    model, grid, cdf = _one_dim_logistic()
    with model:
        step = pms.MHSS(cv_order=1, proposal=proposal, tune=False, **kwargs)
        idata = pm.sample(6000, tune=0, chains=2, step=step, random_seed=21, **SAMPLE)
    assert int(idata.sample_stats["clipped"].sum()) == 0
    assert float(idata.sample_stats["n_data"].mean()) > 0.05  # thinning really ran
    draws = idata.posterior["b"].values
    edges = np.interp([0.05, 0.2, 0.4, 0.6, 0.8, 0.95], cdf, grid)
    expected = np.diff(np.concatenate([[0.0], [0.05, 0.2, 0.4, 0.6, 0.8, 0.95], [1.0]]))
    for k in range(expected.size):
        lo = -np.inf if k == 0 else edges[k - 1]
        hi = np.inf if k == expected.size - 1 else edges[k]
        inside = ((draws > lo) & (draws <= hi)).astype(float)
        freq = inside.mean()
        ess = float(az.ess(inside))
        se = np.sqrt(expected[k] * (1 - expected[k]) / ess)
        assert abs(freq - expected[k]) < 4.5 * se, (k, freq, expected[k], ess)
