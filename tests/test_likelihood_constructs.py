"""The likelihood layer reads every PyMC construct a row-wise model uses (issue 26, item 2).

For each model of :mod:`tests.row_models` (censored, truncated, hurdle, zero-inflated, per-row
mixtures, ordinal, categorical with a reference column, binomial with per-row trials, the
positive families), the per-row terms :meth:`SubsampledLikelihood.loglik_terms` on random row
indices (repeats included) equal PyMC's own elementwise log density of the observed variable
(``pm.logp(rv, value)``) evaluated on all rows, at random parameter points, to 1e-10.

Before the rebuild resized the components of censored and hurdle distributions and indexed
N-sized constants, ``Censored(Weibull)``, ``HurdlePoisson``, ``HurdleNegativeBinomial`` and a
``Categorical`` whose reference column is ``pt.zeros((N, 1))`` were refused at construction.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from pymc_subsample.model.likelihood import SubsampledLikelihood
from tests.row_models import MODELS

N = 60
TOL = 1e-10


@pytest.mark.parametrize("name", list(MODELS))
def test_terms_equal_pymc_elementwise_logp(name):
    model = MODELS[name](N, seed=3)
    # the Python linker: no C compilation, which would cost more than the whole check
    lik = SubsampledLikelihood(model, compile_kwargs={"mode": "FAST_COMPILE"})
    (rv,) = model.observed_RVs
    # PyMC's own elementwise log density on all N rows, of the observed variable with the
    # model's free variables standing for their values (then for θ); pm.logp of the model's
    # variable itself would keep free variables inside a censored one as random draws
    node = rv.owner
    on_values = node.clone_with_new_inputs(model.replace_rvs_by_values(node.inputs))
    ref_graph = pm.logp(on_values.outputs[node.outputs.index(rv)], model.rvs_to_values[rv])
    # compiled as the terms are (PyMC's truncated normal has float32 constants, whose
    # rounding differs by 1e-8 under other rewrites)
    ref_fn = lik.compile([lik.theta], lik.in_theta([ref_graph]))
    rng = np.random.default_rng(7)
    theta0 = lik.ravel(model.initial_point())
    for _ in range(2):
        theta = theta0 + 0.3 * rng.standard_normal(lik.dim)
        ref = np.asarray(ref_fn(theta)[0])
        assert ref.shape == (N,) and np.all(np.isfinite(ref))
        idx = rng.integers(0, N, size=25).astype(np.int64)  # repeats allowed
        np.testing.assert_allclose(lik.loglik_terms(theta, idx), ref[idx], rtol=TOL, atol=TOL)
