"""A bimodal posterior on 100 000 rows with the minibatch Barker test (BarkerMinibatch).

Welling & Teh's (2011) two-component mixture, ``x_i ~ ½N(θ1, 2) + ½N(θ1 + θ2, 2)`` with priors
``θ1 ~ N(0, 10)``, ``θ2 ~ N(0, 1)``, generated at ``θ = (0, 1)`` and sampled at temperature
``K = N/100``, so the tempered posterior has the shape of the original 100-point one: two modes,
near ``(0.2, 0.6)`` and ``(0.8, −0.55)`` here (the generating value and its mirror image
``(1, −1)`` give the same mixture), joined by a shallow ridge. This is the experiment of Seita
et al. (2017), Sec. 6.1, at a tenth of its size (``benchmarks/barker_gmm.py`` runs N = 1e6).

The mixture is written with ``pm.CustomDist`` and a per-row log density: ``pm.NormalMixture``
cannot be split into per-row terms by the subsampled likelihood.

    python examples/gmm_barker.py                 # about 15 s; writes out/gmm_barker.png
    python examples/gmm_barker.py --out /tmp/plots
"""

from __future__ import annotations

import warnings

# ArviZ's once-a-day notice of its coming refactor, raised when it is imported: only that one
warnings.filterwarnings("ignore", message=r"\s*ArviZ is undergoing a major refactor",
                        category=FutureWarning, module="arviz")

import argparse
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402

from pymc_subsample.datasets import GMM_SIGMA_X, gmm_data, gmm_model  # noqa: E402
from pymc_subsample.demo import blas_notice
from pymc_subsample.steps.barker import BarkerMinibatch  # noqa: E402

N_ROWS = 100_000
TEMPERATURE = N_ROWS / 100
SIGMA_X = GMM_SIGMA_X


def main(argv=None) -> None:
    if notice := blas_notice():  # one line instead of PyTensor's BLAS warning
        print(notice)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out", help="directory for the scatter plot")
    args = parser.parse_args(argv)

    x = gmm_data(N_ROWS, seed=0)

    start = time.perf_counter()
    with gmm_model(x):
        # the paper's fixed random walk, diag(0.15, 0.15), and initial minibatch of 50 rows
        step = BarkerMinibatch(batch_size=50, temperature=TEMPERATURE,
                               proposal="random_walk", proposal_cov=np.diag([0.15, 0.15]),
                               cv_order=None, tune=False)
        idata = pm.sample(3000, tune=0, chains=2, cores=1, step=step, random_seed=1,
                          initvals={"t1": 0.0, "t2": 1.0}, progressbar=False,
                          compute_convergence_checks=False)
    wall = time.perf_counter() - start

    stats = idata.sample_stats
    t1 = idata.posterior["t1"].values
    t2 = idata.posterior["t2"].values
    # the two maxima, near (0.2, 0.6) and (0.8, −0.55), lie either side of θ2 = 0: a chain
    # visits both if at least 5% of its draws are on each side (the exact share is 0.49)
    share = (t2 < 0).mean(axis=1)
    both = bool(np.all((share >= 0.05) & (share <= 0.95)))
    print(f"N = {N_ROWS:,} rows, temperature {TEMPERATURE:g}; 2 chains x 3000 draws in "
          f"{wall:.1f} s (setup included)")
    print(f"mean minibatch size {float(stats['n_data'].mean()):.1f} rows "
          f"({100 * float(stats['n_data'].mean()) / N_ROWS:.2f}% of N), largest "
          f"{int(stats['n_data'].max())}; acceptance {float(stats['accepted'].mean()):.2f}")
    print(f"share of draws in the θ2 < 0 mode per chain: {np.round(share, 2)}; "
          f"both modes visited: {both}")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.scatter(t1.ravel(), t2.ravel(), s=3, alpha=0.3, color="C3", rasterized=True)
    ax.set(xlabel="θ1", ylabel="θ2", xlim=(-1.5, 2.5), ylim=(-3, 3),
           title=f"BarkerMinibatch, N = {N_ROWS:,}, K = {TEMPERATURE:g}")
    fig.tight_layout()
    path = out / "gmm_barker.png"
    fig.savefig(path, dpi=120)
    print(f"scatter plot: {path.resolve()}")


if __name__ == "__main__":
    main()
