"""MHSS against NUTS on a tall logistic regression: ``python -m pymc_subsample.demo``.

Generates ``N`` rows (default 10⁵) of logistic-regression data with ``d = 10`` coefficients
(an intercept and standard-normal covariates, Prado, Nemeth & Sherlock 2024, Sec. 5.1), samples
the posterior with :class:`pymc_subsample.MHSS` (second-order control variates) and with NUTS
on the same data, prints the :func:`pymc_subsample.compare.compare` table and writes a forest
plot of both posteriors to ``--out``. NUTS is NumPyro's (``pm.sample(nuts_sampler="numpyro")``)
when NumPyro is installed (``pip install "pymc-subsample[jax]"``), PyMC's own otherwise; the
output says which ran. The headline column is ``time_to_ess1000_s``: each method's whole wall
time (step construction, compiling, tuning and draws) linearly extrapolated to a bulk ESS of
1000.

NUTS evaluates the gradient on all ``N`` rows at every leapfrog step, so on tall data it runs
fewer draws and tuning steps than MHSS to keep the demo short (see :func:`nuts_budget`); the
table's ``tune`` and ``draws`` columns show what each method ran. The defaults are chosen to
finish within 90 s on two cores, PyTensor's and JAX's compilation on a cold cache included.

    python -m pymc_subsample.demo --out out/              # 10^5 rows, about a minute
    python -m pymc_subsample.demo --rows 1e6 --out out/   # 10^6 rows, a few minutes
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import time
import warnings
from functools import partial
from pathlib import Path

import pymc as pm

from pymc_subsample.compare import (
    NUTS_SAMPLERS,
    Comparison,
    compare,
    nuts_method_name,
    resolve_nuts_sampler,
)
from pymc_subsample.datasets import glm_data, glm_model
from pymc_subsample.steps.mhss import MHSS

__all__ = ["BLAS_NOTICE", "blas_notice", "main", "nuts_budget"]

FIGURE_NAME = "demo_forest.png"
DEFAULT_ROWS = 100_000


def nuts_budget(rows: int, draws: int, tune: int) -> tuple[int, int]:
    """NUTS draws and tuning steps per chain for ``rows`` rows.

    NUTS's cost per iteration grows like ``N`` (a few full-data gradients each), so its draws
    and tuning steps are ``3·10⁷ / N`` each (300 at 10⁵ rows, 100 from 3·10⁵ on), never more
    than MHSS's ``draws`` and ``tune`` and never fewer than 100. At 10⁵ rows two NumPyro
    chains of 300 draws give a bulk ESS of about 1000.
    """
    budget = max(100, round(3e7 / rows))
    return min(draws, budget), min(tune, budget)


#: What :func:`blas_notice` prints in place of PyTensor's warning when it links no BLAS.
BLAS_NOTICE = (
    "Note: PyTensor links no BLAS of its own (usual after a pip install) and leaves large matrix "
    "products to NumPy's; this demo's timings do not depend on it (docs/getting-started.md).")


def blas_notice() -> str | None:
    """One line in place of PyTensor's multi-line "could not link to a BLAS" warning.

    Reads PyTensor's ``blas__ldflags`` now (PyTensor looks for a BLAS, and warns, the first time
    they are read, and keeps the answer), with that one warning silenced, and returns
    :data:`BLAS_NOTICE` when it found none, ``None`` when it links one.
    """
    import pytensor

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"PyTensor could not link to a BLAS",
                                category=UserWarning)
        flags = pytensor.config.blas__ldflags
    return None if flags else BLAS_NOTICE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pymc_subsample.demo",
        description="MHSS (order 2) against NUTS on a synthetic logistic regression.",
    )
    parser.add_argument("--rows", type=float, default=DEFAULT_ROWS,
                        help=f"rows N (default {DEFAULT_ROWS:.0e})")
    parser.add_argument("--out", type=Path, default=Path("out"),
                        help=f"directory for {FIGURE_NAME} (default ./out)")
    parser.add_argument("--dim", type=int, default=10, help="coefficients d (default 10)")
    parser.add_argument("--draws", type=int, default=2000, help="MHSS draws per chain")
    parser.add_argument("--tune", type=int, default=1000, help="MHSS tuning steps per chain")
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--nuts-draws", type=int, default=None,
                        help="NUTS draws per chain (default: 3e7 / rows, at least 100)")
    parser.add_argument("--nuts-tune", type=int, default=None,
                        help="NUTS tuning steps per chain (default: like --nuts-draws)")
    parser.add_argument("--nuts-sampler", choices=NUTS_SAMPLERS, default="auto",
                        help="NUTS to compare with: numpyro (pm.sample(nuts_sampler='numpyro')), "
                             "pymc, or auto (numpyro when installed; default)")
    parser.add_argument("--seed", type=int, default=1)
    return parser


def main(argv: list[str] | None = None) -> Comparison:
    """Run the demo; ``argv`` as on the command line (``None``: ``sys.argv``)."""
    args = _parser().parse_args(argv)
    rows = int(args.rows)
    auto_draws, auto_tune = nuts_budget(rows, args.draws, args.tune)
    nuts_draws = auto_draws if args.nuts_draws is None else args.nuts_draws
    nuts_tune = auto_tune if args.nuts_tune is None else args.nuts_tune
    sampler = resolve_nuts_sampler(args.nuts_sampler)
    nuts_name = nuts_method_name(sampler)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=UserWarning, module="pymc")

    print(f"Logistic regression: N = {rows:,} rows, d = {args.dim} coefficients "
          f"(seed {args.seed}).", flush=True)
    notice = blas_notice()
    if notice:
        print(notice, flush=True)
    if sampler == "numpyro":
        print('NUTS: NumPyro\'s, through pm.sample(nuts_sampler="numpyro") (JAX compilation '
              "counted in its time).", flush=True)
    else:
        print("NUTS: PyMC's own"
              + (' (NumPyro is not installed: pip install "pymc-subsample[jax]" for the '
                 "faster NumPyro NUTS)." if args.nuts_sampler == "auto" else "."), flush=True)
    print(f"Sampling with MHSS (order 2): {args.chains} chains x {args.draws} draws after "
          f"{args.tune} tuning steps; {nuts_name}: {args.chains} chains x {nuts_draws} draws "
          f"after {nuts_tune} tuning steps. Chains run one after another.", flush=True)
    start = time.perf_counter()
    X, y = glm_data(rows, args.dim, "logistic", seed=args.seed)
    model = glm_model(X, y, "logistic")
    figure = args.out / FIGURE_NAME
    result = compare(
        model,
        {"MHSS-2": partial(MHSS, cv_order=2)},
        draws=args.draws,
        tune=args.tune,
        chains=args.chains,
        nuts_sampler=sampler,
        nuts_draws=nuts_draws,
        nuts_tune=nuts_tune,
        random_seed=args.seed,
        figure=figure,
    )
    elapsed = time.perf_counter() - start

    print()
    print(result)
    print()
    print("setup_s: building the step (for MHSS: full-data MAP, control variates, bounds and")
    if sampler == "numpyro":
        print("  compiling; for NUTS: pm.sample's model-to-JAX conversion, starting points and")
        print("  post-processing). sampling_s: pm.sample, tuning included (for NUTS: NumPyro's")
        print("  MCMC.run, JAX compilation included).")
    else:
        print("  compiling; for NUTS: pm.init_nuts). sampling_s: pm.sample, tuning included.")
    print("ess_bulk, ess_tail: ArviZ ESS, minimum over the d coefficients; ess_bulk_per_s")
    print("  divides by setup_s + sampling_s. r_hat: maximum over the coefficients.")
    print("time_to_ess1000_s: setup_s + sampling_s x 1000 / ess_bulk, the whole wall time to a")
    print("  bulk ESS of 1000 (setup once, sampling scaled linearly).")
    print("rows_per_iter: rows whose likelihood was evaluated per iteration (NUTS: N x")
    print("  leapfrog steps, since each gradient reads every row).")
    print("accept: acceptance rate (NUTS: mean acceptance probability).")
    print("z_vs_ref: largest |mean - mean_NUTS| / sqrt(mcse^2 + mcse_NUTS^2) over coefficients;")
    print("  values below about 3 mean MHSS and NUTS agree to within Monte Carlo error.")
    if (nuts_draws, nuts_tune) != (args.draws, args.tune):
        nuts_share = nuts_tune / (nuts_tune + nuts_draws)
        mhss_share = args.tune / (args.tune + args.draws)
        print(f"NUTS ran {nuts_draws} draws after {nuts_tune} tuning steps per chain (MHSS: "
              f"{args.draws} after {args.tune})")
        print(f"  to keep the demo short. Tuning is {nuts_share:.0%} of NUTS's iterations here "
              f"({mhss_share:.0%} for MHSS),")
        print("  so a long NUTS run would reach a higher ESS per second, roughly "
              f"{1 / (1 - nuts_share):.1f}x this one.")
        print("  Change it with --nuts-draws and --nuts-tune.")
    table = result.table.set_index("method")
    mhss_t, nuts_t = (table.loc[m, "time_to_ess1000_s"] for m in ("MHSS-2", nuts_name))
    print()
    print(f"Time to a bulk ESS of 1000 (whole wall): MHSS-2 {mhss_t:.3g} s, "
          f"{nuts_name} {nuts_t:.3g} s ({nuts_t / mhss_t:.3g}x).")
    print(f"Total {elapsed:.0f} s on {os.cpu_count()} CPUs ({platform.machine()}), Python "
          f"{platform.python_version()}, PyMC {pm.__version__}.")
    print(f"Forest plot of both posteriors written to {result.figure.resolve()}")
    return result


if __name__ == "__main__":
    main()
