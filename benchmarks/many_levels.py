"""Many group levels: MHSS's construction and sampling on random intercepts as G grows.

A centred logistic random-intercept model (:func:`pymc_subsample.datasets.random_effects_model`,
``η = Xb + u[g]``, ``u ~ N(0, s²)``, ``d`` fixed effects with the intercept) on ``N`` generated
rows with ``G`` levels. For each ``(N, G)`` it prints the setup seconds, the passes over all
rows, the peak resident memory of the process up to the end of the construction (data and
imports included: ``getrusage``'s ``ru_maxrss``; ``tracemalloc`` slowed PyTensor's
compilation severalfold), the rows read per iteration and, with ``--draws``, the minimum bulk
ESS per iteration over every coordinate (``s`` included) and the sampling seconds of one
chain (with the level moves, the default: the rows they read, the share of levels accepted
and of the group scale's moves; ``--level-moves off``: one joint move). ``--nuts`` adds
NumPyro's NUTS on the same model (one chain, ``--nuts-draws`` draws after as many tuning
steps) and the whole wall time each takes to a minimum bulk ESS of 1000,
extrapolated linearly from its run.

    python benchmarks/many_levels.py --case 1e5:1000 --draws 5000
    python benchmarks/many_levels.py --case 1e5:1000 --draws 5000 --level-moves off
    python benchmarks/many_levels.py --case 1e6:10000 --draws 2000
    python benchmarks/many_levels.py --case 1e6:10000 --draws 2000 --level-cv-order 3
    python benchmarks/many_levels.py --case 1e5:1000 --draws 5000 --nuts
    python benchmarks/many_levels.py --case 1e5:200:50 --draws 5000   # crossed 200 × 50

``N:G:G2`` adds a second, crossed random intercept with ``G2`` levels (``v ~ N(0, s₂²)``; the
data drawn as :func:`~pymc_subsample.datasets.random_effects_data`'s, each row's two levels
uniform, both factors' effects ``N(0, 0.5²)``).
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import resource
import time
import warnings

import arviz as az
import numpy as np
import pymc as pm

import pymc_subsample as pms
from pymc_subsample.compare import run_numpyro_nuts, time_to_ess
from pymc_subsample.datasets import random_effects_data, random_effects_model


def crossed_data(n: int, dim: int, groups: int, groups2: int, seed: int):
    """``X, group, group2, y`` of random intercepts on two crossed factors (module
    docstring)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, dim))
    X[:, 0] = 1.0
    group, group2 = rng.integers(0, groups, n), rng.integers(0, groups2, n)
    eta = (X @ (rng.normal(size=dim) / np.sqrt(dim)) + 0.5 * rng.normal(size=groups)[group]
           + 0.5 * rng.normal(size=groups2)[group2])
    return X, group, group2, rng.binomial(1, 1.0 / (1.0 + np.exp(-eta)))


def crossed_model(n: int, dim: int, groups: int, groups2: int, seed: int) -> pm.Model:
    """Random intercepts on two crossed factors (module docstring)."""
    X, group, group2, y = crossed_data(n, dim, groups, groups2, seed)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 10.0, shape=dim)
        s = pm.HalfNormal("s", 1.0)
        s2 = pm.HalfNormal("s2", 1.0)
        u = pm.Normal("u", 0.0, s, shape=groups)
        v = pm.Normal("v", 0.0, s2, shape=groups2)
        pm.Bernoulli("y", logit_p=pm.Data("X", X) @ b + u[pm.Data("g", group)]
                     + v[pm.Data("g2", group2)], observed=y)
    return model

logging.getLogger("pymc").setLevel(logging.ERROR)
warnings.filterwarnings("ignore")


def min_ess(idata) -> tuple[float, str]:
    """The smallest bulk ESS over every coordinate, and its variable; 0 for a coordinate that
    never moved (ArviZ gives a constant chain an ESS of its length)."""
    ess = az.ess(idata, method="bulk")
    post = idata.posterior

    def smallest(v: str) -> float:
        moved = post[v].max(("chain", "draw")) > post[v].min(("chain", "draw"))
        return float(ess[v].where(moved, 0.0).min())

    name = min(ess.data_vars, key=smallest)
    return smallest(name), name


