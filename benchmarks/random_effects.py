"""Random intercepts at scale: MHSS against NumPyro's NUTS, side by side, one chain each.

A logistic regression with ``d`` fixed effects and ``G`` group effects with a sampled scale
(:func:`pymc_subsample.datasets.random_effects_model`), centred (``η = Xb + u[g]``) or, with
``--non-centred``, written ``η = Xb + s·z[g]`` (which MHSS samples as ``u = s·z``,
:mod:`pymc_subsample.model.centring`, and NUTS as written), on ``N`` generated rows; ``compare``
runs both on the same model and reports the whole wall time to a bulk ESS of 1000, rows read
per iteration and MHSS's share of moves decided on all rows.

    python benchmarks/random_effects.py --rows 1e6 --dim 10 --groups 100
    python benchmarks/random_effects.py --rows 1e6 --dim 10 --groups 100 --non-centred
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import warnings

import pymc as pm

import pymc_subsample as pms
from pymc_subsample.datasets import random_effects_data, random_effects_model

logging.getLogger("pymc").setLevel(logging.ERROR)
warnings.filterwarnings("ignore")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e6)
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--draws", type=int, default=20_000, help="MHSS draws")
    parser.add_argument("--tune", type=int, default=2_000, help="MHSS tuning steps")
    parser.add_argument("--nuts-draws", type=int, default=200, help="NUTS draws and tuning")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--non-centred", action="store_true",
                        help="write the group effects s * z[g] (z ~ N(0, 1))")
    args = parser.parse_args(argv)
    n = int(args.rows)
    model = random_effects_model(*random_effects_data(n, args.dim, args.groups, seed=args.seed),
                                 groups=args.groups, centred=not args.non_centred)
    result = pms.compare(
        model, {"MHSS": pms.MHSS}, draws=args.draws, tune=args.tune, chains=1,
        nuts_draws=args.nuts_draws, nuts_tune=args.nuts_draws, random_seed=args.seed,
    )
    mhss = result.idata["MHSS"].sample_stats
    form = "s * z[g]" if args.non_centred else "u[g]"
    print(f"random intercepts {form}: N = {n:,}, d = {args.dim}, G = {args.groups} "
          f"({args.dim + args.groups + 1} parameters); {platform.machine()}, {os.cpu_count()} "
          f"cores, Python {platform.python_version()}, PyMC {pm.__version__}\n")
    print(result)
    print(f"\nMHSS moves decided on all rows: {float(mhss['full_data_fallback'].mean()):.2%}; "
          f"clipped: {int(mhss['clipped'].sum())}")
    return result


if __name__ == "__main__":
    main()
