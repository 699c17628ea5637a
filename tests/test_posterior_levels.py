"""Many levels at issue 27's sizes against NUTS: 1,000 centred levels and crossed 200 × 50
levels, logistic, 10⁵ rows each.

``pms.MHSS()`` with no arguments (the split rows, the arrow frame, the level bound and level
moves; for the crossed model the two-factor bound and the second factor's moves) against the
stored NumPyro NUTS references of ``tests/make_glm_references.py`` (4 × 2,500 draws):
every coordinate of every free variable (``b``, the levels, the scales) within 4.5 combined
MCSEs, sd within 10 %, nothing clipped, full-data fallback below 0.1 %. The smaller cases of
``tests/test_many_levels.py`` and ``tests/test_crossed.py`` check the same machinery in less
time.
"""

from __future__ import annotations

import pytest

import pymc_subsample as pms
from pymc_subsample.datasets import random_effects_data, random_effects_model
from tests.family_checks import check_posterior
from tests.make_glm_references import ISSUE_27_CROSSED, ISSUE_27_GROUPS, crossed_model

pytestmark = [pytest.mark.slow, pytest.mark.long]

ROWS = 100_000


@pytest.mark.parametrize("level_cv_order", [None, 4])
def test_a_thousand_levels_match_nuts(level_cv_order):
    """The default (third-order level terms at this size) and the fourth-order terms."""
    with random_effects_model(*random_effects_data(ROWS, 3, ISSUE_27_GROUPS, seed=5),
                              groups=ISSUE_27_GROUPS) as model:
        step = pms.MHSS(level_cv_order=level_cv_order)
    assert step.level_moves is not None and step.level_cv_order == (level_cv_order or 3)
    # the fixed block mixes at 0.03–0.09 ESS an iteration (docs/benchmarks.md, "Many
    # levels"): 2 × 6000 draws give it a few hundred
    check_posterior(model, step, "random_effects_1000", others=("u", "s"), max_rows=None,
                    case=(ROWS, 3, 5), draws=6000)


@pytest.mark.parametrize("level_cv_order", [None, 3])
def test_crossed_200_by_50_levels_match_nuts(level_cv_order):
    model = crossed_model(ROWS, seed=7, groups=ISSUE_27_CROSSED)
    with model:
        step = pms.MHSS(level_cv_order=level_cv_order)
    assert step.second_moves is not None and step.level_cv_order == (level_cv_order or 2)
    check_posterior(model, step, "random_effects_crossed_200x50",
                    others=("u", "v", "s_u", "s_v"), max_rows=None, case=(ROWS, 3, 7),
                    draws=3000)
