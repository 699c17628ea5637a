"""MHSS on posteriordb's ``mesquite-logmesquite_logvash`` against its reference (issue 28).

The model (46 rows; ``log(weight) ~ Normal(X β, σ)``, 6 coefficients with flat priors, σ
HalfFlat, as in posteriordb's Stan code) is :func:`tests.external_models.mesquite_model`; the
reference is posteriordb's summary (rstan NUTS, 10,000 thinned draws) shipped in
``tests/data/posteriordb/mesquite.json``. Here the posterior is also known in closed form:
``σ² ~ Inv-Gamma((N − p − 1)/2, RSS/2)`` (flat prior on σ), so σ's exact mean and sd are printed
too.

For each proposal (``pcn``, ``random_walk``) it runs ``pms.MHSS(proposal=...)`` with 4 chains
long enough for a bulk ESS of 5,000 on every coordinate at the default draws, and prints a
table: per coordinate the mean, sd, ``z = (mean − ref mean) / sqrt(mcse² + ref_sd²/ref_n)``,
the sd ratio to the reference and the bulk ESS; then the acceptance rate, the scaling each chain
tuned to (ρ for pCN, κ for the random walk), rows read per iteration, the share of iterations
that fell back to the full data, and the wall time (step construction + sampling).

    python benchmarks/posteriordb_mesquite.py
    python benchmarks/posteriordb_mesquite.py --proposals pcn --draws 30000 --seed 5
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's package and tests.external_models

#: draws per chain that give a bulk ESS of about 5,000 or more on every coordinate
DEFAULT_DRAWS = {"pcn": 40_000, "random_walk": 150_000}


def exact_sigma() -> tuple[float, float]:
    """Mean and sd of σ under the flat prior: σ² ~ Inv-Gamma(a, b), a = (N − p − 1)/2,
    b = RSS/2, so E σ = sqrt(b) Γ(a − ½)/Γ(a) and E σ² = b/(a − 1)."""
    from scipy.special import gammaln

    from tests.external_models import mesquite_design

    X, y = mesquite_design()
    n, p = X.shape
    resid = y - X @ np.linalg.lstsq(X, y, rcond=None)[0]
    a, b = (n - p - 1) / 2, float(resid @ resid) / 2
    m1 = np.sqrt(b) * np.exp(gammaln(a - 0.5) - gammaln(a))
    return float(m1), float(np.sqrt(b / (a - 1) - m1**2))


def run(proposal: str, draws: int, tune: int, seed: int, cores: int) -> None:
    import pymc as pm

    import pymc_subsample as pms
    from tests.external_models import mesquite_model, mesquite_reference, scalar_summary

    t0 = time.perf_counter()
    with mesquite_model():
        step = pms.MHSS(proposal=proposal)
        idata = pm.sample(draws, tune=tune, chains=4, cores=cores, step=step,
                          random_seed=seed, progressbar=False,
                          compute_convergence_checks=False)
    wall = time.perf_counter() - t0
    ours, ref = scalar_summary(idata), mesquite_reference()
    stats = idata.sample_stats
    scaling = stats["scaling"].values[:, -1]
    print(f"\n### MHSS(proposal={proposal!r}): 4 chains × ({tune} tune + {draws} draws), "
          f"seed {seed}\n")
    print("| coordinate | mean | ref mean | sd | ref sd | z | sd ratio | bulk ESS |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in ref.items():
        s = ours[name]
        z = (s["mean"] - r["mean"]) / np.sqrt(s["mcse"] ** 2 + r["sd"] ** 2 / r["n"])
        print(f"| {name} | {s['mean']:.4f} | {r['mean']:.4f} | {s['sd']:.4f} | {r['sd']:.4f} | "
              f"{z:+.2f} | {s['sd'] / r['sd']:.3f} | {s['ess']:.0f} |")
    knob = "ρ" if proposal == "pcn" else "κ"
    min_ess = min(s["ess"] for s in ours.values())
    print(f"\nacceptance {float(stats['accepted'].mean()):.3f}; tuned {knob} per chain "
          f"{', '.join(f'{v:.3g}' for v in scaling)}; rows/iter "
          f"{float(stats['n_data'].mean()):.1f} of 46; full_data_fallback share "
          f"{float(stats['full_data_fallback'].mean()):.4f}; wall {wall:.1f} s "
          f"(cores={cores}); min bulk ESS {min_ess:.0f}"
          + ("" if min_ess >= 5000 else " (below 5,000: run longer)"), flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proposals", nargs="+", default=["pcn", "random_walk"],
                        choices=["pcn", "random_walk"])
    parser.add_argument("--draws", type=int, default=None,
                        help=f"draws per chain (default {DEFAULT_DRAWS})")
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args(argv)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    import pymc as pm

    import pymc_subsample as pms

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    print(f"posteriordb mesquite-logmesquite_logvash (N = 46, 7 parameters); pymc_subsample "
          f"from {Path(pms.__file__).parent} (commit {commit or 'unknown'}); "
          f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"PyMC {pm.__version__}")
    from tests.external_models import mesquite_reference

    mean, sd = exact_sigma()
    ref = mesquite_reference()["sigma"]
    print(f"σ exact (flat prior): mean {mean:.6f}, sd {sd:.6f}; posteriordb reference: mean "
          f"{ref['mean']:.6f}, sd {ref['sd']:.6f} (n = {ref['n']})")
    for proposal in args.proposals:
        run(proposal, args.draws or DEFAULT_DRAWS[proposal], args.tune, args.seed, args.cores)


if __name__ == "__main__":
    main()
