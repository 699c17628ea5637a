"""Setup of MHSS on a Dask cluster: the full-data passes as tasks, 1 worker against 2.

The logistic data of ``benchmarks/tall_data.py`` (N rows, d = 10) are read from Zarr stores by
``dask.array.from_zarr``, so each worker reads its own blocks from disk. For each number of
workers a ``LocalCluster`` (processes, one thread each) is started and ``pms.MHSS()`` is built
on the same model; the table gives the whole setup, the part spent in the full-data passes
(``setup_profile["full_data_passes_s"]``, the reference point's passes) and the blocks that
ran on the cluster. The rest of the setup (building the likelihood, the subsample fit) runs in
the client process whatever the cluster.

    python benchmarks/dask_setup.py --rows 1e7 --workers 1 2
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import time
import warnings
from pathlib import Path

from tall_data import data_paths


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e7)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/pymc_subsample_tall"))
    args = parser.parse_args(argv)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    logging.getLogger("distributed").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    import dask.array as da
    import pymc as pm
    import zarr
    from distributed import Client, LocalCluster

    import pymc_subsample as pms
    from pymc_subsample.datasets import glm_model

    n = int(args.rows)
    x_path, y_path = data_paths(args.dir, n, "zarr")
    print(f"MHSS setup on a LocalCluster, N = {n:,}, d = 10, data in Zarr stores; "
          f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"PyMC {pm.__version__}", flush=True)
    rows = []
    for workers in args.workers:
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster):
            X = da.from_zarr(zarr.open_array(x_path, mode="r"))
            y = da.from_zarr(zarr.open_array(y_path, mode="r"))
            model = glm_model(X, y, "logistic", tall=True)
            t0 = time.perf_counter()
            with model:
                step = pms.MHSS()
            setup = time.perf_counter() - t0
        profile = step.setup_profile
        rows.append({"workers": workers, "setup_s": setup,
                     "passes_s": profile["full_data_passes_s"],
                     "passes": profile["full_data_passes"],
                     "blocks": step.likelihood.cluster_blocks})
        print(f"  {workers} worker(s): setup {setup:.1f} s", flush=True)
    print("\n| workers | setup s | full-data passes | of which the reference's passes s | "
          "blocks on the cluster | setup speed-up |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workers']} | {r['setup_s']:.1f} | {r['passes']} | {r['passes_s']:.1f} | "
              f"{r['blocks']} | {rows[0]['setup_s'] / r['setup_s']:.2f}× |")
    return rows


if __name__ == "__main__":
    main()
