"""Sampling with a ``dask.distributed`` client active: the same draws as in memory.

With a client active, ``dask.compute`` of a few rows that sit in one chunk returns a view
into the message received from a worker, at any byte offset; PyTensor's C code refuses such
unaligned arrays (issue 28). Every step must read rows from Dask and Zarr sources with a
cluster running and give exactly the draws of the in-memory run.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.datasets import glm_data, glm_model
from pymc_subsample.errors import SubsamplingModelError

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")
zarr = pytest.importorskip("zarr")

N, D = 20_000, 3
#: X in two chunks, y in one: reads within one chunk come back as views into a worker's
#: message (the unaligned case), reads across chunks are concatenated on the client
CHUNK = 10_000
#: each step and its draws (= tuning steps): every Austerity and Barker iteration reads a
#: batch, one ``compute()`` per source on the cluster (tens of ms each); control variates
#: decide most moves on the first batch
STEPS = {
    "MHSS": (lambda: pms.MHSS(), 100),
    "AusterityMH": (lambda: pms.AusterityMH(batch_size=500, cv_order=2), 20),
    "BarkerMinibatch": (lambda: pms.BarkerMinibatch(batch_size=500, cv_order=2), 20),
}


@pytest.fixture(scope="module")
def client():
    """A 2-worker cluster of processes, its client the default for the module's tests."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as active:
        yield active


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Logistic rows in memory (float X, int64 y) and the same rows in Zarr stores."""
    X, y = glm_data(N, D, "logistic", seed=2)
    folder = tmp_path_factory.mktemp("cluster")
    stores = {}
    for name, arr in (("X", X), ("y", y)):
        store = zarr.open_array(folder / f"{name}.zarr", mode="w", shape=arr.shape,
                                dtype=arr.dtype, chunks=(CHUNK, *arr.shape[1:]))
        store[:] = arr
        stores[name] = folder / f"{name}.zarr"
    return X, y, stores


def _arrays(kind: str, data):
    X, y, stores = data
    if kind == "numpy":
        return X, y
    if kind == "dask":
        return da.from_array(X, chunks=(CHUNK, D)), da.from_array(y, chunks=N)
    return (zarr.open_array(stores["X"], mode="r"), zarr.open_array(stores["y"], mode="r"))


def _draws(step: str, kind: str, data) -> np.ndarray:
    X, y = _arrays(kind, data)
    make, draws = STEPS[step]
    with glm_model(X, y, "logistic", tall=True):
        idata = pm.sample(draws, tune=draws, chains=1, cores=1, step=make(), random_seed=11,
                          progressbar=False, compute_convergence_checks=False)
    return idata.posterior["b"].values


@pytest.mark.slow
@pytest.mark.parametrize("step", sorted(STEPS))
def test_same_draws_with_a_cluster_active(step, client, data):
    """Dask arrays (read by the cluster) and Zarr stores give the in-memory run's draws."""
    reference = _draws(step, "numpy", data)
    assert np.unique(reference[0, :, 1]).size > 5  # the chain moved
    for kind in ("dask", "zarr"):
        np.testing.assert_array_equal(_draws(step, kind, data), reference, err_msg=kind)


@pytest.mark.slow
def test_nan_rows_read_on_the_workers_are_refused(client, monkeypatch):
    """A NaN in a block only a worker reads: the worker's copy of the source checks the
    block it is handed, and the error names the data (no pass of its own on the client)."""
    from pymc_subsample.model.row_sources import BLOCK_ROWS, DaskSource

    X, y = glm_data(BLOCK_ROWS + 5000, D, "logistic", seed=2)
    X[-100, 1] = np.nan

    def no_pass_of_its_own(self):
        raise AssertionError("all_finite read every row again")

    monkeypatch.setattr(DaskSource, "all_finite", no_pass_of_its_own)
    with glm_model(da.from_array(X, chunks=(CHUNK, D)), y, "logistic", tall=True), \
            pytest.raises(SubsamplingModelError, match=r"data 'X'.*'y'.*NaN or infinite"):
        pms.MHSS()


class _FirstBlockPass:
    """A pass whose first block leaves something its other blocks read (as an automatic
    bound's cell grid): each block gives its first row, its process and what it found."""

    made: int | None = None

    def block(self, chunk):
        import os

        if self.made is None:
            self.made = int(chunk[0])
        return int(chunk[0]), os.getpid(), self.made


@pytest.mark.slow
def test_a_pass_with_its_first_block_alone_on_a_cluster(client):
    """``first_alone`` with a cluster active: the first block on the client, then the pass,
    with what that block left in it, sent to the workers for the other blocks."""
    import os

    from pymc_subsample.model.likelihood import SETUP_CHUNK_ROWS, SubsampledLikelihood

    n = 3 * SETUP_CHUNK_ROWS + 5
    X, y = glm_data(n, D, "logistic", seed=3)
    lik = SubsampledLikelihood(glm_model(da.from_array(X, chunks=(SETUP_CHUNK_ROWS, D)),
                                         da.from_array(y, chunks=SETUP_CHUNK_ROWS),
                                         "logistic", tall=True))
    blocks = [result for _, result in lik.map_row_blocks(_FirstBlockPass(), first_alone=True)]
    assert [start for start, _, _ in blocks] == list(range(0, n, SETUP_CHUNK_ROWS))
    assert blocks[0][1] == os.getpid()
    assert all(pid != os.getpid() and made == 0 for _, pid, made in blocks[1:])
    assert lik.cluster_blocks == len(blocks) - 1
