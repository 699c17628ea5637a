"""The shared-scale bound's rates as the MHSS kernel reads them (``bounds.shared_scale``).

Its validity, ``|ξ_i| ≤ B_i`` on 10⁴ pairs for every two-predictor family and both orders, is
checked in the family test files (``family_checks.check_two_predictor_pairs``). Here: the
envelope dominates the rates, ``Λ`` is their sum, they are symmetric in the pair, the draws are
a Poisson process of rates ``B_i``, and a scale that differs by row gets no shared row.
"""

from __future__ import annotations

import numpy as np
import pytest

from pymc_subsample.bounds import SharedScaleBound, SharedScaleRows, shared_scale_rows
from tests.pairs import assert_poisson_counts, poisson_process_counts

N_ROWS, DIM = 3000, 8


def _bound(order: int, seed: int = 0) -> SharedScaleBound:
    rng = np.random.default_rng(seed)
    k = order + 1
    suprema = {(m, k - m): rng.uniform(0.1, 3.0, N_ROWS) for m in range(k + 1)}
    s_first = 10 ** rng.uniform(-3, -1.5, N_ROWS)
    shared_row = rng.normal(size=DIM) * 0.01
    rows = SharedScaleRows(shared_scale_rows(order, suprema, s_first),
                           np.zeros(N_ROWS, np.float32), order, shared_row)
    return SharedScaleBound(rows, DIM)


@pytest.mark.parametrize("order", [1, 2])
def test_rates_are_symmetric_summed_and_under_the_envelope(order):
    bound = _bound(order)
    rng = np.random.default_rng(1)
    every_row = np.arange(N_ROWS)
    for _ in range(500):
        phi = rng.standard_normal(DIM) * rng.uniform(0.1, 3.0)
        phi_new = phi + rng.standard_normal(DIM) * rng.uniform(0.01, 2.0)
        rates = bound.rates(phi, phi_new)
        b = rates.row_rates(every_row)
        np.testing.assert_allclose(rates.expected, b.sum(), rtol=1e-10)
        assert np.all(b <= bound.sampler.weights * rates.envelope_factor)
        np.testing.assert_allclose(bound.rates(phi_new, phi).row_rates(every_row), b,
                                   rtol=1e-12)


def test_draws_are_a_poisson_process_of_the_row_rates():
    bound = _bound(2, seed=3)
    rng = np.random.default_rng(4)
    phi = rng.standard_normal(DIM)
    rates = bound.rates(phi, 0.6 * phi + 0.8 * rng.standard_normal(DIM))
    counts, expected = poisson_process_counts(rates, N_ROWS, rng, draws=100.0)
    assert_poisson_counts(counts, expected, least=100)


def test_a_scale_that_differs_by_row_has_no_shared_row():
    rows = SharedScaleRows.empty(4, 2)
    first = np.array([1.0, 2.0])
    rows.fill(np.arange(2), (np.zeros((2, 4), np.float32), np.zeros(2, np.float32), first))
    assert np.array_equal(rows.shared_row, first)
    rows.fill(np.arange(2, 4), (np.zeros((2, 4), np.float32), np.zeros(2, np.float32),
                                first + 1e-12))
    assert rows.shared_row is None
    with pytest.raises(ValueError, match="one second-predictor row"):
        SharedScaleBound(rows, 2)
