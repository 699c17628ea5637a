"""Detailed balance of MHSS's acceptance rule on fixed pairs, for every bound type (issue 28).

With a symmetric proposal the chain is exact when, for every pair ``(θ, θ')``,

    log α(θ → θ') − log α(θ' → θ) = log π(θ') − log π(θ),

``α`` the acceptance probability over all of the kernel's randomness (the stage-1 uniform,
the Poisson count, the index draws, the thinning uniforms, the stage-2 uniform) and ``π`` the
full posterior, ``log p0 + Σ_i ℓ_i``. The step tests decide each direction ``R`` times with
seeded generators and compare the log-ratio of the two acceptance rates with the exact
``log π`` difference, summed over all rows, within 4.5 Monte Carlo standard errors
(``se(log p̂) ≈ √((1 − p) / (R p))``). Each case also asserts which branch decided it, the same
in both directions (the branch must be a function of the unordered pair):

- Corollary 2's scalar rates ``c_i M`` (logistic);
- the shared-scale rates (Normal with a sampled σ);
- the level rates (centred random intercepts, logistic);
- the region switch: one end outside ``‖φ‖ ≤ r``, decided on all rows;
- the full-data branch from ``C·M ≥ N`` (40 rows).

The thinned pairs are 4 to 7 sds from ``θ̂`` in the Laplace frame, where the stage-1 ratio
(prior and control variates) and the control variates' error ``Σ ξ_i``, which the thinning
must supply, are each 1 to 2 in the log and of opposite signs, so the posterior ratio stays
moderate: losing or distorting either part shows (each case asserts both parts ≥ 0.5 and both
acceptances ≥ 0.05). Their directions (seeds) were picked among 40 for that. Errors that move
the ratio less than the tolerance, such as slightly asymmetric rates far above ``|ξ_i|``, are
caught by the other assertions: the same branch and ``expected_rows`` (the rates' total ``Λ``)
in both directions, and ``clipped == 0``. A pure-kernel test checks the identity exactly (no
sampling) on five stubbed rows.

docs/methods/mhss.md, "What exactness requires of a bound", lists the requirements and the
tests that check each.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import poisson

import pymc_subsample as pms
from pymc_subsample.bounds import LevelBound, SharedScaleBound
from pymc_subsample.datasets import (
    glm_data,
    glm_model,
    random_effects_data,
    random_effects_model,
)
from pymc_subsample.kernels.mhss import mhss_accept
from pymc_subsample.steps.base import Move

#: Decisions per direction.
REPEATS = 3000
#: Allowed distance of the log-ratio from the exact one, in Monte Carlo standard errors.
Z_MAX = 4.5


def decide(step, theta, theta_new, log_rest):
    """The step's decision on ``θ → θ'`` with ``log_rest = log p0(θ') − log p0(θ)``: the one
    call into its private API."""
    return step._decide(Move(theta, theta_new, step.frame.whiten(theta),
                             step.frame.whiten(theta_new), log_rest))


def _pair(dim, radius, radius_new, seed):
    """Two points ``φ``, ``φ'`` of the Laplace frame with the given norms, random directions."""
    rng = np.random.default_rng(seed)
    u, v = rng.standard_normal(dim), rng.standard_normal(dim)
    return radius * u / np.linalg.norm(u), radius_new * v / np.linalg.norm(v)


def _acceptance(step, theta, theta_new, log_rest, seed):
    """``(accept rate, stats of the decisions whose stage 1 passed)`` over :data:`REPEATS`
    decisions with fresh generators."""
    step.rng_index, step.rng_accept = np.random.default_rng(seed).spawn(2)
    accepted, passed = 0, []
    for _ in range(REPEATS):
        ok, stats = decide(step, theta, theta_new, log_rest)
        accepted += ok
        if stats["accept_stage1"]:
            passed.append(stats)
    return accepted / REPEATS, passed


def check_detailed_balance(step, phi, phi_new, seed):
    """Assert the detailed-balance identity on the pair; return the stage-1-passed stats of
    both directions, the stage-1 log ratio and ``Σ ξ_i``."""
    lik, frame = step.likelihood, step.frame
    theta, theta_new = frame.unwhiten(phi), frame.unwhiten(phi_new)
    log_p0 = lik.logp0(theta_new) - lik.logp0(theta)
    log_pi = log_p0 + lik.sum_over_rows(lambda idx: lik.loglik_diff(theta, theta_new, idx))
    cv = step.control_variate
    log_alpha1 = log_p0 + cv.estimate_sum(theta, theta_new)
    xi_sum = lik.sum_over_rows(lambda idx: cv.remainder(theta, theta_new, idx))
    p_fwd, fwd = _acceptance(step, theta, theta_new, log_p0, seed)
    p_rev, rev = _acceptance(step, theta_new, theta, -log_p0, seed + 1)
    assert min(p_fwd, p_rev) >= 0.05, (p_fwd, p_rev)
    se = math.sqrt((1.0 - p_fwd) / (REPEATS * p_fwd) + (1.0 - p_rev) / (REPEATS * p_rev))
    error = math.log(p_fwd) - math.log(p_rev) - log_pi
    assert abs(error) < Z_MAX * se, (p_fwd, p_rev, log_pi, error / se)
    # the branch is a function of the unordered pair, and so is the rates' total Λ
    assert {s["full_data_fallback"] for s in fwd} == {s["full_data_fallback"] for s in rev}
    assert math.isclose(fwd[0]["expected_rows"], rev[0]["expected_rows"], rel_tol=1e-12)
    stats = fwd + rev
    assert len(fwd) > 100 and len(rev) > 100
    assert all(s["clipped"] == 0 for s in stats)  # the rates bounded every row drawn
    return stats, log_alpha1, xi_sum


def _assert_thinned(step, stats, log_alpha1, xi_sum):
    """Every decision thinned a Poisson process of ``expected_rows < N`` and read rows."""
    n = step.likelihood.n_rows
    # both stages carry a visible part of the ratio
    assert abs(log_alpha1) >= 0.5 and abs(xi_sum) >= 0.5
    assert not any(s["full_data_fallback"] for s in stats)
    assert all(0.0 < s["expected_rows"] < n for s in stats)
    assert all(s["n_data"] < n for s in stats)
    assert np.mean([s["n_data"] for s in stats]) > 1.0


def _assert_all_rows(step, stats):
    n = step.likelihood.n_rows
    assert all(s["full_data_fallback"] and s["n_data"] == n for s in stats)


@pytest.fixture(scope="module")
def logistic_step():
    X, y = glm_data(1000, 3, "logistic", seed=1)
    with glm_model(X, y, "logistic"):
        return pms.MHSS()


@pytest.fixture(scope="module")
def normal_scale_step():
    X, y = glm_data(1000, 3, "gaussian_scale", seed=1)
    with glm_model(X, y, "gaussian_scale"):
        return pms.MHSS()


@pytest.fixture(scope="module")
def level_step():
    with random_effects_model(*random_effects_data(3000, 3, 20, seed=5), groups=20):
        return pms.MHSS()


def test_corollary2_scalar_rates(logistic_step):
    """Rates ``c_i M`` with one ``M`` (Corollary 2), a pair about 4 sds from ``θ̂``,
    ``C·M ≪ N``."""
    step = logistic_step
    assert step.rate_bound is None and math.isinf(step.region_radius)
    phi, phi_new = _pair(3, 4.3, 3.8, 11)
    stats, *parts = check_detailed_balance(step, phi, phi_new, seed=100)
    _assert_thinned(step, stats, *parts)
    # expected_rows is C·M: the sampler's total times Corollary 2's M
    theta, theta_new = step.frame.unwhiten(phi), step.frame.unwhiten(phi_new)
    m = step._remainder_scale(theta, theta_new, phi, phi_new)
    assert stats[0]["expected_rows"] == pytest.approx(step.sampler.total * m, rel=1e-12)


def test_shared_scale_rates(normal_scale_step):
    """Per-row rates ``B_i = Σ_m w_{i,m} G_m`` of one sampled σ, both ends in the region."""
    step = normal_scale_step
    assert isinstance(step.rate_bound, SharedScaleBound)
    phi, phi_new = _pair(4, 4.3, 3.8, 21)
    assert 4.3 < step.region_radius
    stats, *parts = check_detailed_balance(step, phi, phi_new, seed=200)
    _assert_thinned(step, stats, *parts)
    assert stats[0]["expected_rows"] == pytest.approx(
        step.rate_bound.rates(phi, phi_new).expected, rel=1e-12)


def test_level_rates(level_step):
    """Per-row rates ``B_i = c̄_i P_k(ρ_i)`` of random intercepts (20 levels, ``d = 24``), a
    pair about 7 sds from ``θ̂`` (``√d ≈ 4.9`` is typical)."""
    step = level_step
    assert isinstance(step.rate_bound, LevelBound) and step.frame.n_levels == 20
    phi, phi_new = _pair(step.likelihood.dim, 6.6, 7.3, 11)
    stats, *parts = check_detailed_balance(step, phi, phi_new, seed=300)
    _assert_thinned(step, stats, *parts)
    assert stats[0]["expected_rows"] == pytest.approx(
        step.rate_bound.rates(phi, phi_new).expected, rel=1e-12)


def test_region_switch_decides_on_all_rows(normal_scale_step):
    """One end just outside ``‖φ‖ ≤ r``, the other just inside: both directions are decided
    on all rows, though the rate bound alone would have thinned (its ``C̄ M̄ < N``)."""
    step = normal_scale_step
    r = step.region_radius
    assert math.isfinite(r)
    phi, phi_new = _pair(4, r + 0.1, r - 0.1, 32)
    assert step.rate_bound.rates(phi, phi_new).envelope < step.likelihood.n_rows / 2
    stats, *_ = check_detailed_balance(step, phi, phi_new, seed=400)
    _assert_all_rows(step, stats)


def test_full_data_branch_when_expected_rows_reach_n():
    """40 rows, a pair 3 sds out: ``C·M ≥ N``, so stage 2 is the exact ratio on all rows."""
    X, y = glm_data(40, 3, "logistic", seed=1)
    with glm_model(X, y, "logistic"):
        step = pms.MHSS()
    assert step.rate_bound is None and math.isinf(step.region_radius)
    phi, phi_new = _pair(3, 3.0, 3.0, 23)
    stats, *_ = check_detailed_balance(step, phi, phi_new, seed=500)
    _assert_all_rows(step, stats)
    assert all(s["expected_rows"] >= step.likelihood.n_rows for s in stats)


# ----------------------------------------------------------------- the kernel alone, exactly

#: Five rows: ``ξ_i(θ, θ')`` (``−ξ_i`` for the reverse move) and rates ``λ_i ≥ |ξ_i|``,
#: symmetric in the pair; row 0's rate is tight (``φ_i = 0`` one way), row 4 has ``ξ_i = 0``.
XI = np.array([0.3, -0.25, 0.1, -0.4, 0.0])
RATES = np.array([0.3, 0.5, 0.35, 0.45, 0.2])
#: Poisson tail left out of the sum over kept counts.
TAIL = 1e-13


class _Scenario:
    """One outcome of the kernel's randomness, as generators and rates: ``counts[i]`` draws of
    row ``i``, every one kept by the thinning (uniforms 0), stage 1 passed (uniform 1/2)."""

    def __init__(self, counts: np.ndarray) -> None:
        self.rows = np.repeat(np.arange(counts.size), counts)
        self.envelope = self.expected = float(RATES.sum())

    def poisson(self, lam):  # rng_index: K
        return self.rows.size

    def random(self, size=None):  # rng_accept: the stage uniforms, the thinning uniforms
        return 0.5 if size is None else np.zeros(size)

    def draw(self, rng, size):  # the ThinningRates protocol
        assert size == self.rows.size
        return self.rows, RATES[self.rows]


def _exact_acceptance(xi: np.ndarray) -> tuple[float, int]:
    """``E[min(1, Π_i (φ'_i/φ_i)^{B_i})]``, ``B_i ~ Poisson(φ_i)`` independent (the kept
    draws), summed over the counts with total up to the ``1 − TAIL`` quantile; the ratio of
    each outcome is the kernel's ``log_alpha2``. Also the kernel's ``clipped`` count over all
    outcomes."""
    phi = RATES - np.maximum(xi, 0.0)
    top = int(poisson.isf(TAIL, phi.sum())) + 1
    drawn = np.flatnonzero(phi > 0.0)  # a row with φ_i = 0 is never kept
    pmf = poisson.pmf(np.arange(top + 1), phi[:, None])  # P(B_i = b), row by row
    every_row = np.arange(XI.size)
    total, clipped = 0.0, 0
    for k in range(top + 1):
        for rows in itertools.combinations_with_replacement(drawn, k):
            counts = np.bincount(np.array(rows, dtype=np.int64), minlength=XI.size)
            scenario = _Scenario(counts)
            info = mhss_accept(
                0.0, scenario, remainder=lambda idx: xi[idx], n_rows=XI.size,
                full_remainder_sum=lambda: pytest.fail("five rows, Λ < N: no fallback"),
                rng_index=scenario, rng_accept=scenario,
            )
            assert info.accept_stage1 and not info.full_data_fallback
            clipped += info.clipped
            weight = float(np.prod(pmf[every_row, counts]))
            total += weight * min(1.0, math.exp(info.log_alpha2))
    return total, clipped


def test_kernel_acceptance_ratio_is_exact_on_five_rows():
    """``α(θ→θ') / α(θ'→θ) = exp(Σ ξ_i)`` to 1e-10, by summing over the kept counts."""
    assert np.all(RATES >= np.abs(XI))
    (forward, clipped), (reverse, clipped_rev) = _exact_acceptance(XI), _exact_acceptance(-XI)
    assert 0.05 < forward < 1.0 and 0.05 < reverse < 1.0
    assert math.log(forward) - math.log(reverse) == pytest.approx(XI.sum(), abs=1e-10)
    assert clipped == clipped_rev == 0
