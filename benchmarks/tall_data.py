"""Tall data from disk: MHSS on logistic data written to ``.npy`` (or Zarr), N up to 1e8.

For each N the data are written once to ``--dir`` (:func:`pymc_subsample.datasets.write_glm_npy`,
block by block; a Zarr copy with ``--source zarr``), then a fresh Python process builds
``glm_model(X, y, "logistic", tall=True)`` on the files and samples it with ``pms.MHSS()``
(2 chains, ``cores=1``, so every byte is in the one process measured). It reports the setup
seconds (the step's construction: MAP, control variates, row constants), the full-data passes
before the first draw, µs per iteration, rows read per iteration, min bulk ESS, ESS/s, the whole
wall time to a bulk ESS of 1000, and the peak *anonymous* resident memory (``RssAnon`` sampled
every 10 ms: pages of the mapped files are counted in RSS but are the page cache's, not the
process's) up to the last draw, then the peak (and seconds) once the InferenceData is built,
first with :func:`pymc_subsample.to_inference_data` (observed data lazy, no index), then with
PyMC's ``pm.to_inference_data``, which gives the observed data an N-long index built three
times over (``pm.sample`` builds that one).
``--source numpy`` loads the arrays into memory first (the in-memory case, where the data
count in RssAnon).

    python benchmarks/tall_data.py --rows 1e6 1e7 1e8 --dir /tmp/tall
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np

D = 10


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class PeakAnon:
    """The peak of ``RssAnon`` of this process, sampled every ``interval`` seconds."""

    def __init__(self, interval: float = 0.01) -> None:
        self.peak_kb = _status_kb("RssAnon")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, args=(interval,), daemon=True)
        self._thread.start()

    def _poll(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.peak_kb = max(self.peak_kb, _status_kb("RssAnon"))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        self.peak_kb = max(self.peak_kb, _status_kb("RssAnon"))
        return self.peak_kb / 2**20  # GiB


def _nbytes(path: str) -> int:
    """Bytes of the array at ``path`` (``.npy`` or Zarr store), uncompressed."""
    from pymc_subsample.model.row_sources import as_row_source

    source = as_row_source(path)
    return int(np.prod(source.shape)) * source.dtype.itemsize


def data_paths(directory: Path, n: int, source: str) -> tuple[str, str]:
    """Write the data for ``n`` rows once (``.npy``, and Zarr when asked); their paths."""
    from pymc_subsample.datasets import write_glm_npy

    folder = directory / f"logistic_{n}x{D}"
    x_path, y_path = folder / "X.npy", folder / "y.npy"
    if not (x_path.exists() and y_path.exists()):
        t0 = time.perf_counter()
        write_glm_npy(folder, n, D, "logistic", seed=1)
        print(f"  wrote {folder} in {time.perf_counter() - t0:.1f} s", flush=True)
    if source != "zarr":
        return str(x_path), str(y_path)
    import zarr

    paths = []
    for name in ("X", "y"):
        store = folder / f"{name}.zarr"
        if not store.exists():
            arr = np.load(folder / f"{name}.npy", mmap_mode="r")
            # chunks of 4096 rows: a random row costs one small chunk read
            z = zarr.open_array(store, mode="w", shape=arr.shape, dtype=arr.dtype,
                                chunks=(4096, *arr.shape[1:]))
            for start in range(0, arr.shape[0], 1 << 20):
                z[start:start + (1 << 20)] = arr[start:start + (1 << 20)]
        paths.append(str(store))
    return paths[0], paths[1]


def worker(n: int, source: str, x_path: str, y_path: str, draws: int, tune: int,
           seed: int) -> dict:
    """One run in this process: build, set up, sample; the figures of one table row."""
    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    import arviz as az
    import pymc as pm

    import pymc_subsample as pms
    from pymc_subsample.compare import time_to_ess
    from pymc_subsample.datasets import glm_model

    memory = PeakAnon()
    t0 = time.perf_counter()
    # a path opens as a memmap (.npy) or a Zarr store; "numpy" loads the arrays first
    X, y = (np.load(x_path), np.load(y_path)) if source == "numpy" else (x_path, y_path)
    model = glm_model(X, y, "logistic", tall=True)
    with model:
        step = pms.MHSS()
    setup_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    with model:
        trace = pm.sample(draws, tune=tune, chains=2, cores=1, step=step, random_seed=seed,
                          progressbar=False, compute_convergence_checks=False,
                          return_inferencedata=False)
    sampling_s = time.perf_counter() - t1
    sampler_peak_gib = memory.peak_kb / 2**20
    # the InferenceData: ours keeps the observed data lazy and without an index; PyMC's adds
    # an N-long index (built three times over). Ours first: the peak only grows
    t2 = time.perf_counter()
    with model:
        idata = pms.to_inference_data(trace)
    idata_s = time.perf_counter() - t2
    pms_peak_gib = memory.peak_kb / 2**20
    t3 = time.perf_counter()
    with model:
        pm.to_inference_data(trace)
    pm_idata_s = time.perf_counter() - t3
    peak_gib = memory.stop()
    ess = float(az.ess(idata, method="bulk").to_array().min())
    stats = idata.sample_stats
    iterations = 2 * (draws + tune)
    return {
        "N": n, "source": source, "setup_s": setup_s,
        "full_data_passes": int(step.setup_profile["full_data_passes"]),
        "us_per_iter": 1e6 * sampling_s / iterations,
        "rows_per_iter": float(stats["n_data"].mean()),
        "fallback_share": float(stats["full_data_fallback"].mean()),
        "ess_bulk": ess, "ess_per_s": ess / sampling_s,
        "time_to_ess1000_s": time_to_ess(setup_s, sampling_s, ess),
        "sampler_peak_anon_gib": sampler_peak_gib, "idata_s": idata_s,
        "pms_idata_peak_anon_gib": pms_peak_gib, "pm_idata_s": pm_idata_s,
        "peak_anon_gib": peak_gib,
        "data_gib": sum(_nbytes(path) for path in (x_path, y_path)) / 2**30,
    }


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, nargs="+", default=[1e6, 1e7])
    parser.add_argument("--source", choices=["npy", "zarr", "numpy"], default="npy")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/pymc_subsample_tall"))
    parser.add_argument("--draws", type=int, default=5000)
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--worker", nargs=3, metavar=("N", "X", "Y"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        n, x_path, y_path = int(args.worker[0]), args.worker[1], args.worker[2]
        row = worker(n, args.source, x_path, y_path, args.draws, args.tune, args.seed)
        print("RESULT " + json.dumps(row))
        return [row]

    import pymc as pm

    print(f"MHSS on logistic data from disk, d = {D}; {platform.machine()}, {os.cpu_count()} "
          f"cores, Python {platform.python_version()}, PyMC {pm.__version__}; 2 chains x "
          f"({args.tune} tune + {args.draws} draws), cores=1", flush=True)
    rows = []
    for n in (int(r) for r in args.rows):
        x_path, y_path = data_paths(args.dir, n, args.source)
        cmd = [sys.executable, __file__, "--worker", str(n), x_path, y_path,
               "--source", args.source, "--draws", str(args.draws), "--tune", str(args.tune),
               "--seed", str(args.seed)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        found = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
        if not found:
            print(out.stdout[-2000:], out.stderr[-4000:])
            raise SystemExit(f"the run at N = {n} failed")
        rows.append(json.loads(found[-1][len("RESULT "):]))
        r = rows[-1]
        print(f"  N = {n:.0e}: setup {r['setup_s']:.1f} s", flush=True)
    header = ("| N | source | data GiB | setup s | full-data passes | µs/iter | rows/iter | "
              "min bulk ESS | ESS/s | s to ESS 1000 | peak RssAnon GiB, to the last draw | "
              "with pms.to_inference_data (s) | with pm.to_inference_data (s) |")
    print("\n" + header + "\n" + "|---" * 13 + "|")
    for r in rows:
        print(f"| {r['N']:.0e} | {r['source']} | {r['data_gib']:.2f} | {r['setup_s']:.1f} | "
              f"{r['full_data_passes']} | {r['us_per_iter']:.0f} | {r['rows_per_iter']:.2f} | "
              f"{r['ess_bulk']:.0f} | {r['ess_per_s']:.0f} | {r['time_to_ess1000_s']:.1f} | "
              f"{r['sampler_peak_anon_gib']:.2f} | {r['pms_idata_peak_anon_gib']:.2f} "
              f"({r['idata_s']:.1f}) | {r['peak_anon_gib']:.2f} ({r['pm_idata_s']:.1f}) |")
    return rows


if __name__ == "__main__":
    main()
