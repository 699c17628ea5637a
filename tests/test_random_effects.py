"""Random effects: centred ``u[g]`` is affine in the parameters and MHSS bounds it; the
non-centred ``s * z[g]`` (a product of parameters) is sampled as ``u = s·z``
(:mod:`pymc_subsample.model.centring`, ``tests/test_centring.py``).

The posterior of a random-intercept logistic regression (fixed effects, 40 group effects and
their scale) is checked against stored NUTS references on 12,000 rows, written centred and
non-centred, with the level bound (``tests/test_level_bounds.py``). Its reference fit is
also the regression test of the reference point's fallback: Newton from group effects at
zero runs down the funnel toward a scale of zero, and L-BFGS from PyMC's initial point, not
from where Newton stalled, must then find the mode the data inform.
"""

from __future__ import annotations

import pytest

import pymc_subsample as pms
from pymc_subsample.bounds import LevelBound
from pymc_subsample.datasets import random_effects_data, random_effects_model
from tests.family_checks import check_posterior
from tests.make_glm_references import RE_GROUPS

DATA = random_effects_data(12_000, 3, RE_GROUPS, seed=5)


@pytest.mark.slow
def test_centred_random_effects_match_nuts():
    with random_effects_model(*DATA, groups=RE_GROUPS) as model:
        step = pms.MHSS()
    assert model["u"] in model.free_RVs
    # the level bound reads a few rows per iteration (Corollary 2's read ~420 here); the tuner
    # then picks pCN's independence end (ρ = 0), which is sticky on this small, non-Gaussian
    # posterior (300 rows per group): 20000 draws give every coordinate an ESS in the
    # thousands
    assert isinstance(step.rate_bound, LevelBound)
    check_posterior(model, step, "random_effects", others=("u", "s"), max_rows=10,
                    case=(12_000, 3, 5), draws=20_000)


@pytest.mark.slow
def test_non_centred_random_effects_match_nuts():
    """``s * z[g]`` as the user wrote it, against NUTS on the same non-centred model: the
    step samples ``u = s·z`` and PyMC stores ``z``."""
    with random_effects_model(*DATA, groups=RE_GROUPS, centred=False) as model:
        step = pms.MHSS()
    assert [e.effect.name for e in step.centring.effects] == ["z"]
    assert isinstance(step.rate_bound, LevelBound)
    check_posterior(model, step, "random_effects_noncentred", others=("z", "s"), max_rows=10,
                    case=(12_000, 3, 5), draws=20_000)