def run_mhss(model, draws: int, tune: int, seed: int, proposal: str,
             level_moves: bool | None = None, level_fraction: float = 1.0,
             level_cv_order: int | None = None) -> dict:
    t0 = time.perf_counter()
    with model:
        step = pms.MHSS(proposal=proposal, level_moves=level_moves,
                        level_fraction=level_fraction, level_cv_order=level_cv_order)
    setup = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux: kilobytes
    row = {"setup_s": setup, "passes": step.setup_profile["full_data_passes"],
           "peak_gb": peak_kb / 1e6, "frame": type(step.frame).__name__}
    if draws:
        t0 = time.perf_counter()
        with model:
            idata = pm.sample(draws=draws, tune=tune, step=step, chains=1, random_seed=seed,
                              progressbar=False, compute_convergence_checks=False)
        row["sample_s"] = time.perf_counter() - t0
        stats = idata.sample_stats
        row["rows_per_iter"] = float(stats["n_data"].mean())
        row["level_rows"] = float(stats["level_rows"].mean())
        row["level_accept"] = float(stats["level_accept"].mean())
        row["hyper_accept"] = float(stats["hyper_accept"].mean())
        row["sec_per_iter"] = row["sample_s"] / (draws + tune)
        row["accept"] = float(stats["accepted"].mean())
        row["all_rows"] = float(stats["full_data_fallback"].mean())
        ess, var = min_ess(idata)
        row["min_ess_per_iter"], row["slowest"] = ess / draws, var
        per_s = ess / row["sample_s"]
        row["to_ess_1000_s"] = setup + 1000.0 / per_s if per_s > 0 else float("inf")
    return row


def run_nuts(model, draws: int, seed: int) -> dict:
    setup_s, sampling_s, idata = run_numpyro_nuts(model, draws, draws, 1, seed, {})
    ess, var = min_ess(idata)
    # whole wall time to ESS 1000 (compare.time_to_ess): a linear extrapolation, marked as such
    return {"wall_s": setup_s + sampling_s, "min_ess": ess, "slowest": var,
            "to_ess_1000_s": time_to_ess(setup_s, sampling_s, ess)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=None,
                        help="N:G (repeatable); default 1e5:1000")
    parser.add_argument("--dim", type=int, default=10, help="fixed effects, intercept included")
    parser.add_argument("--draws", type=int, default=5000, help="MHSS draws (0: setup only)")
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--proposal", default="pcn", help="MHSS's proposal (its default)")
    parser.add_argument("--level-moves", choices=("auto", "off"), default="auto",
                        help="MHSS's level moves: auto (its default) or off (one joint move)")
    parser.add_argument("--level-fraction", type=float, default=1.0,
                        help="MHSS's level_fraction: the share of levels moved an iteration")
    parser.add_argument("--level-cv-order", type=int, choices=(2, 3, 4), default=None,
                        help="MHSS's level_cv_order (3, 4: the level moves' own third- and "
                             "fourth-order terms; default MHSS's, 4 where it applies)")
    parser.add_argument("--nuts", action="store_true", help="NumPyro's NUTS side by side")
    parser.add_argument("--nuts-draws", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    level_moves = None if args.level_moves == "auto" else False
    print(f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"PyMC {pm.__version__}, MHSS proposal={args.proposal}, "
          f"level moves {args.level_moves} (fraction {args.level_fraction}, "
          f"level_cv_order {args.level_cv_order or 'default'}), "
          f"d_F = {args.dim + 1} (with log s), seed {args.seed}, "
          f"load average {os.getloadavg()[0]:.1f}\n")
    header = ("| N | G | setup s | passes | peak GB | rows/iter (levels') | accept (levels, s) "
              "| on all rows | min ESS/iter (var) | s/iter | sample s | to ESS 1000 s |")
    print(header)
    print("|---" * 12 + "|")
    rows = []
    for case in args.case or ["1e5:1000"]:
        n, g, *g2 = (int(float(v)) for v in case.split(":"))
        if g2:
            model = crossed_model(n, args.dim, g, g2[0], args.seed)
        else:
            model = random_effects_model(*random_effects_data(n, args.dim, g, seed=args.seed),
                                         groups=g)
        r = run_mhss(model, args.draws, args.tune, args.seed, args.proposal, level_moves,
                     args.level_fraction, args.level_cv_order)
        rows.append((n, g, r, model))
        sampled = (f"{r['rows_per_iter']:.1f} ({r['level_rows']:.1f}) | {r['accept']:.2f} "
                   f"({r['level_accept']:.2f}, {r['hyper_accept']:.2f}) | {r['all_rows']:.1%} | "
                   f"{r['min_ess_per_iter']:.4f} ({r['slowest']}) | {r['sec_per_iter']:.4f} | "
                   f"{r['sample_s']:.0f} | {r['to_ess_1000_s']:.0f}"
                   if args.draws else "– | – | – | – | – | – | –")
        levels = f"{g:,} × {g2[0]:,}" if g2 else f"{g:,}"
        print(f"| {n:,} | {levels} | {r['setup_s']:.1f} | {r['passes']} | {r['peak_gb']:.2f} | "
              f"{sampled} |", flush=True)
    if args.nuts:
        print("\nNumPyro NUTS, one chain:\n")
        print("| N | G | wall s | min bulk ESS (var) | to ESS 1000 s (extrapolated) |")
        print("|---|---|---|---|---|")
        for n, g, _, model in rows:
            r = run_nuts(model, args.nuts_draws, args.seed)
            print(f"| {n:,} | {g:,} | {r['wall_s']:.0f} | {r['min_ess']:.0f} ({r['slowest']}) | "
                  f"{r['to_ess_1000_s']:.0f} |", flush=True)
    return rows


if __name__ == "__main__":
    main()
