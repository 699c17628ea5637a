"""MHSS setup on the same tall data from a ``.npy`` memmap, a Zarr store and a Dask array.

The logistic data of ``benchmarks/tall_data.py`` (N rows, d = 10, in ``--dir``) are given to
:func:`pymc_subsample.Data` as the ``.npy`` paths, the Zarr stores' paths, or
``dask.array.from_zarr`` of them (no ``dask.distributed`` client: the passes run in this
process). After a small warm-up build, each source's model is built ``--repeat`` times with
``pms.MHSS()``; each line gives the build's wall and CPU seconds (all threads), the load average
after it, the full-data passes and their seconds, and θ̂'s first coordinates (the subsample of
Zarr and Dask sources is drawn in runs of chunks, so θ̂ differs from the ``.npy`` one within the
mode tolerance).

    python benchmarks/source_setup.py --rows 1e7 --sources npy zarr dask
"""

from __future__ import annotations

import argparse
import logging
import time
import warnings
from pathlib import Path

import numpy as np

import pymc_subsample as pms
from pymc_subsample.datasets import glm_data, glm_model


def _source(directory: Path, kind: str):
    if kind == "npy":
        return directory / "X.npy", directory / "y.npy"
    if kind == "zarr":
        return directory / "X.zarr", directory / "y.zarr"
    import dask.array as da

    return da.from_zarr(str(directory / "X.zarr")), da.from_zarr(str(directory / "y.zarr"))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e7)
    parser.add_argument("--sources", nargs="+", choices=["npy", "zarr", "dask"],
                        default=["npy", "zarr", "dask"])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/pymc_subsample_tall"))
    args = parser.parse_args(argv)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    directory = args.dir / f"logistic_{int(args.rows)}x10"
    with glm_model(*glm_data(2000, 3, "logistic", seed=0), "logistic"):
        pms.MHSS(progressbar=False)  # warm-up: PyTensor's once-per-process start
    for kind in args.sources:
        for _ in range(args.repeat):
            X, y = _source(directory, kind)
            with glm_model(X, y, "logistic", tall=True):
                t0, cpu0 = time.perf_counter(), time.process_time()
                step = pms.MHSS(progressbar=False)
                wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            profile = step.setup.setup_profile
            load = open("/proc/loadavg").read().split()[0]
            print(f"{kind} setup {wall:.2f} s cpu {cpu:.2f} s load {load} passes "
                  f"{profile['full_data_passes']} passes_s {profile['full_data_passes_s']:.2f} "
                  f"theta0 {np.round(step.setup.theta_hat[:3], 8)}", flush=True)
            del step


if __name__ == "__main__":
    main()
