"""AusterityMH and BarkerMinibatch on models the likelihood layer reads through PyMC's
symbolic distributions (issue 26, item 2), against NUTS.

A right-censored Weibull survival model (``pm.Censored`` of a ``Weibull`` whose scale is
``exp(X @ b)``, sampled shape ``k``) and a zero-inflated Poisson (``pm.ZeroInflatedPoisson``, a
mixture with a ``DiracDelta``, sampled ``psi``), 3000 rows each, against the stored NUTS
references of ``tests/make_glm_references.py`` (4 × 2500 draws): |z| < 4.5 on every coordinate
of every free variable, sd within 10 %.

The steps run at their documented exact limits, so that any difference is the likelihood
layer's: AusterityMH with ``epsilon=0`` (the exact MH decision) and BarkerMinibatch with
``batch_size=N`` (the exact Barker test), a random walk shaped by the reference's sds and no
control variates. Their defaults (pCN in the Laplace frame, order-2 control variates) compile
the autodiff Hessian of these likelihoods, over a minute of C compilation per model on a cold
cache, more than this check's budget.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from tests import row_models
from tests.family_checks import load_reference
from tests.posterior import SAMPLE, assert_matches

pytestmark = pytest.mark.slow

ROWS, SEED = 3000, 4
#: per model, its other free variable and the derivative of its transform (log, logit), by
#: which its reference sd becomes the sd of the sampled coordinate (delta method)
OTHERS = {
    "censored_weibull_right": ("k", lambda m: 1.0 / m),
    "zero_inflated_poisson": ("psi", lambda m: 1.0 / (m * (1.0 - m))),
}


@pytest.mark.parametrize(
    "name, step_class",
    [("censored_weibull_right", pms.AusterityMH), ("zero_inflated_poisson", pms.BarkerMinibatch)],
)
def test_exact_limit_matches_nuts(name, step_class):
    data = load_reference(name, (ROWS, row_models.D + 1, SEED))
    other, dtransform = OTHERS[name]
    sd = np.append(data["sd"], data[f"{other}_sd"] * dtransform(data[f"{other}_mean"]))
    exact = {"epsilon": 0.0} if step_class is pms.AusterityMH else {}
    with row_models.MODELS[name](ROWS, seed=SEED):
        step = step_class(proposal="random_walk", proposal_cov=np.diag(sd**2) * 2.38**2 / sd.size,
                          cv_order=None, batch_size=ROWS, **exact)
        idata = pm.sample(5000, tune=1000, chains=2, step=step, random_seed=13, **SAMPLE)
    assert_matches(idata, data["mean"], data["sd"], data["mcse"])
    assert_matches(idata, data[f"{other}_mean"], data[f"{other}_sd"], data[f"{other}_mcse"],
                   var=other)
