"""What the real-data examples share: the command line, ``compare`` against NUTS, the tables.

``flights.py`` and ``births.py`` each load a :class:`pymc_subsample.datasets.TableData`, fit
it with :func:`pymc_subsample.datasets.glm_model` and call :func:`run` here.
"""

from __future__ import annotations

import warnings

# ArviZ's once-a-day notice of its coming refactor, raised when it is imported: only that one
warnings.filterwarnings("ignore", message=r"\s*ArviZ is undergoing a major refactor",
                        category=FutureWarning, module="arviz")

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path

import arviz as az
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pymc as pm

import pymc_subsample as pms
from pymc_subsample.compare import Comparison
from pymc_subsample.datasets import TableData, glm_model
from pymc_subsample.demo import blas_notice


def run(
    argv,
    *,
    description: str,
    load: Callable[[int | None, int], TableData],
    family: str,
    describe: Callable[[TableData], str],
    draws: int,
    nuts_draws: int,
    figure: str,
    n_coefficients: int | None = None,
    build: Callable[[TableData], pm.Model] | None = None,
    var_names: list[str] | None = None,
    tune: int = 1000,
) -> Comparison:
    """Parse ``argv``, run NUTS and MHSS on the data with ``compare``, print what they found.

    ``load(max_rows, seed)`` gives the data; ``describe(data)`` the line printed about it;
    the coefficient table shows the first ``n_coefficients`` (all when None), by name.
    ``build(data)`` makes the model (default: ``glm_model`` of ``family``, prior sd 10), whose
    coefficients are ``b``, one per column; ``var_names`` are the variables compared and
    plotted (default: all).
    """
    if notice := blas_notice():  # one line instead of PyTensor's BLAS warning
        print(notice)
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rows", type=int, default=None,
                        help="random subset of this many rows (default: all)")
    parser.add_argument("--draws", type=int, default=draws, help="MHSS draws per chain")
    parser.add_argument("--tune", type=int, default=tune, help="MHSS tuning steps per chain")
    parser.add_argument("--nuts-draws", type=int, default=nuts_draws,
                        help="NUTS draws and tuning steps per chain (0: MHSS alone)")
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=figure, help="forest plot (PNG)")
    args = parser.parse_args(argv)

    data = load(args.rows, args.seed)
    model = (build or (lambda d: glm_model(d.X, d.y, family, prior_sd=10.0)))(data)
    print(f"{describe(data)}, d = {data.X.shape[1]}\n")
    result = pms.compare(
        model,
        {"MHSS": pms.MHSS},
        draws=args.draws,
        tune=args.tune,
        chains=args.chains,
        # every NUTS gradient reads all rows: a shorter run still gives a usable reference
        nuts=args.nuts_draws > 0,
        nuts_draws=args.nuts_draws or None,
        nuts_tune=args.nuts_draws or None,
        random_seed=args.seed,
        figure=args.out,
        var_names=var_names,
    )
    print(result)
    fallback = float(result.idata["MHSS"].sample_stats["full_data_fallback"].mean())
    print(f"\nMHSS moves decided on all rows: {fallback:.3%}")

    # posterior means and sds by coefficient name (the model's b[k] is column k of X)
    columns = {}
    for name, idata in result.idata.items():
        b = idata.posterior["b"]
        columns[f"{name} mean"] = b.mean(("chain", "draw")).values
        columns[f"{name} sd"] = b.std(("chain", "draw")).values
    coefs = pd.DataFrame(columns, index=pd.Index(data.columns, name="coefficient"))
    print(f"\n{coefs.iloc[:n_coefficients].round(4).to_string()}")
    print(f"\nforest plot: {result.figure.resolve()}")
    trace = Path(args.out).with_name(f"{Path(args.out).stem}_trace.png")
    trace_figure(result.idata, data.columns, trace)
    print(f"trace plot: {trace.resolve()}")
    return result


def trace_figure(idatas: Mapping[str, az.InferenceData], columns, path) -> None:
    """Traces of four coefficients per method: the first three and the one with the largest
    posterior sd under the first method (NUTS when it ran).

    The x-axis is the fraction of each run's draws, so runs of different lengths share it.
    """
    first = next(iter(idatas.values()))
    widest = int(np.argmax(first.posterior["b"].std(("chain", "draw")).values))
    shown = list(dict.fromkeys([0, 1, 2, widest]))[: len(columns)]
    fig, axes = plt.subplots(len(shown), 1, figsize=(9, 1.8 * len(shown)), squeeze=False)
    for ax, k in zip(axes[:, 0], shown, strict=True):
        for i, (name, idata) in enumerate(idatas.items()):
            draws = idata.posterior["b"].values[..., k]  # (chain, draw)
            for c, chain in enumerate(draws):
                ax.plot(np.linspace(0.0, 1.0, chain.size), chain, lw=0.5, alpha=0.8,
                        color=f"C{i}", label=name if c == 0 else None)
        ax.set_ylabel(columns[k])
    axes[0, 0].legend(loc="upper right", fontsize="small")
    axes[-1, 0].set_xlabel("fraction of the run's draws (after tuning)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
