"""``pm.sample(cores=2)`` with MHSS under the ``fork`` and ``spawn`` start methods, and what a
spawned worker pays before its first draw: importing PyMC.

Builds ``pms.MHSS()`` once on the demo's model (a logistic regression, 10⁵ × 10), then times
``pm.sample`` (2 chains on 2 processes) with each start method in turn, and times a fresh
Python process importing ``pymc`` and ``pymc_subsample`` (what each spawned worker does before
it unpickles the step; a forked one inherits the parent's modules):

    python benchmarks/spawn.py --repeat 2
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
import warnings


def _import_seconds(module: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-W", "ignore", "-c", f"import {module}"], check=True)
    return time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--draws", type=int, default=1000)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.getLogger("pymc").setLevel(logging.ERROR)
    import pymc as pm

    import pymc_subsample as pms
    from pymc_subsample.datasets import glm_data, glm_model

    X, y = glm_data(100_000, 10, "logistic", seed=0)
    with glm_model(X, y, "logistic"):
        step = pms.MHSS(progressbar=False)
        for _ in range(args.repeat):
            for ctx in ("fork", "spawn"):
                load = os.getloadavg()[0]
                start = time.perf_counter()
                pm.sample(args.draws, tune=args.draws, chains=2, cores=2, step=step,
                          mp_ctx=ctx, random_seed=1, progressbar=False,
                          compute_convergence_checks=False)
                print(f"{ctx:5s}: pm.sample {time.perf_counter() - start:.2f} s "
                      f"(load {load:.2f})", flush=True)
    for module in ("pymc", "pymc_subsample"):
        print(f"a new process importing {module}: {_import_seconds(module):.2f} s")


if __name__ == "__main__":  # spawned workers import this module: nothing runs at import
    main()
