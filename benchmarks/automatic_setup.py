"""Setup time of ``pms.MHSS()`` (``MHSS built in …``) on the models of
``benchmarks/automatic_bounds.py``, for one checkout: run it from two worktrees to compare a
change's before and after on the same machine.

    python benchmarks/automatic_setup.py REPO SIZES FAMILIES
    PYTHONPATH=. python benchmarks/automatic_setup.py . 100000,1000000 logistic,beta

``REPO`` is the checkout whose ``pymc_subsample`` and ``benchmarks`` are imported (put it on
``PYTHONPATH`` too). Prints one table row per size and family: the setup's seconds, its
full-data passes and their seconds, the seconds compiling the pass, the seconds spent in the
automatic bound's enclosures (``AutomaticFamily.all_suprema``, summed over the pass's
threads, so up to twice the wall time they take on two cores), the setup's processor seconds
(``time.process_time``, all threads: steadier than the wall time when other work shares the
cores) and the load average, since setup times on a shared machine move with it. The
setup's threads are ``PYMC_SUBSAMPLE_THREADS`` (one for the steadiest comparison).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time


def main() -> None:
    repo, sizes, families = sys.argv[1], sys.argv[2], sys.argv[3]
    sys.path.insert(0, repo)
    import pymc_subsample as pms
    from benchmarks.automatic_bounds import model
    from pymc_subsample.bounds.automatic import AutomaticFamily

    enclosing = {"s": 0.0}
    lock = threading.Lock()
    suprema = AutomaticFamily.all_suprema

    def timed(self, *args, **kwargs):
        t0 = time.perf_counter()
        out = suprema(self, *args, **kwargs)
        with lock:
            enclosing["s"] += time.perf_counter() - t0
        return out

    AutomaticFamily.all_suprema = timed
    # "-dirty" when the checkout has changes the commit does not hold
    commit = subprocess.run(["git", "-C", repo, "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip()
    print(f"repo {repo} ({commit})", flush=True)
    print("| N | family | bound | setup (s) | its CPU (s) | passes | passes (s) | compiling (s) "
          "| enclosures (thread-s) |", flush=True)
    for n in (int(v) for v in sizes.split(",")):
        for name in families.split(","):
            enclosing["s"] = 0.0
            with model(name, n):
                t0, c0 = time.perf_counter(), time.process_time()
                step = pms.MHSS()
                seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            kind = type(step._reference_pass.terms[0]).__name__
            bound = "automatic" if kind == "PredictorTerm" else "hand-derived"
            p = step.setup_profile
            print(f"| {n:,} | {name} | {bound} | {seconds:.1f} | {cpu:.1f} "
                  f"| {p['full_data_passes']} "
                  f"| {p['full_data_passes_s']:.1f} | {p['pass_compile_s']:.1f} "
                  f"| {enclosing['s']:.1f} | load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
