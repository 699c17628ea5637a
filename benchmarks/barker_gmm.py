"""The Gaussian-mixture experiment of Seita et al. (2017), Sec. 6.1 / Table 1, with BarkerMinibatch.

Welling & Teh's (2011) mixture scaled to N = 1e6 points generated at θ = (0, 1)::

    θ1 ~ N(0, σ1² = 10),  θ2 ~ N(0, σ2² = 1),  x_i ~ ½N(θ1, σx² = 2) + ½N(θ1 + θ2, σx² = 2)

sampled at temperature K = 1e4 (target p0(θ) Π p(x_i|θ)^{1/K}, the shape of a 100-point
posterior) with a random walk of covariance diag(0.15, 0.15), 3000 samples, initial minibatch
m = 50, no tuning. Every run starts at the generating value θ = (0, 1) (``initvals``); runs share
the data and differ in the sampler seed.

Which covariance? Read literally, diag(0.15, 0.15) gives a mean minibatch of about 930 rows, five
times the paper's 182 (``s²`` grows with the squared step). Read as a standard deviation of 0.15
per coordinate (covariance 0.0225·I, ``--proposal-var 0.0225``) it gives about 168, matching the
paper; the authors' code parameterises its walk by ``sigma_proposer``, "the standard error of the
random walk proposer" (their README). AusterityMH reads about 13 000 rows either way (its cost
comes from near-ties, Lemma 1, not from the step size), so it cannot tell the readings apart.

Printed per method: mean final minibatch size (mean ± sd over runs, the paper's Table 1 statistic),
acceptance rate, share of draws in the θ2 < 0 mode next to the exact share (quadrature on a grid,
the data binned at width 0.01), mode switches, wall time per run; the paper's figures alongside.
The tempered posterior's two maxima (printed, from the grid: about (0.2, 0.55) and (0.75, −0.5)
for the default data) lie on either side of θ2 = 0, joined by a ridge whose lowest point is only
about 0.05 nats below them; "both modes visited" means at least 5% of the draws of every run on
each side of θ2 = 0, and the share on the θ2 < 0 side is compared with the exact one. Mode
switches count moves from θ2 > 0.5 to θ2 < −0.5 or back. A scatter plot of the samples over the
log-posterior contours is written to ``<out>/barker_gmm_scatter.png``.

The comparison row runs :class:`pymc_subsample.steps.austerity.AusterityMH` with the paper's
ε = 0.005 (Sec. 6.1). The paper does not state AustereMH(C)'s batch size for this experiment (it
was grid-searched over m ∈ {50, ..., 500}, Appendix B.2.1); the default here is m = 50.

``--logistic`` instead runs the issue's done-when check: logistic regression, N = 5e4, d = 10,
temperature 1, BarkerMinibatch(batch_size=100, cv_order=2) against NUTS (mean z-scores with the
combined MCSE, sd ratios) and the fraction of rows read per test.

    python benchmarks/barker_gmm.py              # both readings, 3 runs each + 1 AusterityMH run
    python benchmarks/barker_gmm.py --runs 10 --austerity-runs 3 --out out/
    python benchmarks/barker_gmm.py --proposal-var 0.15             # only the literal reading
    python benchmarks/barker_gmm.py --austerity-proposal-var 0.0225  # AusterityMH with it too
    python benchmarks/barker_gmm.py --logistic
    python benchmarks/barker_gmm.py --normal-mixture --runs 2  # the model as pm.NormalMixture

``--normal-mixture`` writes the same model with ``pm.NormalMixture`` (weights [0.5, 0.5], means
[θ1, θ1 + θ2], σ = √2) instead of the ``pm.CustomDist`` of :func:`gmm_model`, and by default runs
only BarkerMinibatch with the standard-deviation reading (covariance 0.0225·I) and no AusterityMH
row: the subsampled likelihood rebuilds PyMC's mixture op on the row index itself.
"""

from __future__ import annotations

import argparse
import logging
import platform
import time
import warnings
from pathlib import Path

import arviz as az
import numpy as np
import pandas as pd
import pymc as pm
from scipy.stats import norm

from pymc_subsample.datasets import GMM_SIGMA_X, glm_data, glm_model, gmm_data, gmm_model
from pymc_subsample.steps.barker import BarkerMinibatch

logging.getLogger("pymc").setLevel(logging.ERROR)
warnings.filterwarnings("ignore")

SIGMA_X = GMM_SIGMA_X
SAMPLE = dict(progressbar=False, compute_convergence_checks=False)
# Seita et al. (2017), Table 1: mean minibatch size, mean ± sd over 10 runs of 3000 samples.
PAPER = {"BarkerMinibatch": "182.3 ± 11.4", "AusterityMH": "13540.5 ± 1521.4",
         "MHSubLhd": "65758.9 ± 3222.6"}
