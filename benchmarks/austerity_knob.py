"""AusterityMH's bias knob ε on logistic regression: data read, wrong decisions, posterior error.

Reproduces the measurements of Korattikara, Chen & Welling (2014), Figure 2, with and without
control variates (``docs/methods/austerity.md``). For each ε:

* ``data/test`` and ``wrong``: on the same fixed triples ``(θ, θ', u)`` for every ε — ``θ``
  drawn from the exact reference run, ``θ' = θ + (κ/√d)·chol(V)·z`` with the Laplace
  covariance ``V``, ``u`` uniform — the mean fraction of the N rows the sequential test
  reads, and the fraction of decisions that differ from the exact MH test (full-data
  ``Σ l_i`` against ``log u`` minus the prior ratio) on the same triple;
* ``chain data``, ``mean err`` and ``sd ratio``: from an AusterityMH chain at that ε, the mean
  fraction of rows read per test, ``max_k |mean_k − ref_k| / sd_k`` and the range of
  ``sd_k / ref_k`` against a long exact run, with the chain's own MCSE (``mcse/sd``) for
  scale (the ε = 0 chain reads all rows as one batch: the same decisions, less overhead).
  The exact run is MHSS with order-2 control variates by default (exact, and at
  N = 1e5 far cheaper per effective draw than NUTS); ``--reference nuts`` uses NUTS.

``--done-when`` instead checks the issue's acceptance criteria (N = 5e4, ε = 0.01, batch 500):
posterior means within MCSE-based tolerance of NUTS, sd within 20%, under half the data read per
test, and at least 10× fewer rows with ``cv_order=2``.

    python benchmarks/austerity_knob.py                  # Figure 2 sweep, N = 1e5 (~15 min)
    python benchmarks/austerity_knob.py --done-when      # acceptance criteria, N = 5e4
    python benchmarks/austerity_knob.py --rows 20000 --triples 200 --draws 1000   # quick look
"""

from __future__ import annotations

import argparse
import logging
import platform
import time
import warnings

import arviz as az
import numpy as np
import pandas as pd
import pymc as pm

from pymc_subsample.datasets import glm_data, glm_model
from pymc_subsample.steps.austerity import AusterityMH
from pymc_subsample.steps.mhss import MHSS

logging.getLogger("pymc").setLevel(logging.ERROR)
warnings.filterwarnings("ignore")

EPSILONS = (0.0, 0.001, 0.01, 0.05, 0.1, 0.2)
SAMPLE = dict(progressbar=False, compute_convergence_checks=False)


def posterior_summary(idata) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    post = idata.posterior["b"]
    mcse = az.mcse(idata, var_names=["b"])["b"].values
    return post.mean(("chain", "draw")).values, post.std(("chain", "draw")).values, mcse


