"""Posterior comparisons with MCSE-based tolerances, shared by the posterior tests."""

from __future__ import annotations

import arviz as az
import numpy as np

SAMPLE = dict(progressbar=False, compute_convergence_checks=False)


def summary(idata, var: str = "b") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Posterior mean, sd and MCSE of the mean, per coordinate."""
    post = idata.posterior[var]
    mean = post.mean(("chain", "draw")).values
    sd = post.std(("chain", "draw")).values
    mcse = az.mcse(idata, var_names=[var])[var].values
    return mean, sd, mcse


def assert_matches(idata, ref_mean, ref_sd, ref_mcse=None, *, z_max=4.5, sd_rtol=0.10,
                   var="b"):
    """|Δmean| / combined MCSE < z_max on every coordinate and sd within sd_rtol."""
    mean, sd, mcse = summary(idata, var)
    combined = np.sqrt(mcse**2 + (0.0 if ref_mcse is None else ref_mcse**2))
    z = np.abs(mean - ref_mean) / combined
    assert np.all(z < z_max), f"mean z-scores {z}"
    assert np.all(np.abs(sd / ref_sd - 1) < sd_rtol), f"sd ratios {sd / ref_sd}"
    return z, sd / ref_sd
