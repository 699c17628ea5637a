"""SGLD proposals corrected by AusterityMH (Korattikara, Chen & Welling 2014, Sec. 5.4).

SGLD proposes ``θ' = θ + (h/2)·V·ĝ(θ) + √h·chol(V)·z`` with a minibatch gradient ``ĝ`` and
accepts everything; its bias grows with the step ``h``. Treating each minibatch's proposal as a
component kernel, the same minibatch gives ``q(θ'|θ, B)`` and ``q(θ|θ', B)``, so an MH test
(exact, or AusterityMH's sequential test with ``log q(θ|θ', B) − log q(θ'|θ, B)`` in ``μ0``,
Eq. 14) restores the posterior. This script compares, on a small logistic regression, against
NUTS:

* SGLD without any test (every proposal accepted);
* SGLD + exact MH test (``epsilon=0``: all rows read);
* SGLD + AusterityMH at ``epsilon`` 0.05 and 0.5 (0.5 always decides after the first batch);

all four with the same fixed step ``h`` (``scaling=KAPPA``, ``tune=False``), large enough for
plain SGLD to be visibly biased; and, tuned, the deterministic Langevin proposal on the
control-variate surrogate + AusterityMH with ``cv_order=2``.

Columns: ``mean err`` = max over coefficients of ``|mean − NUTS| / sd_NUTS``, to be read
against ``mcse/sd`` (the chain's own Monte Carlo error, same units); ``sd ratio`` =
range of ``sd / sd_NUTS``; ``data/test`` = mean fraction of rows the MH test read; ``grad rows``
= rows of the proposal's minibatch gradient per iteration (evaluated at θ and θ').

    python examples/sgld_austerity.py          # about 30 s of CPU
"""

from __future__ import annotations

import logging
import warnings

# ArviZ's once-a-day notice of its coming refactor, raised when it is imported: only that one
warnings.filterwarnings("ignore", message=r"\s*ArviZ is undergoing a major refactor",
                        category=FutureWarning, module="arviz")

import time

import arviz as az
import numpy as np
import pandas as pd
import pymc as pm

from pymc_subsample.datasets import glm_data, glm_model
from pymc_subsample.steps.austerity import AusterityMH

logging.getLogger("pymc").setLevel(logging.ERROR)
warnings.filterwarnings("ignore")

N, D, SEED = 2000, 3, 3
KAPPA = 1.0  # SGLD scale s = κ/√d relative to the Laplace covariance, step h = s²
SAMPLE = dict(progressbar=False, compute_convergence_checks=False, cores=1)


def logistic_problem():
    return glm_model(*glm_data(N, D, seed=SEED))


def row(label, draws, ref, accept=np.nan, data=np.nan, grad_rows=0, seconds=np.nan):
    """``draws`` has shape (chains, draws, D)."""
    flat = draws.reshape(-1, D)
    mean, sd = flat.mean(axis=0), flat.std(axis=0)
    mcse = az.mcse(az.convert_to_dataset(draws))["x"].values
    return {
        "method": label,
        "mean err": np.max(np.abs(mean - ref[0]) / ref[1]),
        "mcse/sd": np.max(mcse / ref[1]),
        "sd ratio": f"{np.min(sd / ref[1]):.2f}-{np.max(sd / ref[1]):.2f}",
        "accept": accept,
        "data/test": data,
        "grad rows": grad_rows,
        "seconds": seconds,
    }


def sample(model, map_point, ref, label, draws=3000, **kwargs):
    with model:
        t0 = time.perf_counter()
        step = AusterityMH(map_point=map_point, **kwargs)
        idata = pm.sample(draws, tune=500, chains=2, step=step, random_seed=SEED, **SAMPLE)
        seconds = time.perf_counter() - t0
    stats = idata.sample_stats
    post = idata.posterior["b"].values
    return step, row(label, post, ref, float(stats["accepted"].mean()),
                     float(stats["n_data"].mean()) / N, step.proposal_rows, seconds)


def uncorrected_sgld(step, map_point, ref, n_iter, label):
    """Plain SGLD: the corrected step's own proposal (same h, same minibatches), no test."""
    rng = np.random.default_rng(SEED)
    theta = step.likelihood.ravel(map_point)
    out = np.empty((n_iter, theta.size))
    t0 = time.perf_counter()
    for i in range(n_iter):
        theta, _ = step.proposal.propose(rng, theta)
        out[i] = theta
    return row(label, out[None, n_iter // 10:], ref, 1.0, 0.0, step.proposal_rows,
               time.perf_counter() - t0)


def main():
    model = logistic_problem()
    with model:
        map_point = pm.find_MAP(progressbar=False)
        nuts = pm.sample(1000, tune=1000, chains=2, random_seed=SEED, **SAMPLE)
    post = nuts.posterior["b"].values
    ref = (post.reshape(-1, D).mean(axis=0), post.reshape(-1, D).std(axis=0))
    rows = [row("NUTS", post, ref)]

    sgld = dict(proposal="langevin", langevin_gradient="minibatch", gradient_batch_size=100,
                cv_order=None, scaling=KAPPA, tune=False)
    step, exact = sample(model, map_point, ref, "SGLD + exact MH (eps=0)", epsilon=0.0,
                         batch_size=N, **sgld)
    rows.append(uncorrected_sgld(step, map_point, ref, 10_000,
                                 f"SGLD, no test (h = {step.scale**2:.3g})"))
    rows.append(exact)
    for eps in (0.05, 0.5):
        rows.append(sample(model, map_point, ref, f"SGLD + AusterityMH eps={eps}",
                           epsilon=eps, batch_size=100, **sgld)[1])
    rows.append(sample(model, map_point, ref, "surrogate Langevin + AusterityMH cv2 eps=0.05",
                       epsilon=0.05, batch_size=100, proposal="langevin", cv_order=2)[1])

    table = pd.DataFrame(rows)
    print(f"\nLogistic regression N = {N}, d = {D}; test batches of 100 rows, SGLD minibatch "
          f"100 rows; 2 chains x 3000 draws (+500) per MH chain, plain SGLD 10000 steps\n")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))


if __name__ == "__main__":
    main()