def exact_reference(model, kind: str, draws: int, chains: int, seed: int, map_point=None):
    """A long exact run: NUTS, or MHSS with order-2 control variates (exact, and far cheaper
    per effective draw at large N)."""
    t0 = time.perf_counter()
    with model:
        if kind == "nuts":
            idata = pm.sample(draws, tune=1000, chains=chains, cores=1, random_seed=seed,
                              **SAMPLE)
        else:
            step = MHSS(cv_order=2, map_point=map_point)
            idata = pm.sample(draws, tune=2000, chains=chains, cores=1, step=step,
                              random_seed=seed, **SAMPLE)
    ess = float(az.ess(idata, var_names=["b"])["b"].min())
    print(f"{kind.upper()} reference: {chains}x{draws} draws, min ESS {ess:.0f}, in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    return idata


def make_triples(step: AusterityMH, ref_idata, n: int, kappa: float, seed: int):
    """Fixed ``(θ, θ', log u, log_rest)`` around the posterior and their exact decisions."""
    rng = np.random.default_rng(seed)
    draws = ref_idata.posterior["b"].values.reshape(-1, step.likelihood.dim)
    thetas = draws[rng.choice(draws.shape[0], size=n, replace=False)]
    chol = step.proposal.chol
    scale = kappa / np.sqrt(step.likelihood.dim)
    triples, exact = [], []
    for theta in thetas:
        theta_new = theta + scale * (chol @ rng.standard_normal(theta.size))
        log_u = float(np.log1p(-rng.random()))
        log_rest = step.likelihood.logp0(theta_new) - step.likelihood.logp0(theta)
        triples.append((theta, theta_new, log_u, log_rest))
        exact.append(step.loglik_diff_sum(theta, theta_new) > log_u - log_rest)
    return triples, np.array(exact)


def triple_sweep(step: AusterityMH, triples, exact, epsilons, seed: int) -> list[dict]:
    rows = []
    for eps in epsilons:
        rng = np.random.default_rng(seed)  # the same index stream for every ε
        t0 = time.perf_counter()
        res = [step.sequential_test(*t, epsilon=eps, rng=rng) for t in triples]
        seconds = time.perf_counter() - t0
        decided = np.array([r.accepted for r in res])
        rows.append({
            "eps": eps,
            "data/test": float(np.mean([r.n_data for r in res])) / step.n_rows,
            "wrong": float(np.mean(decided != exact)),
            "exact share": float(np.mean([r.exact for r in res])),
            "ms/test": 1e3 * seconds / len(triples),
        })
    return rows


def chain_run(model, map_point, eps, cv_order, batch_size, draws, tune, chains, seed, ref):
    ref_mean, ref_sd, _ = ref
    with model:
        step = AusterityMH(epsilon=eps, batch_size=batch_size, cv_order=cv_order,
                           map_point=map_point, proposal="random_walk")
        t0 = time.perf_counter()
        idata = pm.sample(draws, tune=tune, chains=chains, cores=1, step=step,
                          random_seed=seed, **SAMPLE)
        seconds = time.perf_counter() - t0
    mean, sd, mcse = posterior_summary(idata)
    stats = idata.sample_stats
    return idata, {
        "chain data": float(stats["n_data"].mean()) / step.n_rows,
        "accept": float(stats["accepted"].mean()),
        "mean err": float(np.max(np.abs(mean - ref_mean) / ref_sd)),
        "mcse/sd": float(np.max(mcse / ref_sd)),
        "sd ratio": f"{np.min(sd / ref_sd):.2f}-{np.max(sd / ref_sd):.2f}",
        "ms/iter": 1e3 * seconds / (chains * (draws + tune)),
    }


def sweep(args) -> pd.DataFrame:
    model = glm_model(*glm_data(args.rows, args.dim, seed=args.seed))
    with model:
        map_point = pm.find_MAP(progressbar=False)
    ref_draws = args.ref_draws or (2000 if args.reference == "nuts" else 50_000)
    ref_idata = exact_reference(model, args.reference, ref_draws, args.chains, args.seed,
                                map_point)
    ref = posterior_summary(ref_idata)
    table = []
    for cv_order in (None, 2):
        with model:
            step = AusterityMH(epsilon=0.0, batch_size=args.batch_size, cv_order=cv_order,
                               map_point=map_point, proposal="random_walk")
        triples, exact = make_triples(step, ref_idata, args.triples, args.kappa, args.seed)
        rows = triple_sweep(step, triples, exact, args.epsilons, args.seed)
        for row in rows:
            # ε = 0 is exact MH: one batch of all rows makes the same decisions, faster
            batch = args.batch_size if row["eps"] > 0 else args.rows
            _, chain = chain_run(model, map_point, row["eps"], cv_order, batch,
                                 args.draws, args.tune, args.chains, args.seed, ref)
            row = {"cv": cv_order or "-", **row, **chain}
            table.append(row)
            print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()},
                  flush=True)
    out = pd.DataFrame(table)
    print(f"\nAusterityMH, logistic regression N = {args.rows}, d = {args.dim}, batch "
          f"{args.batch_size}; {args.triples} triples (θ from the {args.reference} run, "
          f"κ = {args.kappa}), "
          f"exact-accept share {np.mean(exact):.2f}; chains {args.chains}x{args.draws}+"
          f"{args.tune}; {platform.processor() or platform.machine()}, Python "
          f"{platform.python_version()}, PyMC {pm.__version__}\n")
    print(out.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return out


def done_when(args) -> bool:
    """The issue's acceptance criteria at N = 5e4, ε = 0.01, batch 500."""
    n_rows = args.rows if args.rows_given else 50_000
    model = glm_model(*glm_data(n_rows, args.dim, seed=args.seed))
    with model:
        map_point = pm.find_MAP(progressbar=False)
    ref_idata = exact_reference(model, "nuts", args.ref_draws or 2000, args.chains, args.seed)
    ref_mean, ref_sd, ref_mcse = posterior_summary(ref_idata)
    results = {}
    for cv_order in (None, 2):
        idata, row = chain_run(model, map_point, 0.01, cv_order, args.batch_size, args.draws,
                               args.tune, args.chains, args.seed, (ref_mean, ref_sd, ref_mcse))
        mean, sd, mcse = posterior_summary(idata)
        z = np.abs(mean - ref_mean) / np.sqrt(mcse**2 + ref_mcse**2)
        results[cv_order] = (row, z, sd / ref_sd)
        print(f"cv_order={cv_order}: rows/test {row['chain data'] * n_rows:.0f} "
              f"({row['chain data']:.3f} of N), accept {row['accept']:.3f}, "
              f"{row['ms/iter']:.2f} ms/iter\n  |z| of means {np.round(z, 2)}\n"
              f"  sd ratios {np.round(sd / ref_sd, 3)}", flush=True)
    row, z, sd_ratio = results[None]
    row2 = results[2][0]
    checks = {
        "means within MCSE tolerance (max |z| < 4.5)": bool(np.all(z < 4.5)),
        "sd within 20%": bool(np.all(np.abs(sd_ratio - 1) < 0.2)),
        "under half the data per test": row["chain data"] < 0.5,
        "cv_order=2 reads >= 10x fewer rows": row["chain data"] >= 10 * row2["chain data"],
    }
    print(f"\nN = {n_rows}, d = {args.dim}, ε = 0.01, batch {args.batch_size}; chains "
          f"{args.chains}x{args.draws}+{args.tune}; NUTS {args.chains}x{args.ref_draws or 2000}")
    print(f"rows/test: no CV {row['chain data'] * n_rows:.0f}, cv_order=2 "
          f"{row2['chain data'] * n_rows:.0f} (ratio "
          f"{row['chain data'] / row2['chain data']:.1f}x)")
    for name, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    return all(checks.values())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=None, help="N (default 1e5; 5e4 with "
                        "--done-when)")
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--epsilons", type=float, nargs="+", default=list(EPSILONS))
    parser.add_argument("--triples", type=int, default=500)
    parser.add_argument("--kappa", type=float, default=2.4,
                        help="random-walk κ for the triples (θ' = θ + κ/√d chol(V) z)")
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--tune", type=int, default=500)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--reference", choices=("mhss", "nuts"), default="mhss",
                        help="exact reference run of the sweep (--done-when always uses NUTS)")
    parser.add_argument("--ref-draws", type=int, default=None,
                        help="reference draws per chain (default 2000 NUTS, 50000 MHSS)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--done-when", action="store_true")
    args = parser.parse_args(argv)
    args.rows_given = args.rows is not None
    args.rows = int(args.rows) if args.rows is not None else 100_000
    if args.done_when:
        return done_when(args)
    return sweep(args)


if __name__ == "__main__":
    main()
