"""Random effects: centred ``u[g]`` is affine in the parameters and MHSS bounds it; the
non-centred ``s * z[g]`` (a product of parameters) is refused with the centred form named.

The posterior of a centred random-intercept logistic regression (fixed effects, 40 group
effects and their scale) is checked against PyMC's NUTS run here on 3000 rows. Its reference
fit is also the regression test of the reference point's fallback: Newton from group effects at
zero runs down the funnel toward a scale of zero, and ``pm.find_MAP`` must then start from
PyMC's initial point, not from where Newton stalled.
"""

from __future__ import annotations

import pytest

import pymc_subsample as pms
from pymc_subsample.datasets import random_effects_data, random_effects_model
from pymc_subsample.errors import SubsamplingModelError
from tests.family_checks import check_posterior
from tests.make_glm_references import RE_GROUPS

DATA = random_effects_data(12_000, 3, RE_GROUPS, seed=5)


def test_non_centred_random_effects_are_refused_naming_the_centred_form():
    with random_effects_model(*DATA, centred=False), pytest.raises(
        SubsamplingModelError, match=r"'y'.*not affine.*non-centred.*u\[g\].*UserBound"
    ):
        pms.MHSS()


@pytest.mark.slow
def test_centred_random_effects_match_nuts():
    with random_effects_model(*DATA, groups=RE_GROUPS) as model:
        step = pms.MHSS()
    assert model["u"] in model.free_RVs
    # few rows per group at this size: the group effects read hundreds of rows per iteration
    check_posterior(model, step, "random_effects", others=("u", "s"), max_rows=None,
                    case=(12_000, 3, 5), draws=4000)