MODE_SHARE_MIN = 0.05


def grid_posterior(x: np.ndarray, temperature: float, bin_width: float = 1e-2):
    """Exact tempered log posterior on a grid; the data are binned (error O(bin_width²))."""
    edges = np.arange(x.min(), x.max() + bin_width, bin_width)
    counts, edges = np.histogram(x, edges)
    keep = counts > 0
    centres, counts = 0.5 * (edges[1:] + edges[:-1])[keep], counts[keep]
    g1, g2 = np.linspace(-1.5, 2.5, 161), np.linspace(-3.0, 3.0, 241)
    t1, t2 = np.meshgrid(g1, g2, indexing="ij")
    t1f, t2f = t1.ravel(), t2.ravel()
    log_post = norm.logpdf(t1f, 0.0, np.sqrt(10.0)) + norm.logpdf(t2f, 0.0, 1.0)
    for start in range(0, t1f.size, 256):
        s = slice(start, start + 256)
        a = norm.logpdf(centres[None, :], t1f[s, None], SIGMA_X)
        b = norm.logpdf(centres[None, :], (t1f + t2f)[s, None], SIGMA_X)
        log_post[s] += (np.logaddexp(a, b) - np.log(2.0)) @ counts / temperature
    log_post = log_post.reshape(t1.shape)
    w = np.exp(log_post - log_post.max())
    w /= w.sum()
    return g1, g2, log_post, float(w[t2 < 0].sum())


def describe_modes(grid) -> str:
    """The maximum on each side of θ2 = 0 and the lowest point of the ridge between them."""
    g1, g2, log_post, _ = grid
    top = log_post.max()
    parts = []
    for side in (g2 > 0, g2 < 0):
        sub = np.where(side[None, :], log_post, -np.inf)
        i, j = np.unravel_index(np.argmax(sub), sub.shape)
        parts.append(f"({g1[i]:.2f}, {g2[j]:.2f}) at {log_post[i, j] - top:+.3f}")
    ridge = log_post.max(axis=0)  # best θ1 for each θ2
    between = (g2 > -0.5) & (g2 < 0.5)
    return (f"maxima {parts[0]} and {parts[1]} nats; ridge lowest point between them "
            f"{ridge[between].min() - top:+.3f} nats")


def normal_mixture_model(x: np.ndarray) -> pm.Model:
    """:func:`gmm_model` written with ``pm.NormalMixture`` rather than a ``pm.CustomDist``.

    Parameters
    ----------
    x : ndarray, shape (N,)
        The data.

    Returns
    -------
    pymc.Model
        ``θ1 ~ N(0, 10)``, ``θ2 ~ N(0, 1)``, ``x_i ~ ½N(θ1, 2) + ½N(θ1 + θ2, 2)``.
    """
    with pm.Model() as model:
        t1 = pm.Normal("t1", 0.0, np.sqrt(10.0))
        t2 = pm.Normal("t2", 0.0, 1.0)
        pm.NormalMixture("x", w=[0.5, 0.5], mu=pm.math.stack([t1, t1 + t2]), sigma=SIGMA_X,
                         observed=x)
    return model


def mode_switches(t2: np.ndarray) -> int:
    """Crossings between the modes, with hysteresis: from θ2 > 0.5 to θ2 < −0.5 or back."""
    side = np.where(t2 > 0.5, 1, np.where(t2 < -0.5, -1, 0))
    side = side[side != 0]
    return int(np.count_nonzero(np.diff(side)))


def run_method(label, model, step, args, seeds):
    rows, samples = [], []
    with model:
        for seed in seeds:
            t0 = time.perf_counter()
            idata = pm.sample(args.draws, tune=0, chains=1, cores=1, step=step, random_seed=seed,
                              initvals={"t1": 0.0, "t2": 1.0}, **SAMPLE)
            wall = time.perf_counter() - t0
            post = idata.posterior
            t1, t2 = post["t1"].values.ravel(), post["t2"].values.ravel()
            stats = idata.sample_stats
            rows.append({
                "method": label, "seed": seed,
                "mean_minibatch": float(stats["n_data"].mean()),
                "max_minibatch": int(stats["n_data"].max()),
                "accept": float(stats["accepted"].mean()),
                "share_t2<0": float(np.mean(t2 < 0)), "switches": mode_switches(t2),
                "wall_s": wall,
            })
            samples.append(np.column_stack([t1, t2]))
            print({k: round(v, 3) if isinstance(v, float) else v for k, v in rows[-1].items()},
                  flush=True)
    return rows, samples


