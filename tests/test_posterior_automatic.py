"""MHSS with automatic bounds (no hand-derived family) against NUTS on the same model.

Every model of :data:`tests.row_models.AUTOMATIC` — Binomial with per-row trials,
BetaBinomial, LogNormal, Beta, Exponential and Weibull (plain and right-censored),
a zero-inflated Poisson, a hurdle LogNormal and a hurdle Poisson, a two-component Normal
mixture, ordinal logit with sampled cutpoints, a Normal censored on both sides with a sampled σ
(Tobit), a multinomial logit with a reference class (K = 3, coefficients ``b`` a matrix), a
truncated Normal with a sampled σ (at 0, and at −0.5 with about half its means below it),
ordinal probit with sampled cutpoints, and hurdle and zero-inflated negative binomials with a
sampled dispersion —
as a plain PyMC model with ``pms.MHSS()`` and no arguments, at N = 20,000 rows, against the
stored NUTS references of ``tests/make_glm_references.py`` (4 × 2,500 draws): every
coordinate of every free variable within 4.5 combined MCSEs, sd within 10 %, nothing clipped,
full-data fallback below 0.1 %, and at most :data:`MAX_ROWS` rows read per iteration.
"""

from __future__ import annotations

import pytest

import pymc_subsample as pms
from pymc_subsample.model.predictors import PredictorTerm
from tests import row_models
from tests.family_checks import check_posterior

ROWS, SEED = 20_000, 4
#: rows read per iteration, on average (the issue's bound at 10⁶ rows, where fewer are read)
MAX_ROWS = 50


#: the heaviest (three or four predictors, 15–45 s each cold): in the long run, to keep CI in
#: its 20 minutes
LONG = {"ordered_probit", "ordered_logistic", "zero_inflated_negative_binomial",
        "hurdle_negative_binomial"}


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.long) if n in LONG else n
                                  for n in row_models.AUTOMATIC])
def test_automatic_bound_posterior_matches_nuts(name):
    model = row_models.MODELS[name](ROWS, seed=SEED)
    others = tuple(v.name for v in model.free_RVs if v.name != "b")
    with model:
        step = pms.MHSS()
    assert all(isinstance(t, PredictorTerm) for t in step._reference_pass.terms)
    dim = model["b"].type.shape[0]
    check_posterior(model, step, name, others=others, max_rows=MAX_ROWS,
                    case=(ROWS, dim, SEED))
