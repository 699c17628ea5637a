"""pms.Data: tall data from memory, a .npy memmap, Zarr or Dask, read a few rows at a time."""

from __future__ import annotations

import importlib.util
import pickle
import sys

import cloudpickle
import numpy as np
import pymc as pm
import pytest
from pytensor.graph.traversal import ancestors

import pymc_subsample as pms
from pymc_subsample.datasets import glm_data, glm_model, write_glm_npy
from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.model.data import row_source_of
from pymc_subsample.model.row_sources import ArraySource, as_row_source

N, D = 6000, 4
SAMPLE = {"progressbar": False, "compute_convergence_checks": False}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Logistic data written block by block to X.npy, y.npy, and copied to Zarr stores."""
    folder = tmp_path_factory.mktemp("tall")
    x_path, y_path = write_glm_npy(folder, N, D, "logistic", seed=3, block_rows=2500)
    out = {"X.npy": x_path, "y.npy": y_path}
    try:
        import zarr
    except ImportError:
        return out
    for name, path in (("X", x_path), ("y", y_path)):
        arr = np.load(path)
        store = zarr.open_array(folder / f"{name}.zarr", mode="w", shape=arr.shape,
                                dtype=arr.dtype, chunks=(1000, *arr.shape[1:]))
        store[:] = arr
        out[f"{name}.zarr"] = folder / f"{name}.zarr"
    return out


def _arrays(kind: str, files):
    if kind == "numpy":
        return np.load(files["X.npy"]), np.load(files["y.npy"])
    if kind == "npy":
        return files["X.npy"], files["y.npy"]
    if kind == "zarr":
        zarr = pytest.importorskip("zarr")
        return (zarr.open_array(files["X.zarr"], mode="r"),
                zarr.open_array(files["y.zarr"], mode="r"))
    da = pytest.importorskip("dask.array")
    return (da.from_array(np.load(files["X.npy"]), chunks=(1500, D)),
            da.from_array(np.load(files["y.npy"]), chunks=1500))


def _containers(model) -> dict:
    """The pms.Data containers in a model's graph, by name."""
    return {v.name: v for v in ancestors(model.observed_RVs) if row_source_of(v) is not None}


def _mhss_draws(model, **kwargs):
    with model:
        idata = pm.sample(150, tune=150, chains=2, step=pms.MHSS(), random_seed=5,
                          **{"cores": 1, **SAMPLE, **kwargs})
    return idata


def test_write_glm_npy_is_blockwise_and_seeded(files, tmp_path):
    X, y = np.load(files["X.npy"]), np.load(files["y.npy"])
    assert X.shape == (N, D) and y.shape == (N,) and y.dtype == np.int64
    assert np.all(X[:, 0] == 1.0) and set(np.unique(y)) == {0, 1}
    again = write_glm_npy(tmp_path, N, D, "logistic", seed=3, block_rows=2500)
    np.testing.assert_array_equal(np.load(again[0]), X)
    # the blocks differ from one another (each has its own generator)
    assert not np.array_equal(X[:2500], X[2500:5000])


@pytest.mark.parametrize("kind", ["numpy", "npy", "zarr", "dask"])
def test_take_reads_any_rows(kind, files):
    X, _ = _arrays(kind, files)
    source = as_row_source(X)
    ref = np.load(files["X.npy"])
    rng = np.random.default_rng(0)
    for idx in (rng.integers(0, N, 50), np.arange(100, 300), np.array([7, 7, 3]),
                np.empty(0, dtype=np.int64)):
        np.testing.assert_array_equal(source.take(idx), ref[idx])
    blocks = list(source.blocks(block_rows=2048))
    assert [start for start, _ in blocks] == [0, 2048, 4096]
    np.testing.assert_array_equal(np.concatenate([b for _, b in blocks]), ref)