def plot(out: Path, grid, panels, temperature: float) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g1, g2, log_post, _ = grid
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(4.2 * (len(panels) + 1), 4.2),
                             sharex=True, sharey=True)
    levels = log_post.max() - np.array([12.0, 8.0, 5.0, 3.0, 2.0, 1.25, 0.75, 0.4, 0.15, 0.0])
    axes[0].contourf(g1, g2, log_post.T, levels=levels, cmap="viridis")
    axes[0].set_title(f"log posterior (K = {temperature:g})")
    for ax, (title, pts) in zip(axes[1:], panels, strict=True):
        ax.contour(g1, g2, log_post.T, levels=levels, colors="0.75", linewidths=0.6,
                   linestyles="solid")
        ax.scatter(pts[:, 0], pts[:, 1], s=3, alpha=0.25, color="C3", rasterized=True)
        ax.set_title(title)
    for ax in axes:
        ax.set_xlabel("θ1")
    axes[0].set_ylabel("θ2")
    fig.tight_layout()
    path = out / "barker_gmm_scatter.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def gmm_main(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    x = gmm_data(args.rows, args.data_seed)
    grid = grid_posterior(x, args.temperature)
    print(f"N = {args.rows}, K = {args.temperature:g}; exact share of θ2 < 0: {grid[3]:.3f} "
          f"(grid, {time.perf_counter() - t0:.1f} s); {describe_modes(grid)}", flush=True)
    model = normal_mixture_model(x) if args.normal_mixture else gmm_model(x)
    kind = " [NormalMixture]" if args.normal_mixture else ""
    seeds = [args.seed + r for r in range(args.runs)]
    rows, panels = [], []
    for var in args.proposal_var:
        cov = np.diag([var, var])
        label = "BarkerMinibatch" + ("" if var == 0.15 else f" (cov {var:g}·I)") + kind
        with model:
            t_setup = time.perf_counter()
            # the paper's setting: a fixed random walk, no control variates
            step = BarkerMinibatch(batch_size=args.batch_size, temperature=args.temperature,
                                   proposal="random_walk", proposal_cov=cov, cv_order=None,
                                   tune=False)
            print(f"{label}: setup {time.perf_counter() - t_setup:.1f} s", flush=True)
        r, s = run_method(label, model, step, args, seeds)
        rows += r
        panels.append((f"{label}\nmean minibatch {np.mean([q['mean_minibatch'] for q in r]):.0f}",
                       s[0]))
    if args.austerity_runs > 0:
        try:
            from pymc_subsample.steps.austerity import AusterityMH
        except ImportError as err:
            print(f"AusterityMH row skipped: {err}")
        else:
            with model:
                step = AusterityMH(epsilon=args.austerity_epsilon,
                                   batch_size=args.austerity_batch_size,
                                   temperature=args.temperature,
                                   proposal="random_walk", cv_order=None,
                                   proposal_cov=np.diag([args.austerity_proposal_var] * 2),
                                   tune=False)
            label = "AusterityMH" + ("" if args.austerity_proposal_var == 0.15
                                     else f" (cov {args.austerity_proposal_var:g}·I)") + kind
            austerity_seeds = [args.seed + r for r in range(args.austerity_runs)]
            r, s = run_method(label, model, step, args, austerity_seeds)
            rows += r
            panels.append((f"{label} (ε = {args.austerity_epsilon:g}, "
                           f"m = {args.austerity_batch_size})\nmean minibatch "
                           f"{np.mean([q['mean_minibatch'] for q in r]):.0f}", s[0]))
    table = pd.DataFrame(rows)
    summary = table.groupby("method", sort=False).agg(
        runs=("seed", "size"),
        mean_minibatch=("mean_minibatch", "mean"),
        sd_over_runs=("mean_minibatch", "std"),
        max_minibatch=("max_minibatch", "max"),
        accept=("accept", "mean"),
        min_share_t2_neg=("share_t2<0", "min"),
        max_share_t2_neg=("share_t2<0", "max"),
        switches=("switches", "mean"),
        wall_s=("wall_s", "mean"),
    )
    summary["both_modes_every_run"] = table.groupby("method", sort=False)["share_t2<0"].apply(
        lambda s: bool(np.all((s >= MODE_SHARE_MIN) & (s <= 1 - MODE_SHARE_MIN)))
    )
    summary["paper_mean_minibatch"] = [PAPER.get(m.removesuffix(kind), "") for m in summary.index]
    print(f"\nGaussian mixture{kind}, N = {args.rows}, K = {args.temperature:g}, "
          f"{args.draws} samples, m = {args.batch_size}; exact share of θ2 < 0 = {grid[3]:.3f}; "
          f"{platform.machine()}, Python {platform.python_version()}, PyMC {pm.__version__}\n")
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(summary.round(3).to_string())
    print(f"\npaper (Table 1): MHMINIBATCH {PAPER['BarkerMinibatch']}, AUSTEREMH(C) "
          f"{PAPER['AusterityMH']} (ε = 0.005), MHSUBLHD {PAPER['MHSubLhd']}")
    path = plot(out, grid, panels, args.temperature)
    print(f"scatter plot: {path.resolve()}")


