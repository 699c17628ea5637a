"""MHSS setup before the first draw: seconds and full-data passes per phase, case by case.

The cases of issue 31 ("Setup at the physical limit"), each generated in memory and built
with ``pms.MHSS()`` at its defaults: logistic regressions (10⁶ × 10, 10⁷ × 10, 10⁶ × 100),
random intercepts (10⁶ rows, 10 fixed effects, 100 groups), a Student-t regression with
sampled ν (10⁶ × 10) and a centred hierarchical logistic (10⁵ rows, 50 groups). One process
builds them all after a small warm-up build, so PyTensor's once-per-process start (the C
compiler's flags, its compile cache) is in none of them; the cache is whatever
``PYTENSOR_FLAGS`` names (warm after the first run). Each row gives the whole setup and its
phases from ``step.setup_profile``: reading the model (likelihood), compiling the data pass,
the subsample fit, the full-data passes (count and seconds) and the control variates. The
last column repeats the setup the issue quoted when it was filed (2026-11-25, 2-core machine,
warm cache), for comparison; it was not measured by this run. ``--repeat k`` builds each
case ``k`` times and shows the fastest (each line also prints the load average after it);
the CPU seconds of that build (all its threads) are less disturbed by a busy machine than
its wall time.

    python benchmarks/setup.py
    python benchmarks/setup.py --cases logistic-1e6x10 hierarchical-50 --repeat 3
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import platform
import time
import warnings

import pymc as pm

import pymc_subsample as pms
from pymc_subsample.datasets import (
    glm_data,
    glm_model,
    random_effects_data,
    random_effects_model,
)

#: name: (builder of the model, the setup issue 31 quoted in seconds)
CASES = {
    "logistic-1e6x10": (lambda: glm_model(*glm_data(10**6, 10, "logistic", seed=1),
                                          "logistic"), 1.4),
    "logistic-1e7x10": (lambda: glm_model(*glm_data(10**7, 10, "logistic", seed=1),
                                          "logistic"), 9.3),
    "logistic-1e6x100": (lambda: glm_model(*glm_data(10**6, 100, "logistic", seed=1),
                                           "logistic"), 21.4),
    "random-intercepts-1e6": (lambda: random_effects_model(
        *random_effects_data(10**6, 10, 100, seed=1), groups=100), 13.6),
    "student-t-nu-1e6x10": (lambda: glm_model(*glm_data(10**6, 10, "student_t_nu", seed=1),
                                              "student_t_nu"), 7.6),
    "hierarchical-50": (lambda: random_effects_model(
        *random_effects_data(10**5, 3, 50, seed=1), groups=50), 13.9),
}


def build(name: str, repeat: int = 1) -> dict:
    """The case's setup built ``repeat`` times (the model once): the fastest build's profile
    (the machine is shared; the minimum is the least disturbed)."""
    model = CASES[name][0]()
    best = None
    for _ in range(repeat):
        t0, cpu0 = time.perf_counter(), time.process_time()
        with model:
            step = pms.MHSS(progressbar=False)
        setup_s, cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
        if best is None or setup_s < best[0]:
            best = (setup_s, step.setup_profile, cpu_s)
        del step
        gc.collect()
    setup_s, prof, cpu_s = best
    row = {
        "case": name, "setup_s": setup_s, "cpu_s": cpu_s,
        "likelihood_s": prof.get("likelihood_s", 0.0),
        "pass_compile_s": prof.get("pass_compile_s", 0.0),
        "subsample_s": prof.get("subsample_s", prof.get("small_data_newton_s", 0.0)),
        "passes": prof.get("full_data_passes", 0),
        "passes_s": prof.get("full_data_passes_s", 0.0),
        "control_variate_s": prof.get("control_variate_s", 0.0),
        "issue_s": CASES[name][1],
    }
    del model
    gc.collect()
    return row


def _load() -> str:
    """The 1-minute load average (the machine may be shared), or '?' off Linux."""
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return "?"


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--repeat", type=int, default=1,
                        help="builds per case; the fastest is shown (default 1)")
    args = parser.parse_args(argv)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    print(f"MHSS setup, pms.MHSS() at its defaults; {platform.machine()}, {os.cpu_count()} "
          f"cores, Python {platform.python_version()}, PyMC {pm.__version__}", flush=True)
    with glm_model(*glm_data(2000, 3, "logistic", seed=0), "logistic"):
        pms.MHSS(progressbar=False)  # warm-up: PyTensor's once-per-process start
    rows = []
    for name in args.cases:
        rows.append(build(name, args.repeat))
        print(f"  {name}: {rows[-1]['setup_s']:.1f} s (load {_load()})", flush=True)
    print("\n| case | setup s | its CPU s | reading the model s | compiling the pass s "
          "| subsample fit s | full-data passes | their s | control variates s "
          "| issue 31 quoted s |")
    print("|---" * 10 + "|")
    for r in rows:
        print(f"| {r['case']} | {r['setup_s']:.2f} | {r['cpu_s']:.2f} | {r['likelihood_s']:.2f} | "
              f"{r['pass_compile_s']:.2f} | {r['subsample_s']:.2f} | {r['passes']} | "
              f"{r['passes_s']:.2f} | {r['control_variate_s']:.2f} | {r['issue_s']} |")
    return rows


if __name__ == "__main__":
    main()
