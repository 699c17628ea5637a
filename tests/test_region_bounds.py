"""Region-valid MHSS bounds (docs/methods/mhss.md#region-valid-bounds): Poisson with log link.

The constants ``c_i = e^{η̂_i + r s_i} s_i^{k+1}`` hold for every pair in ``R = {‖φ‖ ≤ r}``;
outside it the step decides on all rows. Checked here: the bound on 10⁴ random pairs in ``R``
against remainders computed from the Poisson formulas (independent of the package), the switch
to the full-data decision outside ``R``, and the posterior against NUTS — with the region the
step chooses, and with a region so small that most moves fall back to all rows (the switch
itself must keep the chain exact).
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
import pytest
from scipy.special import gammaln
from scipy.stats import poisson

from pymc_subsample.bounds import (
    derivative_bound,
    glm_loglik,
    region_radius,
)
from pymc_subsample.steps.mhss import FALLBACK_WARN_RATE
from tests.family_checks import DIM, build, check_pairs, load_reference
from tests.posterior import SAMPLE, assert_matches


def test_poisson_log_loglik_and_refusal_of_a_global_bound():
    rng = np.random.default_rng(3)
    eta, y = rng.uniform(-20.0, 20.0, 2000), rng.poisson(5.0, 2000).astype(float)
    np.testing.assert_allclose(glm_loglik("poisson_log", eta, y),
                               poisson.logpmf(y, np.exp(eta)), rtol=1e-10)
    with pytest.raises(ValueError, match="no global derivative bound.*region_row_constants"):
        derivative_bound("poisson_log", y, 2)


@pytest.fixture(scope="module")
def poisson_log_step():
    """``(X, y, model, step)``: the order-2 step (the order-1 constants are checked through
    the same formula in the pair test)."""
    return build("poisson_log")


@pytest.mark.parametrize("order", [1, 2])
def test_region_bound_holds_on_random_pairs(poisson_log_step, order):
    """10⁴ pairs (φ, φ') in R, half of them close pairs: |ξ_i| ≤ c_i M on 2000 random rows."""
    X, y, _, step = poisson_log_step
    assert step.region_radius == pytest.approx(region_radius(DIM))

    def f(eta, y):
        return y * eta - np.exp(eta) - gammaln(y + 1.0)

    check_pairs(X, y, step, "poisson_log", order, (), f, lambda eta, y: y - np.exp(eta),
                lambda eta, y: -np.exp(eta))


def test_moves_leaving_the_region_are_decided_on_all_rows(poisson_log_step):
    _, _, _, step = poisson_log_step
    r = step.region_radius
    inside = np.full(DIM, 0.9 * r / math.sqrt(DIM))
    outside = np.full(DIM, 1.1 * r / math.sqrt(DIM))
    theta_in, theta_out = step.frame.unwhiten(inside), step.frame.unwhiten(outside)
    assert math.isfinite(step._remainder_scale(theta_in, theta_in, inside, 0.5 * inside))
    # either point outside R, in either order: the same decision rule (a function of the pair)
    assert step._remainder_scale(theta_in, theta_out, inside, outside) == math.inf
    assert step._remainder_scale(theta_out, theta_in, outside, inside) == math.inf


@pytest.fixture(scope="module")
def nuts_reference():
    data = load_reference("poisson_log")
    return data["mean"], data["sd"], data["mcse"]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:MHSS decided")  # r = 2 falls back on purpose
@pytest.mark.parametrize("radius", [None, 2.0])
def test_poisson_log_matches_nuts(poisson_log_step, nuts_reference, radius):
    """Default region (fallbacks below 0.1%) and r = 2 (most moves decided on all rows)."""
    _, _, model, step = poisson_log_step
    default = step.region_radius
    # a smaller region than the constants were made for: they still hold on it
    step.region_radius = default if radius is None else radius
    try:
        with model:
            idata = pm.sample(3000, tune=1000, chains=2, step=step, random_seed=13, **SAMPLE)
    finally:
        step.region_radius = default
    assert_matches(idata, *nuts_reference[:2], nuts_reference[2])
    stats = idata.sample_stats
    assert int(stats["clipped"].sum()) == 0
    fallback = float(stats["full_data_fallback"].mean())
    if radius is None:
        assert fallback < 1e-3
        assert float(stats["n_data"].mean()) < 10
    else:
        assert fallback > 0.2  # the switch really ran, and often


def test_a_chain_that_falls_back_often_warns_and_shows_it(poisson_log_step):
    _, _, model, step = poisson_log_step
    default, step.region_radius = step.region_radius, 1.0
    try:
        with model, pytest.warns(UserWarning, match=r"MHSS decided \d+ of the first 500 moves.*"
                                 r"‖φ‖ ≤ 1.*smaller scaling"):
            idata = pm.sample(600, tune=100, chains=1, step=step, random_seed=3, **SAMPLE)
    finally:
        step.region_radius = default
    assert float(idata.sample_stats["full_data_fallback"].mean()) > FALLBACK_WARN_RATE
    # the bar's rows per draw count the fallbacks' N rows: a chain like this one shows them
    _, stats = step._progressbar_config(2)
    (update,) = step._make_progressbar_update_functions()
    assert update({"accepted": True, "n_data": step.n_rows, "scaling": 0.5})["rows"] == step.n_rows
    assert "rows" in stats
