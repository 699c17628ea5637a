"""Where a full-data pass over a Zarr store or a Dask array spends its CPU (issue 31).

On the 10⁷ × 10 logistic data of ``benchmarks/tall_data.py`` (``.npy`` files and Zarr stores
of 4,096-row zstd chunks in ``--dir``; write them with
``python benchmarks/tall_data.py --rows 1e7 --source zarr``), it prints:

1. the CPU seconds of reading all rows of ``X`` and ``y`` in the passes' 65,536-row blocks,
   through Zarr's own slicing (its asynchronous pipeline) and through
   :class:`pymc_subsample.model.zarr_chunks.SyncChunkReader`, alternately;
2. the CPU seconds of 1,000 reads of 2 random rows of ``X`` from the store (an iteration's
   reads) and of one read of 500,000 rows in 160 runs (the reference fit's subsample);
3. for one GLM pass over each source (``.npy``, Zarr, ``da.from_zarr``), its wall and CPU
   seconds and the CPU seconds of the threads still alive after it, by name: Zarr's event
   loop (``zarr_io``), the worker threads it hands each chunk to (``asyncio_*``), Dask's pool
   (``ThreadPoolExecutor-*``); a pass's own threads have ended by then and are not listed.
   The passes' log-likelihood sums are printed too: the same from every source.

Each line carries the 1-minute load average (the machine may be shared).

    python benchmarks/source_reads.py --dir /tmp/pymc_subsample_tall
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import threading
import time
import warnings
from pathlib import Path

import numpy as np

from pymc_subsample.datasets import glm_model
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.model.passes import GLMPass
from pymc_subsample.model.row_sources import BLOCK_ROWS, ZarrSource, as_row_source


def _load() -> str:
    return open("/proc/loadavg").read().split()[0]


def _thread_cpu() -> dict[int, tuple[str, float]]:
    """CPU seconds of each thread of this process so far, with its Python name."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        out[int(tid)] = (names.get(int(tid), "?"), (int(fields[11]) + int(fields[12])) / tick)
    return out


def _reads(directory: Path) -> None:
    for name in ("X", "y"):
        for label in ("Zarr slicing", "SyncChunkReader"):
            source = as_row_source(directory / f"{name}.zarr")
            assert isinstance(source, ZarrSource)
            if label == "Zarr slicing":
                source._reader = False  # the path before model/zarr_chunks.py
            t0, cpu0 = time.perf_counter(), time.process_time()
            for start in range(0, source.n_rows, BLOCK_ROWS):
                source._slice(start, min(start + BLOCK_ROWS, source.n_rows))
            print(f"read {name} through {label}: {time.perf_counter() - t0:.2f} s, "
                  f"{time.process_time() - cpu0:.2f} CPU s (load {_load()})", flush=True)


def _takes(directory: Path) -> None:
    source = as_row_source(directory / "X.zarr")
    rng = np.random.default_rng(0)
    idx = [rng.integers(0, source.n_rows, 2) for _ in range(1000)]
    t0, cpu0 = time.perf_counter(), time.process_time()
    for rows in idx:
        source.take(rows)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    run = 3125
    starts = rng.choice(source.n_rows // run, 160, replace=False) * run
    runs = np.sort(np.concatenate([np.arange(s, s + run) for s in starts]))
    t1, cpu1 = time.perf_counter(), time.process_time()
    source._take_sorted(runs)
    print(f"1,000 takes of 2 random rows of X: {wall:.2f} s, {cpu:.2f} CPU s; 500,000 rows in "
          f"160 runs: {time.perf_counter() - t1:.2f} s, {time.process_time() - cpu1:.2f} CPU s "
          f"(load {_load()})", flush=True)


def _passes(directory: Path) -> None:
    import dask.array as da

    sources = {"npy": (directory / "X.npy", directory / "y.npy"),
               "zarr": (directory / "X.zarr", directory / "y.zarr"),
               "dask": (da.from_zarr(str(directory / "X.zarr")),
                        da.from_zarr(str(directory / "y.zarr")))}
    theta = np.full(10, 0.01)
    for kind, (X, y) in sources.items():
        data_pass = GLMPass(SubsampledLikelihood(glm_model(X, y, "logistic", tall=True)))
        data_pass.full(theta)  # the first pass also checks the family
        before = _thread_cpu()
        t0, cpu0 = time.perf_counter(), time.process_time()
        result = data_pass.full(theta)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        by_name: dict[str, float] = collections.defaultdict(float)
        for tid, (name, seconds) in _thread_cpu().items():
            by_name[name.rstrip("_0123456789")] += seconds - before.get(tid, (name, 0.0))[1]
        threads = ", ".join(f"{k} {v:.2f}" for k, v in by_name.items() if v >= 0.01)
        print(f"{kind} pass: {wall:.2f} s, {cpu:.2f} CPU s (load {_load()}); "
              f"threads alive after it, CPU s: {threads}; sum {result.loglik!r}", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e7)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/pymc_subsample_tall"))
    args = parser.parse_args(argv)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    directory = args.dir / f"logistic_{int(args.rows)}x10"
    _reads(directory)
    _takes(directory)
    _passes(directory)


if __name__ == "__main__":
    main()