@pytest.mark.parametrize("kind", ["zarr", "dask"])
def test_chunked_sources_read_each_chunk_once_per_pass(kind, tmp_path, monkeypatch):
    """Blocks that do not fall on chunk boundaries (Dask chunks of uneven sizes too) read
    every chunk once, whole; scattered rows come from the chunks that hold them."""
    rng = np.random.default_rng(4)
    ref = rng.normal(size=(5003, 3))
    if kind == "zarr":
        zarr = pytest.importorskip("zarr")
        value = zarr.open_array(tmp_path / "a.zarr", mode="w", shape=ref.shape,
                                dtype=ref.dtype, chunks=(700, 2))
        value[:] = ref
    else:
        da = pytest.importorskip("dask.array")
        value = da.from_array(ref, chunks=((1000, 1, 2500, 1502), (2, 1)))
    source = as_row_source(value)
    read = []
    read_chunks = type(source)._read_chunks
    monkeypatch.setattr(type(source), "_read_chunks", lambda self, first, stop: read.extend(
        range(first, stop)) or read_chunks(self, first, stop))
    for block_rows in (999, 4096):
        read.clear()
        blocks = list(source.blocks(block_rows))
        np.testing.assert_array_equal(np.concatenate([b for _, b in blocks]), ref)
        assert read == list(range(len(source._bounds) - 1))
    idx = np.sort(rng.choice(ref.shape[0], 40, replace=False))
    np.testing.assert_array_equal(source.take(idx[::-1]), ref[idx[::-1]])
    if kind == "dask":  # a bound on the bytes computed at once: one chunk a call here
        monkeypatch.setattr("pymc_subsample.model.row_sources.GATHER_BYTES", 1)
        np.testing.assert_array_equal(source._take_sorted(idx), ref[idx])
        # a few rows of large chunks: Dask's own indexing, no whole chunk
        monkeypatch.setattr("pymc_subsample.model.row_sources.SPARSE_BYTES", 0)
        read.clear()
        np.testing.assert_array_equal(source.take(idx[:3]), ref[idx[:3]])
        np.testing.assert_array_equal(source.take(np.arange(1500, 1510)), ref[1500:1510])
        assert read == []

@pytest.mark.slow
def test_same_seed_same_draws_from_every_source(files):
    """The done-when of issue 12 at a smaller N: NumPy, memmap, Zarr and Dask agree exactly."""
    draws = {}
    for kind in ("numpy", "npy", "zarr", "dask"):
        X, y = _arrays(kind, files)
        draws[kind] = _mhss_draws(glm_model(X, y, "logistic", tall=True)).posterior["b"].values
    for kind, values in draws.items():
        np.testing.assert_array_equal(values, draws["numpy"], err_msg=kind)
    # and the same chains as the model on pm.Data (rows indexed inside the graph)
    X, y = np.load(files["X.npy"]), np.load(files["y.npy"])
    plain = _mhss_draws(glm_model(X, y, "logistic")).posterior["b"].values
    np.testing.assert_allclose(plain, draws["numpy"], rtol=0, atol=1e-9)


def test_in_memory_data_are_not_copied_and_run_under_nuts(files):
    X, y = np.load(files["X.npy"]), np.load(files["y.npy"])
    model = glm_model(X, y, "logistic", tall=True)
    containers = _containers(model)
    assert set(containers) == {"X", "y_data"}
    assert np.shares_memory(containers["X"].get_value(borrow=True), X)
    assert np.shares_memory(containers["y_data"].get_value(borrow=True), y)
    # what PyMC stores in the InferenceData: the same rows, never a copy
    np.testing.assert_array_equal(np.asarray(containers["y_data"].get_value()), y)
    assert row_source_of(containers["X"]).shape == (N, D)
    # the model's own graph holds the data: NUTS and compare() see the same posterior
    plain = glm_model(X, y, "logistic")
    point = model.initial_point()
    point["b"] = np.full(D, 0.1)
    assert model.compile_logp()(point) == pytest.approx(plain.compile_logp()(point), rel=1e-12)


