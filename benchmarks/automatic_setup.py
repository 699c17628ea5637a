"""Setup time of ``pms.MHSS()`` (``MHSS built in …``) on the models of
``benchmarks/automatic_bounds.py``, for one checkout: run it from two worktrees to compare a
change's before and after on the same machine.

    python benchmarks/automatic_setup.py REPO SIZES FAMILIES
    PYTHONPATH=. python benchmarks/automatic_setup.py . 100000,1000000 logistic,beta

``REPO`` is the checkout whose ``pymc_subsample`` and ``benchmarks`` are imported (put it on
``PYTHONPATH`` too). Prints one table row per size and family with the load average, since
setup times on a shared machine move with it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def main() -> None:
    repo, sizes, families = sys.argv[1], sys.argv[2], sys.argv[3]
    sys.path.insert(0, repo)
    import pymc_subsample as pms
    from benchmarks.automatic_bounds import model

    commit = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    print(f"repo {repo} ({commit})", flush=True)
    for n in (int(v) for v in sizes.split(",")):
        for name in families.split(","):
            with model(name, n):
                t0 = time.perf_counter()
                step = pms.MHSS()
                seconds = time.perf_counter() - t0
            kind = type(step._reference_pass.terms[0]).__name__
            bound = "automatic" if kind == "PredictorTerm" else "hand-derived"
            print(f"| {n:,} | {name} | {bound} | {seconds:.1f} | load "
                  f"{os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
