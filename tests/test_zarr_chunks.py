"""Zarr chunks read without Zarr's event loop (model/zarr_chunks.py): the same rows as Zarr's
own slicing, or Zarr's slicing where the path does not apply."""

from __future__ import annotations

import numpy as np
import pytest

from pymc_subsample.model.row_sources import as_row_source
from pymc_subsample.model.zarr_chunks import SyncChunkReader

zarr = pytest.importorskip("zarr")
pytest.importorskip("zarr.abc.codec", reason="Zarr 2: no synchronous codecs")


def _store(tmp_path, ref, **kwargs):
    array = zarr.create_array(tmp_path / "a.zarr", shape=ref.shape, dtype=ref.dtype, **kwargs)
    array[:] = ref
    return zarr.open_array(tmp_path / "a.zarr", mode="r")


@pytest.mark.parametrize("codecs", ["zstd", "blosc+transpose", "none"])
def test_chunks_read_synchronously_are_zarrs_rows(codecs, tmp_path):
    """Whole chunks and the last, partial one, through each codec chain; big-endian too."""
    rng = np.random.default_rng(5)
    dtype = ">f4" if codecs == "none" else "<f8"
    ref = rng.normal(size=(1003, 3)).astype(dtype)
    kwargs = {"chunks": (100, 3)}
    if codecs == "blosc+transpose":
        kwargs |= {"filters": [zarr.codecs.TransposeCodec(order=(1, 0))],
                   "compressors": [zarr.codecs.BloscCodec()]}
    elif codecs == "none":
        kwargs |= {"compressors": None}
    array = _store(tmp_path, ref, **kwargs)
    reader = SyncChunkReader.of(array)
    assert reader is not None
    rows = np.concatenate([reader.read(k) for k in range(11)])
    np.testing.assert_array_equal(rows, ref)
    source = as_row_source(array)
    for start, stop in ((0, 1003), (150, 420), (1000, 1003)):
        np.testing.assert_array_equal(source._slice(start, stop), ref[start:stop])
    idx = np.array([1002, 5, 999, 17, 5, 350, 351, 0])  # repeats, the last partial chunk
    np.testing.assert_array_equal(source.take(idx), ref[idx])
    np.testing.assert_array_equal(source._take_sorted(np.arange(0, 1003, 7)), ref[::7])


def test_missing_chunks_and_other_layouts_are_zarrs_own(tmp_path):
    """A chunk never written (fill value), columns split across chunks, shards: Zarr's
    slicing reads them."""
    ref = np.arange(40.0).reshape(20, 2)
    array = zarr.create_array(tmp_path / "m.zarr", shape=ref.shape, dtype=ref.dtype,
                              chunks=(5, 2), fill_value=-1.0)
    array[:10] = ref[:10]
    reader = SyncChunkReader.of(array)
    assert reader.read(3) is None
    expected = np.where(np.arange(20)[:, None] < 10, ref, -1.0)
    np.testing.assert_array_equal(as_row_source(array)._slice(0, 20), expected)
    np.testing.assert_array_equal(as_row_source(array).take(np.array([2, 17])), expected[[2, 17]])
    split = _store(tmp_path / "s", ref, chunks=(5, 1))
    sharded = _store(tmp_path / "h", ref, chunks=(5, 2), shards=(10, 2))
    assert SyncChunkReader.of(split) is None and SyncChunkReader.of(sharded) is None
    np.testing.assert_array_equal(as_row_source(sharded)._slice(3, 17), ref[3:17])


def test_dask_from_zarr_is_read_from_its_store_without_a_scheduler(tmp_path, monkeypatch):
    """``da.from_zarr`` of a store, with its own chunks or others: its rows read from the
    Zarr array, no Dask computation; an expression on it, chunks split along the columns, or
    a scheduler set: Dask computes."""
    da = pytest.importorskip("dask.array")
    import dask

    ref = np.random.default_rng(6).normal(size=(1003, 3))
    _store(tmp_path, ref, chunks=(100, 3))
    computed = []
    compute = dask.compute
    monkeypatch.setattr(dask, "compute", lambda *a, **k: computed.append(1) or compute(*a, **k))
    idx = np.array([5, 999, 17, 5])
    path = str(tmp_path / "a.zarr")
    for value, through_dask in ((da.from_zarr(path), False),
                                (da.from_zarr(path, chunks=(200, 3)), False),
                                (da.from_zarr(path, chunks=(250, -1)), False),
                                (da.from_zarr(path, chunks=250), False),
                                (da.from_zarr(path, chunks=(250, 2)), True),
                                (da.from_zarr(path) * 1.0, True)):
        computed.clear()
        source = as_row_source(value)
        np.testing.assert_array_equal(source._slice(150, 420), ref[150:420])
        np.testing.assert_array_equal(source.take(idx), ref[idx])
        assert bool(computed) == through_dask
    with dask.config.set(scheduler="threads"):
        computed.clear()
        source = as_row_source(da.from_zarr(path))
        np.testing.assert_array_equal(source._slice(0, 1003), ref)
        assert computed