def _unaligned(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` one byte into a buffer: unaligned, as rows from a worker's message."""
    out = np.frombuffer(bytearray(a.nbytes + 1), dtype=a.dtype, count=a.size, offset=1)
    out = out.reshape(a.shape)
    out[...] = a
    return out


class _UnalignedSource(ArraySource):
    """Rows read as unaligned arrays (what ``compute()`` with a distributed client returns)."""

    def _take_sorted(self, rows: np.ndarray) -> np.ndarray:
        return _unaligned(super()._take_sorted(rows))

    def _slice(self, start: int, stop: int) -> np.ndarray:
        return _unaligned(super()._slice(start, stop))


@pytest.mark.parametrize("step", ["MHSS", "AusterityMH", "BarkerMinibatch"])
def test_unaligned_rows_reach_compiled_functions_aligned(step, files):
    """Issue 28: PyTensor's C code refused unaligned rows; every step gives the same draws."""
    X, y = np.load(files["X.npy"]), np.load(files["y.npy"])
    # one row or a run of rows is read as a slice and handed over as it came
    assert not _UnalignedSource(y).take(np.array([3])).flags.aligned
    draws = []
    for source in (ArraySource, _UnalignedSource):
        with glm_model(source(X), source(y), "logistic", tall=True):
            idata = pm.sample(30, tune=30, chains=1, step=getattr(pms, step)(), random_seed=5,
                              **SAMPLE)
        draws.append(idata.posterior["b"].values)
    np.testing.assert_array_equal(draws[1], draws[0])


def test_memmap_pickles_as_its_path(files):
    model = glm_model(files["X.npy"], files["y.npy"], "logistic", tall=True)
    data_bytes = np.load(files["X.npy"], mmap_mode="r").nbytes
    # what PyMC sends to each worker process with cores > 1: the model, not the rows
    assert len(cloudpickle.dumps(model)) < data_bytes / 4
    clone = _containers(pickle.loads(cloudpickle.dumps(model)))["X"]
    assert isinstance(row_source_of(clone).array, np.memmap)
    np.testing.assert_array_equal(clone.get_value(), np.load(files["X.npy"]))


@pytest.mark.slow
def test_cores_2_gives_the_draws_of_cores_1(files):
    model = glm_model(files["X.npy"], files["y.npy"], "logistic", tall=True)
    one = _mhss_draws(model).posterior["b"].values
    two = _mhss_draws(model, cores=2).posterior["b"].values
    np.testing.assert_array_equal(one, two)


def test_lazy_sources_fail_loudly_outside_the_steps(files):
    pytest.importorskip("dask")
    X, y = _arrays("dask", files)
    model = glm_model(X, y, "logistic", tall=True)
    # the graph holds a stand-in (NaN covariates, outcomes at the smallest integer): no
    # finite log density, so PyMC's NUTS stops at its start check, never samples a posterior
    assert not np.isfinite(model.compile_logp()(model.initial_point()))
    # and the InferenceData's observed data stay lazy Dask arrays, not the stand-in
    assert type(_containers(model)["X"].get_value()).__module__.startswith("dask")


def _with_nan(kind: str, X: np.ndarray, folder) -> object:
    """``X`` as a source of ``kind``."""
    if kind == "dask":
        return pytest.importorskip("dask.array").from_array(X, chunks=(1000, X.shape[1]))
    if kind == "zarr":
        zarr = pytest.importorskip("zarr")
        store = zarr.open_array(folder / "X.zarr", mode="w", shape=X.shape, dtype=X.dtype,
                                chunks=(1000, X.shape[1]))
        store[:] = X
        return store
    np.save(folder / "X.npy", X)
    return folder / "X.npy"


@pytest.mark.parametrize("row", [-1234, -1])  # in the second block, its last row
@pytest.mark.parametrize(("kind", "step"), [
    ("npy", "MHSS"), ("zarr", "MHSS"), ("dask", "MHSS"), ("npy", "AusterityMH"),
    ("zarr", "BarkerMinibatch"),
])
def test_nan_rows_are_refused_naming_the_data(kind, step, row, tmp_path, monkeypatch):
    """Checked as the build reads the rows: no pass of its own (all_finite is not called),
    whichever read first meets the NaN (the row checks read the first block; the others
    are met by the subsample fit or a full pass, on its threads)."""
    from pymc_subsample.model.row_sources import BLOCK_ROWS

    X, y = glm_data(BLOCK_ROWS + 3000, 3, seed=1)
    X[row, 2] = np.inf if row == -1 else np.nan
    model = glm_model(_with_nan(kind, X, tmp_path), y, "logistic", tall=True)
    source = row_source_of(_containers(model)["X"])

    def no_pass_of_its_own(self):
        raise AssertionError("all_finite read every row again")

    monkeypatch.setattr(type(source), "all_finite", no_pass_of_its_own)
    with model, pytest.raises(SubsamplingModelError, match=r"data 'X'.*'y'.*NaN or infinite"):
        getattr(pms, step)()


def test_nan_rows_are_refused_without_a_full_data_pass(tmp_path):
    """A random-walk step with a covariance and no control variates reads no block in order:
    the end of the build checks every row."""
    X, y = glm_data(3000, 3, seed=1)
    X[2500, 0] = np.nan
    with glm_model(_with_nan("zarr", X, tmp_path), y, "logistic", tall=True), \
            pytest.raises(SubsamplingModelError, match=r"'X'.*NaN"):
        pms.AusterityMH(proposal_cov=np.eye(4) * 0.01, batch_size=100)


def test_finite_check_follows_the_blocks_read():
    """Each read is checked until every block has been read once in order; reads that
    cover no whole block (random rows, a partial block) check but do not count."""
    from pymc_subsample.model.row_sources import BLOCK_ROWS

    n = 2 * BLOCK_ROWS + 100
    X = np.zeros((n, 2))
    X[BLOCK_ROWS + 7, 1] = np.nan
    source = ArraySource(X)
    source.check_finite_on_read("X holds a NaN")
    rows = np.arange(BLOCK_ROWS)
    source.take(rows)  # the first block, whole
    source.take(np.array([3, BLOCK_ROWS + 6]))  # random rows: checked
    with pytest.raises(SubsamplingModelError, match="X holds a NaN"):
        source.take(np.array([5, BLOCK_ROWS + 7]))
    with pytest.raises(SubsamplingModelError, match="X holds a NaN"):
        source.take(rows + BLOCK_ROWS)  # the second block
    X[BLOCK_ROWS + 7, 1] = 0.0
    source.take(rows[:100] + BLOCK_ROWS)  # part of a block: checked, not counted
    assert source._unchecked_blocks.tolist() == [False, True, True]
    source.take(np.arange(2 * BLOCK_ROWS, n))  # the last, partial, block
    assert source._unchecked_blocks.tolist() == [False, True, False]
    X[-1, 0] = np.inf  # a block already checked is not checked again
    source.take(np.arange(2 * BLOCK_ROWS, n))
    X[-1, 0] = 0.0
    source.finish_finite_check()  # reads the second block
    assert source._unchecked_blocks is None
    X[0, 0] = np.nan  # after the build: no check on reads (iterations)
    assert np.isnan(source.take(np.array([0, 1]))[0, 0])


def test_large_reads_from_zarr_are_read_once(files, monkeypatch):
    """The subsample fit reads the same random rows at each Newton step: one read."""
    X, _ = _arrays("zarr", files)
    source = as_row_source(X)
    reads = []
    original = type(source)._take_sorted
    monkeypatch.setattr(type(source), "_take_sorted",
                        lambda self, rows: reads.append(rows.size) or original(self, rows))
    rows = np.random.default_rng(1).choice(N, 1000, replace=False)
    first, again = source.take(rows), source.take(rows[::-1])
    np.testing.assert_array_equal(again, first[::-1])
    assert reads == [1000]
    source.take(rows[:10])
    source.take(rows[:10])  # small reads (iterations) are not remembered
    assert reads == [1000, 10, 10]
    assert "_cache" not in pickle.loads(pickle.dumps(source)).__dict__


def test_coupled_rows_are_refused():
    X, y = glm_data(3000, 3, "gaussian", seed=1)
    with pm.Model():
        Xd = pms.Data("X", X)
        b = pm.Normal("b", 0, 5, shape=3)
        eta = Xd @ b
        pm.Normal("y", mu=eta - eta.mean(), sigma=1.0, observed=pms.Data("y_data", y))
        with pytest.raises(SubsamplingModelError, match="couples its rows"):
            pms.MHSS()


def test_data_expressions_must_be_row_wise():
    X, y = glm_data(3000, 3, seed=1)
    with pm.Model():
        Xd = pms.Data("X", X)
        b = pm.Normal("b", 0, 5, shape=3)
        centred = Xd - Xd.mean(axis=0)
        pm.Bernoulli("y", logit_p=centred @ b, observed=y)
        with pytest.raises(SubsamplingModelError, match=r"pms.Data \['X'\].*combines rows"):
            pms.MHSS()
    with pm.Model():
        Xd = pms.Data("X", X)
        b = pm.Normal("b", 0, 5, shape=2)
        pm.Bernoulli("y", logit_p=pm.math.tanh(Xd[:, 1:]) @ b, observed=y)
        step = pms.MHSS()  # row-wise: read as it is, row by row
        assert step.likelihood.gathered


def test_bad_inputs_say_what_to_do(monkeypatch):
    with pm.Model():
        with pytest.raises(TypeError, match="NumPy array, a memory-mapped .npy"):
            pms.Data("X", {"a": 1})
        with pytest.raises(ValueError, match="dims"):
            pms.Data("X", np.zeros((3, 2)), dims=("row",))
    monkeypatch.setitem(sys.modules, "zarr", None)
    with pytest.raises(ImportError, match=r"pymc-subsample\[dask\]"):
        as_row_source("/nonexistent/store.zarr")


@pytest.mark.slow
def test_setup_passes_run_on_a_dask_cluster(files):
    """With a Client active, the full-data passes are tasks on its workers; same results."""
    distributed = pytest.importorskip("distributed")
    zarr = pytest.importorskip("zarr")
    da = pytest.importorskip("dask.array")
    with pm.Model():
        pass
    local = glm_model(np.load(files["X.npy"]), np.load(files["y.npy"]), "logistic", tall=True)
    with local:
        reference = pms.MHSS()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        # the workers read the Zarr stores themselves; only sums and constants come back
        X = da.from_zarr(zarr.open_array(files["X.zarr"], mode="r"))
        y = da.from_zarr(zarr.open_array(files["y.zarr"], mode="r"))
        model = glm_model(X, y, "logistic", tall=True)
        with distributed.get_task_stream(client) as stream, model:
            step = pms.MHSS()
        workers = set(client.scheduler_info()["workers"])
    ran = [t for t in stream.data if "_run_block" in str(t["key"])]
    blocks_per_pass = -(-N // 65_536)
    assert step.likelihood.cluster_blocks == step.setup_profile["full_data_passes"] * \
        blocks_per_pass
    assert len(ran) == step.likelihood.cluster_blocks
    assert {t["worker"] for t in ran} <= workers
    np.testing.assert_allclose(step.theta_hat, reference.theta_hat, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(step.row_constants, reference.row_constants)


def test_inference_data_keeps_observations_lazy_and_without_an_index(files):
    X, y = np.load(files["X.npy"]), np.load(files["y.npy"])
    with pm.Model() as model:
        rows = pms.Data("X", files["X.npy"])
        outcome = pms.Data("y_data", files["y.npy"], dims="obs")
        b = pm.Normal("b", 0, 10, shape=D)
        pm.Bernoulli("y", logit_p=rows @ b, observed=outcome, dims="obs")
        trace = pm.sample(50, tune=50, chains=1, step=pms.MHSS(), random_seed=5,
                          return_inferencedata=False, **SAMPLE)
    ours = pms.to_inference_data(trace, model=model)
    pymcs = pm.to_inference_data(trace, model=model)
    observed = ours.observed_data["y"]
    # the dims PyMC would give, no N-long index coordinate, the same values
    assert observed.dims == pymcs.observed_data["y"].dims == ("obs",)
    assert "obs" not in ours.observed_data.coords and "obs" in pymcs.observed_data.coords
    np.testing.assert_array_equal(observed.values, y)
    np.testing.assert_array_equal(ours.posterior["b"].values, pymcs.posterior["b"].values)
    assert set(ours.groups()) == set(pymcs.groups())
    if importlib.util.find_spec("dask") is not None:
        assert type(observed.data).__module__.startswith("dask")
    # the lazy value PyMC receives reads the source; Dask's from_array would copy an array
    import tracemalloc

    big = np.zeros((2_000_000, 2))
    tracemalloc.start()
    lazy = as_row_source(big).user_value()
    allocated = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert allocated < big.nbytes / 20
    np.testing.assert_array_equal(np.asarray(lazy[5:9]), big[5:9])
    np.testing.assert_array_equal(np.asarray(as_row_source(X)[10:20, 1:]), X[10:20, 1:])


def test_find_map_fallback_refuses_lazy_data_naming_them(files, monkeypatch):
    """Where Newton stalls, PyMC's find_MAP would read the graph's stand-in: refused instead."""
    import pymc_subsample.model.reference as reference
    from pymc_subsample.model.frame import NotPositiveDefiniteError

    real = reference.laplace_frame

    def stalled_at_the_passes(*args, **kwargs):
        # the full-data passes' Hessian is not negative definite (Newton's own damped
        # steps are left alone): what sends fit_reference to its find_MAP fallback
        if sys._getframe(1).f_code.co_name == "fit_reference":
            raise NotPositiveDefiniteError("forced")
        return real(*args, **kwargs)

    monkeypatch.setattr(reference, "laplace_frame", stalled_at_the_passes)
    X, y = _arrays("zarr", files)
    with glm_model(X, y, "logistic", tall=True), pytest.raises(
        SubsamplingModelError, match=r"pm.find_MAP on all rows, cannot read .*'X', 'y_data'"
    ):
        pms.MHSS()


def test_chunked_sources_are_subsampled_in_runs_and_read_ahead(files, monkeypatch):
    """From Zarr the reference fit's subsample is whole runs of rows inside chunks (random
    rows would read every chunk), and a full-data pass reads each block on a second
    thread."""
    import threading

    from pymc_subsample.model.reference import MIN_SUBSAMPLE_RUNS, _subsample_index

    X, y = _arrays("zarr", files)
    source_type = type(as_row_source(X))
    threads = set()
    read_block = source_type.read_block
    monkeypatch.setattr(source_type, "read_block",
                        lambda self, idx: threads.add(threading.current_thread().name)
                        or read_block(self, idx))
    with glm_model(X, y, "logistic", tall=True):
        step = pms.MHSS(progressbar=False)
    assert threads and all(name.startswith("pms-read") for name in threads)
    # chunks of 1000 rows; 4000 rows in at least MIN_SUBSAMPLE_RUNS runs of 4000 // 16
    run = 4000 // MIN_SUBSAMPLE_RUNS
    rows = _subsample_index(step.likelihood, np.random.default_rng(0), 4000)
    starts = np.unique(rows // run)
    assert rows.size == starts.size * run == 4000 and 1000 % run == 0
    # in memory: uniform rows, as before
    Xm, ym = _arrays("numpy", files)
    with glm_model(Xm, ym, "logistic", tall=True):
        step = pms.MHSS(progressbar=False)
    rows = _subsample_index(step.likelihood, np.random.default_rng(0), 4000)
    assert np.unique(rows // run).size > MIN_SUBSAMPLE_RUNS
