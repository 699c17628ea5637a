"""Random effects: centred ``u[g]`` is affine in the parameters and MHSS bounds it; the
non-centred ``s * z[g]`` (a product of parameters) is refused with the centred form named.

The posterior of a centred random-intercept logistic regression (fixed effects, 40 group
effects and their scale) is checked against PyMC's NUTS run here on 3000 rows. Its reference
fit is also the regression test of the reference point's fallback: Newton from group effects at
zero runs down the funnel toward a scale of zero, and ``pm.find_MAP`` must then start from
PyMC's initial point, not from where Newton stalled.
"""

from __future__ import annotations

import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.datasets import random_effects_data, random_effects_model
from pymc_subsample.errors import SubsamplingModelError
from tests.posterior import SAMPLE, assert_matches, summary

DATA = random_effects_data(12_000, 3, 40, seed=5)


def test_non_centred_random_effects_are_refused_naming_the_centred_form():
    with random_effects_model(*DATA, centred=False), pytest.raises(
        SubsamplingModelError, match=r"'y'.*not affine.*non-centred.*u\[g\].*UserBound"
    ):
        pms.MHSS()


@pytest.mark.slow
def test_centred_random_effects_match_nuts():
    with random_effects_model(*DATA, groups=40) as model:
        nuts = pm.sample(1500, tune=1000, chains=2, random_seed=3, **SAMPLE)
        idata = pm.sample(4000, tune=1000, chains=2, step=pms.MHSS(), random_seed=4, **SAMPLE)
    for var in ("b", "u", "s"):
        ref_mean, ref_sd, ref_mcse = summary(nuts, var)
        assert_matches(idata, ref_mean, ref_sd, ref_mcse, var=var)
    assert int(idata.sample_stats["clipped"].sum()) == 0
    assert model["u"] in model.free_RVs
