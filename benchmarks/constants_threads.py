"""The automatic bound's constants pass alone, on one thread and two: a zero-inflated
negative binomial (``tests.row_models``) built once, then its pass at ``θ̂`` with the order-2
constants timed (wall and processor seconds) twice per thread count, the cell grids cleared
before each (a new pass), and the CPU seconds of the enclosures per thread.

    PYTHONPATH=. python benchmarks/constants_threads.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import os
import threading
import time

import pymc_subsample as pms
from pymc_subsample.bounds import cell_suprema
from pymc_subsample.model.cluster import THREADS_VARIABLE
from tests.row_models import zero_inflated_negative_binomial


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    by_thread: dict[str, float] = {}
    suprema = cell_suprema.CellSuprema.suprema

    def timed(self, *a, **k):
        start = time.thread_time()
        try:
            return suprema(self, *a, **k)
        finally:
            name = threading.current_thread().name
            by_thread[name] = by_thread.get(name, 0.0) + time.thread_time() - start

    cell_suprema.CellSuprema.suprema = timed
    with zero_inflated_negative_binomial(args.rows):
        step = pms.MHSS(progressbar=False)
    data_pass, frame = step._reference_pass, step.frame
    for threads in (1, 2, 1, 2):
        os.environ[THREADS_VARIABLE] = str(threads)
        for term in data_pass.terms:
            term.family._cells.grids.clear()
        by_thread.clear()
        wall, cpu = time.perf_counter(), time.process_time()
        data_pass.full(step.theta_hat, whiten_rows=frame.whiten_rows, order=2,
                       levels=frame.n_levels)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(f"threads {threads}: wall {wall:.2f} s, CPU {cpu:.2f} s, enclosures' CPU by "
              f"thread {({k: round(v, 2) for k, v in by_thread.items()})}, "
              f"load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