def logistic_main(args) -> None:
    """Done-when check: BarkerMinibatch(cv_order=2) at temperature 1 against NUTS."""
    n_rows, dim = int(args.logistic_rows), args.logistic_dim
    with glm_model(*glm_data(n_rows, dim, seed=args.data_seed)):
        t0 = time.perf_counter()
        ref = pm.sample(1000, tune=1000, chains=2, cores=1, random_seed=args.seed, **SAMPLE)
        t_nuts = time.perf_counter() - t0
        t0 = time.perf_counter()
        step = BarkerMinibatch(batch_size=100, cv_order=2)
        t_setup = time.perf_counter() - t0
        idata = pm.sample(args.logistic_draws, tune=2000, chains=2, cores=1, step=step,
                          random_seed=args.seed + 1, **SAMPLE)
        t_barker = time.perf_counter() - t0
    rows = []
    for data in (ref, idata):
        post = data.posterior["b"]
        rows.append((post.mean(("chain", "draw")).values, post.std(("chain", "draw")).values,
                     az.mcse(data, var_names=["b"])["b"].values,
                     az.ess(data, var_names=["b"])["b"].values))
    (m0, s0, e0, ess0), (m1, s1, e1, ess1) = rows
    z = (m1 - m0) / np.sqrt(e0**2 + e1**2)
    stats = idata.sample_stats
    frac = float(stats["n_data"].mean()) / n_rows
    table = pd.DataFrame({"nuts_mean": m0, "barker_mean": m1, "z": z, "sd_ratio": s1 / s0,
                          "ess_nuts": ess0, "ess_barker": ess1})
    print(f"\nlogistic regression N = {n_rows}, d = {dim}, temperature 1; BarkerMinibatch("
          f"batch_size=100, cv_order=2), 2 x {args.logistic_draws} draws + 2000 tune\n")
    print(table.round(3).to_string())
    print(f"\nmax |z| = {np.abs(z).max():.2f}, sd ratio range [{(s1 / s0).min():.3f}, "
          f"{(s1 / s0).max():.3f}]; rows per test: mean {float(stats['n_data'].mean()):.1f} = "
          f"{100 * frac:.3f}% of N (max {int(stats['n_data'].max())}); accept "
          f"{float(stats['accepted'].mean()):.3f}; s2 median {float(stats['s2'].median()):.2e}, "
          f"max {float(stats['s2'].max()):.3f}")
    print(f"wall: NUTS {t_nuts:.1f} s, Barker {t_barker:.1f} s (setup with MAP and control "
          f"variates {t_setup:.1f} s)")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=lambda s: int(float(s)), default=1_000_000)
    parser.add_argument("--temperature", type=float, default=1e4)
    parser.add_argument("--draws", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--proposal-var", type=float, nargs="+", default=None,
                        help="diagonals of the random-walk covariance to run: the paper's 0.15 "
                        "read as a variance and as a standard deviation (0.0225); default both, "
                        "only 0.0225 with --normal-mixture")
    parser.add_argument("--runs", type=int, default=3, help="BarkerMinibatch runs (paper: 10)")
    parser.add_argument("--austerity-runs", type=int, default=None,
                        help="0 skips the row; default 1, 0 with --normal-mixture")
    parser.add_argument("--austerity-epsilon", type=float, default=0.005)
    parser.add_argument("--austerity-batch-size", type=int, default=50)
    parser.add_argument("--austerity-proposal-var", type=float, default=0.15)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--out", default="out", help="directory for the scatter plot")
    parser.add_argument("--logistic", action="store_true",
                        help="run the logistic-regression done-when check instead")
    parser.add_argument("--logistic-rows", type=float, default=5e4)
    parser.add_argument("--logistic-dim", type=int, default=10)
    parser.add_argument("--logistic-draws", type=int, default=20000)
    parser.add_argument("--normal-mixture", action="store_true",
                        help="write the mixture with pm.NormalMixture instead of pm.CustomDist")
    args = parser.parse_args(argv)
    # the NormalMixture run checks the op rebuild, so one proposal reading (the paper's) suffices
    if args.proposal_var is None:
        args.proposal_var = [0.0225] if args.normal_mixture else [0.15, 0.0225]
    if args.austerity_runs is None:
        args.austerity_runs = 0 if args.normal_mixture else 1
    if args.logistic:
        logistic_main(args)
    else:
        gmm_main(args)


if __name__ == "__main__":
    main()
