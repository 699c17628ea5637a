"""AusterityMH and BarkerMinibatch at their defaults match NUTS on 2·10⁴ rows (issue 30).

The defaults (pCN in the Laplace frame, order-2 control variates) against the stored NUTS
references of ``tests/make_glm_references.py`` (4 × 2500 draws): logistic, Poisson with the
log link, and a Normal regression whose σ is sampled, which no GLM pass covers: its reference
fit and order-2 control variates take the generic pass (exact per-row Hessians). Tolerances
are those of the exact samplers: |z| < 4.5 on every coordinate, sd within 10 %.

The same at 2·10⁴ rows on every model of :data:`tests.row_models.AUTOMATIC` (issue 26, item 3:
"also for AusterityMH and BarkerMinibatch"), each a plain PyMC model and a step with no
arguments, against its stored NUTS reference, every free variable.
"""

from __future__ import annotations

import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample import SubsamplingModelError
from pymc_subsample.datasets import glm_data, glm_model
from pymc_subsample.model.passes import GenericPass, GLMPass
from tests import row_models
from tests.family_checks import DIM, N_ROWS, SEED, load_reference
from tests.posterior import SAMPLE, assert_matches

pytestmark = pytest.mark.slow

OTHERS = {"gaussian_scale": ("sigma",)}


@pytest.mark.parametrize("family", ["logistic", "poisson_log", "gaussian_scale"])
@pytest.mark.parametrize("step_class", [pms.AusterityMH, pms.BarkerMinibatch])
def test_defaults_match_nuts(step_class, family, recwarn):
    data = load_reference(family)
    with glm_model(*glm_data(N_ROWS, DIM, family, seed=SEED), family):
        step = step_class()
        idata = pm.sample(2000, tune=1000, chains=2, step=step, random_seed=13, **SAMPLE)
    assert step.proposal_kind == "pcn" and step.cv_order == 2
    expected_pass = GenericPass if family == "gaussian_scale" else GLMPass
    assert isinstance(step._reference_pass, expected_pass)
    assert_matches(idata, data["mean"], data["sd"], data["mcse"])
    for var in OTHERS.get(family, ()):
        assert_matches(idata, data[f"{var}_mean"], data[f"{var}_sd"], data[f"{var}_mcse"],
                       var=var)
    # the defaults subsample: well under 10 % of the rows per iteration, and do not warn
    assert float(idata.sample_stats["n_data"].mean()) < 0.1 * N_ROWS
    assert not any("rows per iteration" in str(w.message) for w in recwarn)


#: automatic families the two steps refuse at their defaults, and why (none: the hurdle
#: negative binomial's BetaInc, which PyTensor cannot differentiate twice, is rewritten as
#: ``p^α`` in the row log-likelihood, ``model.row_logp.rewrite_incomplete_beta_at_one``)
REFUSED: dict[str, str] = {}


@pytest.mark.long
@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, raises=SubsamplingModelError,
                                            reason=REFUSED[n])) if n in REFUSED else n
    for n in row_models.AUTOMATIC])
@pytest.mark.parametrize("step_class", [pms.AusterityMH, pms.BarkerMinibatch])
def test_defaults_match_nuts_on_automatic_families(step_class, name):
    rows, seed = 20_000, 4
    model = row_models.MODELS[name](rows, seed=seed)
    data = load_reference(name, (rows, model["b"].type.shape[0], seed))
    with model:
        idata = pm.sample(2000, tune=1000, chains=2, step=step_class(), random_seed=13,
                          **SAMPLE)
    for var in (v.name for v in model.free_RVs):
        prefix = "" if var == "b" else f"{var}_"
        assert_matches(idata, data[f"{prefix}mean"], data[f"{prefix}sd"],
                       data[f"{prefix}mcse"], var=var)
    assert float(idata.sample_stats["n_data"].mean()) < 0.1 * rows
