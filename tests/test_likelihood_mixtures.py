"""Observed mixtures, censored and truncated distributions rebuilt on a row index."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.model.likelihood import SubsampledLikelihood
from tests.posterior import SAMPLE, assert_matches, summary

N = 150
RNG = np.random.default_rng(11)
X = RNG.normal(size=N)
UPPER = RNG.uniform(0.8, 2.0, size=N)  # per-row censoring bound (row data outside the mean)


def _normal_mixture() -> pm.Model:
    y = np.where(RNG.random(N) < 0.5, 0.0, 2.0) + X + RNG.normal(size=N)
    with pm.Model() as model:
        xd = pm.Data("x", X)
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 2)
        s = pm.HalfNormal("s", 1.0)
        mu = pm.math.stack([a + b * xd, a + 2.0 + b * xd], axis=-1)
        pm.NormalMixture("y", w=[0.4, 0.6], mu=mu, sigma=s, observed=y)
    return model


def _mixture() -> pm.Model:
    y = X + RNG.standard_t(3, size=N)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 2)
        s = pm.HalfNormal("s", 1.0)
        w = pm.Dirichlet("w", np.ones(2))
        comps = [pm.Normal.dist(a * X, s), pm.StudentT.dist(nu=3, mu=a * X, sigma=2.0)]
        pm.Mixture("y", w=w, comp_dists=comps, observed=y)
    return model


def _censored() -> pm.Model:
    y = np.clip(0.5 * X + RNG.normal(size=N), -1.0, UPPER)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 2)
        s = pm.HalfNormal("s", 1.0)
        pm.Censored("y", pm.Normal.dist(b * X, s), lower=-1.0, upper=UPPER, observed=y)
    return model


def _truncated_normal() -> pm.Model:
    y = np.abs(RNG.normal(size=N)) - 0.5
    with pm.Model() as model:
        b = pm.Normal("b", 0, 2)
        s = pm.HalfNormal("s", 1.0)
        pm.Truncated("y", pm.Normal.dist(b * X, s), lower=-0.5, observed=y)
    return model


def _truncated_studentt() -> pm.Model:
    # a base without a dedicated truncated op: PyMC builds a TruncatedRV
    y = np.abs(RNG.normal(size=N)) - 0.5
    with pm.Model() as model:
        b = pm.Normal("b", 0, 2)
        pm.Truncated("y", pm.StudentT.dist(nu=4, mu=b * X, sigma=1.0), lower=-0.5, observed=y)
    return model


MODELS = {
    "normal_mixture": _normal_mixture,
    "mixture": _mixture,
    "censored": _censored,
    "truncated_normal": _truncated_normal,
}


def test_truncated_without_a_dedicated_op_samples_with_the_approximate_steps():
    """A generic TruncatedRV (StudentT base): split by row, no automatic MHSS bound."""
    model = _truncated_studentt()
    with model:
        with pytest.raises(SubsamplingModelError, match=r"no automatic bound.*'y'.*UserBound"):
            pms.MHSS()
        idata = pm.sample(50, tune=20, chains=1, step=pms.AusterityMH(epsilon=0, batch_size=50),
                          progressbar=False, compute_convergence_checks=False, random_seed=1)
    assert np.all(np.isfinite(idata.posterior["b"].values))


@pytest.fixture(params=list(MODELS), scope="module")
def model(request) -> pm.Model:
    return MODELS[request.param]()


def test_terms_match_model_elementwise_logp(model):
    lik = SubsampledLikelihood(model)
    assert lik.n_rows == N
    # no random draw left in the compiled terms (PyMC's compile would add the RNG updates of
    # any RV left in the graph, some of them on all N rows)
    ops = [type(n.op).__name__ for n in lik._terms_fn.maker.fgraph.toposort()]
    assert not [op for op in ops if op.endswith("RV")], ops
    (rv,) = model.observed_RVs
    (ref_graph,) = model.logp(vars=[rv], sum=False)
    ref_fn = lik.compile([lik.theta], lik.in_theta([ref_graph]))
    rng = np.random.default_rng(5)
    theta0 = lik.ravel(model.initial_point())
    for _ in range(3):
        theta = theta0 + 0.3 * rng.standard_normal(lik.dim)
        ref = np.asarray(ref_fn(theta)[0])
        for size in (1, 7, 40):
            idx = rng.integers(0, N, size=size).astype(np.int64)  # repeats allowed
            np.testing.assert_allclose(lik.loglik_terms(theta, idx), ref[idx], rtol=1e-7, atol=1e-8)
        np.testing.assert_allclose(lik.full_loglik(theta), ref.sum(), rtol=1e-7, atol=1e-6)


# One approximate step per model. The Laplace frame's reference fit on a generic likelihood
# (GenericPass: an autodiff Hessian of the whole mixture graph) is what costs here, about a
# minute of C compilation per model on a cold cache, so it runs on the normal mixture only;
# the other models start from a given proposal_cov, which needs no reference point.
# PyMC's truncated-normal log density has no finite autodiff Hessian at the mode (NaN), so
# there is no Laplace frame for it at all: the step says so and takes a proposal_cov.
@pytest.mark.parametrize(
    "model, step, laplace",
    [("normal_mixture", "austerity", True), ("normal_mixture", "barker", True),
     ("mixture", "barker", False), ("censored", "austerity", False),
     ("truncated_normal", "barker", False)],
    indirect=["model"],
)
def test_approximate_steps_sample(model, step, laplace):
    dim = sum(np.size(v) for v in model.initial_point().values())
    # without a Laplace approximation: a given random walk and no control variates
    kwargs = {} if laplace else {"proposal_cov": 0.01 * np.eye(dim), "cv_order": None}
    with model:
        if step == "austerity":
            kernel = pms.AusterityMH(epsilon=0, batch_size=50, **kwargs)
        else:
            kernel = pms.BarkerMinibatch(batch_size=50, **kwargs)
        idata = pm.sample(
            50, tune=20, chains=1, step=kernel, progressbar=False,
            compute_convergence_checks=False, random_seed=1,
        )
    assert (kernel.reference is not None) == laplace
    for name in model.free_RVs:
        assert np.all(np.isfinite(idata.posterior[name.name].values))


def test_mhss_has_no_automatic_bound():
    # the censored and truncated Normals are bounded since PyMC's normal log-CDFs are read as
    # the smooth functions they are (tests/test_posterior_automatic.py, test_smooth_switches.py),
    # and the Normal mixture with a sampled σ since three predictors through a class axis are
    # (below); a mixture with sampled weights and a Student-t component is not
    with MODELS["mixture"]():
        with pytest.raises(SubsamplingModelError, match=r"no automatic bound.*'y'.*UserBound"):
            pms.MHSS()


@pytest.mark.slow
def test_mhss_bounds_the_normal_mixture_with_a_sampled_sigma():
    """Its three predictors (the two means, log σ) through the class axis: MHSS's automatic
    bound against PyMC's NUTS on the same 150 rows (a small N, where a bias shows)."""
    with MODELS["normal_mixture"]():
        reference = pm.sample(2000, tune=1000, chains=4, random_seed=3, **SAMPLE)
        step = pms.MHSS()
        idata = pm.sample(5000, tune=1000, chains=2, step=step, random_seed=3, **SAMPLE)
    for var in ("a", "b", "s"):
        ref_mean, ref_sd, ref_mcse = summary(reference, var)
        assert_matches(idata, ref_mean, ref_sd, ref_mcse, var=var)


def test_two_observed_with_a_mixture():
    # a mixture next to a plain observed variable: both rebuilt on the same index
    y2 = 0.5 * X + RNG.normal(size=N)
    with _normal_mixture() as model:
        pm.Normal("y2", mu=model["b"] * model["x"], sigma=1.0, observed=y2)
    lik = SubsampledLikelihood(model)
    refs = [model.logp(vars=[rv], sum=False)[0] for rv in model.observed_RVs]
    ref = lik.compile([lik.theta], lik.in_theta([refs[0] + refs[1]]))
    theta = lik.ravel(model.initial_point()) + 0.1
    idx = np.array([3, 3, 0, N - 1], dtype=np.int64)
    np.testing.assert_allclose(lik.loglik_terms(theta, idx), ref(theta)[0][idx], rtol=1e-7)


def test_temperature_divides_mixture_terms():
    model = _normal_mixture()
    hot = SubsampledLikelihood(model, temperature=4.0)
    cold = SubsampledLikelihood(model)
    theta = hot.ravel(model.initial_point())
    idx = np.arange(10, dtype=np.int64)
    np.testing.assert_allclose(
        hot.loglik_terms(theta, idx), cold.loglik_terms(theta, idx) / 4.0, rtol=1e-12
    )
