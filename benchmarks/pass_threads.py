"""Full-data passes on one thread and on two (issue 31, item 2), in one run.

Builds the 10⁷ × 10 logistic regression of ``benchmarks/setup.py`` in memory, then times its
GLM pass (the sums alone, and the sums with the order-2 row constants) alternately with
``PYMC_SUBSAMPLE_THREADS=1`` and ``=2``, each repetition beside the 1-minute load average
(the machine may be shared). It also gives, on one thread, the share of the pass's CPU time
spent inside the compiled PyTensor function: PyTensor's C code holds Python's GIL, so that
share runs on one core at a time whatever the threads, and bounds the speed-up of two
threads at ``1 / max(share, 1/2)``. The same for the pass in PyTensor's NumPy mode (each
node one NumPy call, which releases the GIL; a GLM's default pass whatever ``N``,
``GLMPass.gil_free_pass``), for comparison, and whether each holds the GIL: a probe thread sleeps
0.2 ms at a time and needs the GIL to wake; a call of the compiled function that holds it has
long stretches without a wake-up, whatever the load (which only stretches the times). Last,
the whole ``pms.MHSS()`` setup on one thread and on two.

    python benchmarks/pass_threads.py
    python benchmarks/pass_threads.py --rows 1e6 --repeats 5
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
import warnings

import numpy as np
from pytensor.compile.mode import get_mode

import pymc_subsample as pms
from pymc_subsample.datasets import glm_data, glm_model
from pymc_subsample.model.cluster import THREADS_VARIABLE
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.model.passes import GLMPass


def _load() -> str:
    return open("/proc/loadavg").read().split()[0] if os.path.exists("/proc/loadavg") else "?"


def _timed_pass(data_pass, theta, kwargs, threads: int) -> float:
    os.environ[THREADS_VARIABLE] = str(threads)
    t0 = time.perf_counter()
    data_pass.full(theta, **kwargs)
    return time.perf_counter() - t0


def _gil_share(data_pass, theta, kwargs) -> tuple[float, float]:
    """One thread: the pass's CPU seconds and the share of them inside the compiled function."""
    os.environ[THREADS_VARIABLE] = "1"
    fn, inside = data_pass._fn, [0.0]

    def timed(*args):
        t = time.thread_time()
        try:
            return fn(*args)
        finally:
            inside[0] += time.thread_time() - t

    data_pass._fn = timed
    try:
        t = time.thread_time()
        data_pass.full(theta, **kwargs)
        total = time.thread_time() - t
    finally:
        data_pass._fn = fn
    return total, inside[0] / total


def _probe(call, repeats: int = 5) -> tuple[int, float]:
    """Median over ``repeats`` calls of: the probe's wake-ups inside a call, and the longest
    stretch of the call without one (share of the call)."""
    stamps, stop = [], threading.Event()

    def spin():
        while not stop.is_set():
            time.sleep(0.0002)  # releases the GIL; waking needs it
            stamps.append(time.perf_counter())

    probe = threading.Thread(target=spin)
    probe.start()
    spans = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        spans.append((t0, time.perf_counter()))
        time.sleep(0.01)
    stop.set()
    probe.join()
    wakes = np.array(stamps)
    inside, longest = [], []
    for t0, t1 in spans:
        w = wakes[(wakes > t0) & (wakes < t1)]
        inside.append(w.size)
        longest.append(np.diff(np.concatenate([[t0], w, [t1]])).max() / (t1 - t0))
    return int(np.median(inside)), float(np.median(longest))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e7)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    n = int(args.rows)
    print(f"{n:.0e} x 10 logistic, {os.cpu_count()} CPUs; uptime load before: {_load()}")
    model = glm_model(*glm_data(n, 10, "logistic", seed=1), "logistic")
    theta = np.full(10, 0.01)
    passes = {}
    # the C pass: compiled in the mode of the package's C functions, chosen as a user would
    c_mode = {"mode": get_mode(None).excluding("BlasOpt")}
    for mode, kwargs in (("C", c_mode), ("NumPy mode", {})):
        passes[mode] = GLMPass(SubsampledLikelihood(model, compile_kwargs=kwargs))
        passes[mode].full(theta)  # the first pass also checks the family against the model
    rows = np.arange(min(n, 10**6), dtype=np.int64)
    for mode, data_pass in passes.items():
        wakes, longest = _probe(lambda p=data_pass: p._fn(theta, rows))
        print(f"{mode} pass function on {rows.size:.0e} rows: {wakes} probe wake-ups inside a "
              f"call, the longest stretch without one {longest:.0%} of the call "
              f"(load {_load()})")
    scale = np.diag(np.linspace(0.5, 2.0, 10))
    cases = {"sums": {}, "sums + order-2 constants": {"order": 2,
                                                      "whiten_rows": lambda x: x @ scale}}
    for (label, kwargs), (mode, data_pass) in (
            (case, p) for case in cases.items() for p in passes.items()):
        cpu, share = _gil_share(data_pass, theta, kwargs)
        print(f"\n{label}, {mode} pass: one thread {cpu:.2f} CPU s, {share:.0%} of it in the "
              "compiled PyTensor function")
        times = {1: [], 2: []}
        for rep in range(args.repeats):
            for threads in (1, 2):
                load = _load()
                times[threads].append(_timed_pass(data_pass, theta, kwargs, threads))
                print(f"  repeat {rep}: {threads} thread(s) {times[threads][-1]:.3f} s "
                      f"(load {load})", flush=True)
        best = {t: min(v) for t, v in times.items()}
        print(f"  best: 1 thread {best[1]:.3f} s, 2 threads {best[2]:.3f} s, "
              f"speed-up {best[1] / best[2]:.2f}x")
    print("\nwhole MHSS setup:")
    for threads in (1, 2):
        os.environ[THREADS_VARIABLE] = str(threads)
        load = _load()
        t0 = time.perf_counter()
        with model:
            step = pms.MHSS(progressbar=False)
        prof = step.setup_profile
        print(f"  {threads} thread(s): setup {time.perf_counter() - t0:.2f} s, "
              f"{prof['full_data_passes']} full-data passes in "
              f"{prof['full_data_passes_s']:.2f} s, subsample fit "
              f"{prof.get('subsample_s', 0.0):.2f} s (load {load})", flush=True)


if __name__ == "__main__":
    main()
