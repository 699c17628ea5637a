"""CPU of a full-data pass on one thread and on two, by block size (issue 31, item 2).

The GLM pass of the N × 10 logistic regression in memory (``benchmarks/pass_threads.py``'s),
the sums alone and the sums with order-2 row constants, with ``PYMC_SUBSAMPLE_THREADS=1`` and
``=2`` alternately, for blocks of each ``--blocks`` rows; then the same products in plain NumPy
(``Xᵀ(wX)`` and ``Xᵀw`` per block, no PyTensor). Each line gives wall and CPU seconds (all
threads), the 1-minute load average, and whether the sum is the one of the first run of that
block size. On a busy machine the wall times are noise; CPU seconds that grow on two threads
are what two threads cost beyond one (contention for caches and memory, the GIL).

    python benchmarks/pass_blocks.py --rows 1e7 --blocks 8192 16384 32768 65536
"""

from __future__ import annotations

import argparse
import logging
import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import threadpool_limits

from pymc_subsample.datasets import glm_data, glm_model
from pymc_subsample.model.cluster import THREADS_VARIABLE
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.model.passes import GLMPass


def _load() -> str:
    return open("/proc/loadavg").read().split()[0]


def _numpy_products(X: np.ndarray, w: np.ndarray, block_rows: int, threads: int):
    def block(start: int):
        x, f = X[start : start + block_rows], w[start : start + block_rows]
        return x.T @ (f[:, None] * x), x.T @ f

    starts = range(0, X.shape[0], block_rows)
    t0, cpu0 = time.perf_counter(), time.process_time()
    with threadpool_limits(limits=1, user_api="blas"):
        if threads == 1:
            for start in starts:
                block(start)
        else:
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(block, starts))
    return time.perf_counter() - t0, time.process_time() - cpu0


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e7)
    parser.add_argument("--blocks", type=int, nargs="+", default=[8192, 65536])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    X, y = glm_data(int(args.rows), 10, "logistic", seed=1)
    data_pass = GLMPass(SubsampledLikelihood(glm_model(X, y, "logistic")))
    theta = np.full(10, 0.01)
    scale = np.diag(np.linspace(0.5, 2.0, 10))
    cases = {"sums": {}, "sums + order-2 constants": {"order": 2,
                                                      "whiten_rows": lambda x: x @ scale}}
    data_pass.full(theta)  # the first pass also checks the family
    default_chunk = SubsampledLikelihood.row_chunks.__defaults__
    first: dict = {}
    try:
        for rep in range(args.repeats):
            for block_rows in args.blocks:
                SubsampledLikelihood.row_chunks.__defaults__ = (block_rows,)
                for threads in (1, 2):
                    os.environ[THREADS_VARIABLE] = str(threads)
                    for label, kwargs in cases.items():
                        load = _load()
                        t0, cpu0 = time.perf_counter(), time.process_time()
                        result = data_pass.full(theta, **kwargs)
                        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
                        same = first.setdefault((block_rows, label), result.loglik)
                        print(f"repeat {rep}, {block_rows} rows a block, {threads} thread(s), "
                              f"{label}: {wall:.3f} s, {cpu:.3f} CPU s (load {load}), same sum "
                              f"{result.loglik == same}", flush=True)
    finally:
        SubsampledLikelihood.row_chunks.__defaults__ = default_chunk
    w = np.random.default_rng(2).random(X.shape[0])
    for rep in range(args.repeats):
        for block_rows in args.blocks:
            (w1, c1), (w2, c2) = (_numpy_products(X, w, block_rows, t) for t in (1, 2))
            print(f"repeat {rep}, NumPy products, {block_rows} rows a block: 1 thread {w1:.3f} s"
                  f" ({c1:.3f} CPU s), 2 threads {w2:.3f} s ({c2:.3f} CPU s), CPU ratio "
                  f"{c2 / c1:.2f} (load {_load()})", flush=True)


if __name__ == "__main__":
    main()
