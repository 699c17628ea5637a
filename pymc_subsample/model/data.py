"""Row sources: data that the steps read a few rows at a time, from memory, disk or Dask.

:func:`Data` is a drop-in for :func:`pymc.Data` for tall data. It accepts

- a NumPy array (kept as it is, never copied);
- a memory-mapped ``.npy`` (``np.load(path, mmap_mode="r")``) or the path of one: the
  operating system pages rows in as they are read, and a process sampling another chain opens
  the file again instead of receiving a copy;
- a Zarr array (``zarr.open_array(path)``): read chunk by chunk;
- a Dask array: read block by block (``dask.compute``).

Every source answers one question, :meth:`RowSource.take` (the rows ``idx`` as a NumPy array,
gathered in sorted order so that each file page or chunk is read once), and yields
consecutive row blocks for the full-data passes (:meth:`RowSource.blocks`). The likelihood
layer (:mod:`pymc_subsample.model.likelihood`) gathers the rows of every ``Data`` container outside
the compiled PyTensor functions and hands them over as inputs, so the same rows give the same
numbers whatever the source.

The model's own graph holds, for NumPy and memory-mapped sources, the array itself (so the
model also runs under NUTS and ``compare()``), and for Zarr and Dask sources a stand-in of
the right shape that is all NaN (floats) or the smallest integer (integers) and takes no
memory: PyMC's NUTS on such a model fails at its first log-density evaluation instead of
sampling a wrong posterior.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pymc as pm
import xarray as xr
from arviz.data.base import dict_to_dataset, make_attrs
from pymc.backends.arviz import InferenceDataConverter
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.traversal import graph_inputs
from pytensor.tensor.sharedvar import TensorSharedVariable
from pytensor.tensor.type import TensorType

from pymc_subsample.errors import SubsamplingModelError

__all__ = ["Data", "RowSource", "as_row_source", "row_source_of", "to_inference_data"]

#: Rows per block of a full-data pass over a source (bounds the memory of a pass).
BLOCK_ROWS = 65_536
#: Reads of at least this many rows from Zarr or Dask are remembered, up to CACHE_BYTES.
CACHE_MIN_ROWS = 256
CACHE_BYTES = 64 * 2**20


def _require(module: str):
    """Import an optional dependency or say which extra installs it."""
    try:
        return __import__(module)
    except ImportError as err:
        raise ImportError(
            f"Reading Zarr and Dask arrays needs the optional '{module}' package: "
            'pip install "pymc-subsample[dask]"'
        ) from err


class RowSource:
    """Rows of one data array, read on demand.

    Attributes
    ----------
    array
        The NumPy, Zarr or Dask array itself (sliced by rows for the full-data passes).
    shape : tuple of int
        The array's shape; rows run along the first axis.
    dtype : numpy.dtype
    in_memory : bool
        Whether the array's values are a NumPy array (in RAM or memory-mapped) that PyTensor
        can hold; otherwise the model's graph holds a stand-in.
    """

    array: Any
    shape: tuple[int, ...]
    dtype: np.dtype
    in_memory: bool = True

    @property
    def n_rows(self) -> int:
        return int(self.shape[0])

    def _take_sorted(self, rows: np.ndarray) -> np.ndarray:
        """The rows ``rows`` (sorted, unique int64) as a NumPy array."""
        raise NotImplementedError

    def _slice(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` as a NumPy array."""
        return np.asarray(self.array[start:stop])

    def take(self, idx: np.ndarray) -> np.ndarray:
        """The rows ``idx`` (any order, repeats allowed), one read of each distinct row.

        Cost O(len(idx) log len(idx)) plus the reads; never O(N).
        """
        idx = np.asarray(idx, dtype=np.int64)
        if idx.size == 0:  # most MHSS iterations read no row at all
            return np.empty((0, *self.shape[1:]), dtype=self.dtype)
        if idx[0] >= 0 and np.all(idx[1:] == idx[:-1] + 1):
            start, stop = int(idx[0]), int(idx[-1]) + 1  # a block of a full pass
            return self.checked(self._slice(start, stop), start, stop)
        rows, where = np.unique(idx, return_inverse=True)
        return self.checked(self._cached_take(rows))[where.reshape(idx.shape)]

    def check_finite_on_read(self, message: str) -> None:
        """Refuse NaN and infinite entries as the build reads them, not in a pass of its own.

        Until every block of :data:`BLOCK_ROWS` rows has been read once in order (the first
        full-data pass of the reference fit reads them all), each read checks its rows
        (:meth:`checked`) and raises ``SubsamplingModelError(message)`` on a NaN or an
        infinity; :meth:`finish_finite_check`, at the end of the build, reads the blocks no
        pass has. A read of a Zarr or Dask source costs decompression or a Dask computation
        (at 10⁷ rows the separate check was 5–9 s of a 27–41 s setup), a memory-mapped file's
        a read from disk. Integers are always finite.
        """
        if self.dtype.kind in "fc":
            self._finite_message = message
            self._unchecked_blocks = np.ones(-(-self.n_rows // BLOCK_ROWS), dtype=bool)

    def _blocks_within(self, start: int, stop: int) -> slice:
        """The blocks of :data:`BLOCK_ROWS` rows wholly inside rows ``start:stop``."""
        last = -(-stop // BLOCK_ROWS) if stop >= self.n_rows else stop // BLOCK_ROWS
        return slice(-(-start // BLOCK_ROWS), last)

    def checked(self, values: np.ndarray, start: int | None = None,
                stop: int | None = None) -> np.ndarray:
        """``values`` (rows read from this source, rows ``start:stop`` if consecutive),
        checked for NaN and infinities while :meth:`check_finite_on_read` asks for it."""
        unchecked = self.__dict__.get("_unchecked_blocks")
        if unchecked is None:
            return values
        # consecutive rows whose blocks have all been checked are not checked again
        if start is not None and not unchecked[start // BLOCK_ROWS : -(-stop // BLOCK_ROWS)].any():
            return values
        if not np.isfinite(values).all():
            raise SubsamplingModelError(self._finite_message)
        if start is not None:
            self.mark_checked(start, stop)
        return values

    def finish_finite_check(self) -> None:
        """Check the blocks no read has covered since :meth:`check_finite_on_read` (all of
        them if the build made no full-data pass), then stop checking reads."""
        unchecked = self.__dict__.get("_unchecked_blocks")
        if unchecked is None:
            return
        if unchecked.all():
            if not self.all_finite():
                raise SubsamplingModelError(self._finite_message)
        else:
            for k in np.flatnonzero(unchecked):
                start = int(k) * BLOCK_ROWS
                stop = min(start + BLOCK_ROWS, self.n_rows)
                self.checked(self._slice(start, stop), start, stop)
        self._unchecked_blocks = None

    def mark_checked(self, start: int, stop: int) -> None:
        """Rows ``start:stop`` have been checked (by :meth:`checked`, here or by a copy of
        this source in a Dask worker on the rows it was handed): the blocks they cover whole
        are not checked again."""
        unchecked = self.__dict__.get("_unchecked_blocks")
        if unchecked is not None:
            unchecked[self._blocks_within(start, stop)] = False
            if not unchecked.any():
                self._unchecked_blocks = None

    @property
    def chunk_rows(self) -> int | None:
        """Rows of the chunks this source is read in (Zarr, Dask), or None where any row is
        as cheap to read as its neighbours (NumPy, ``.npy``)."""
        return None

    @property
    def read_ahead(self) -> bool:
        """Whether a full-data pass should read this source's next block on a second thread
        (:func:`pymc_subsample.model.cluster.map_row_blocks`): reading it costs time (disk,
        decompression, a Dask computation)."""
        return not self.in_memory

    def read_block(self, idx: np.ndarray) -> np.ndarray:
        """The consecutive rows ``idx`` of a full-data pass, read now (not a lazy view)."""
        return self.take(idx)

    def __getstate__(self) -> dict:
        # the cache stays in this process (PyMC pickles the step for each worker)
        return {k: v for k, v in self.__dict__.items() if k != "_cache"}

    def _cached_take(self, rows: np.ndarray) -> np.ndarray:
        """:meth:`_take_sorted`, remembering large reads of sources outside memory.

        The reference point's subsample fit reads the same few thousand random rows at every
        Newton step: from Zarr or Dask each read touches most chunks, so it is kept
        (:data:`CACHE_BYTES` at most, oldest dropped first). Iterations read a few rows and
        are never cached.
        """
        if self.in_memory or rows.size < CACHE_MIN_ROWS:
            return self._take_sorted(rows)
        cache = self.__dict__.setdefault("_cache", {})
        key = (rows.size, hash(rows.tobytes()))
        hit = cache.get(key)
        if hit is not None and np.array_equal(hit[0], rows):
            return hit[1]
        value = self._take_sorted(rows)
        cache[key] = (rows.copy(), value)
        while sum(v.nbytes for _, v in cache.values()) > CACHE_BYTES and len(cache) > 1:
            cache.pop(next(iter(cache)))
        return value

    def blocks(self, block_rows: int = BLOCK_ROWS) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(start, rows start:start + block_rows)`` over all rows."""
        for start in range(0, self.n_rows, block_rows):
            yield start, self._slice(start, min(start + block_rows, self.n_rows))

    def __getitem__(self, key) -> np.ndarray:
        """Basic slicing, rows first (what ``dask.array.from_array`` asks of a block)."""
        key = key if isinstance(key, tuple) else (key,)
        rows = key[0] if key else slice(None)
        if not isinstance(rows, slice) or rows.step not in (None, 1):
            raise IndexError("a RowSource is sliced by a contiguous range of rows; use take()")
        start, stop, _ = rows.indices(self.n_rows)
        return self._slice(start, max(start, stop))[(slice(None), *key[1:])]

    def all_finite(self) -> bool:
        """Whether every entry is finite (integers always are), read block by block."""
        if self.dtype.kind not in "fc":
            return True
        return all(bool(np.isfinite(block).all()) for _, block in self.blocks())

    def graph_value(self) -> np.ndarray:
        """What the model's PyTensor graph holds: the array, or a stand-in of no memory."""
        if self.dtype.kind in "fc":
            fill = np.array(np.nan, dtype=self.dtype)
        elif self.dtype.kind in "iu":
            fill = np.array(np.iinfo(self.dtype).min, dtype=self.dtype)
        else:
            fill = np.zeros((), dtype=self.dtype)
        return np.broadcast_to(fill, self.shape)

    def user_value(self) -> Any:
        """What ``get_value()`` of the data container returns (PyMC's observed_data)."""
        return self.graph_value()


class ArraySource(RowSource):
    """A NumPy array, in memory or memory-mapped, never copied.

    A memory-mapped array pickles as its file's path (PyMC sends the step to each worker
    process with ``cores > 1``), so no process receives a copy of the rows.
    """

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self.shape, self.dtype = tuple(array.shape), array.dtype
        self.path = getattr(array, "filename", None) if isinstance(array, np.memmap) else None

    def _take_sorted(self, rows: np.ndarray) -> np.ndarray:
        return self.array[rows]

    @property
    def read_ahead(self) -> bool:
        # a memory-mapped file's pages may still be on disk; rows in RAM are read as views
        return self.path is not None

    def read_block(self, idx: np.ndarray) -> np.ndarray:
        # a copy, so that the file's pages are read here and not when the pass computes
        return np.array(self.take(idx))

    def graph_value(self) -> np.ndarray:
        return np.asarray(self.array)

    def user_value(self):
        # lazy when Dask is installed: PyMC casts observed integers twice (to int32, then to
        # the distribution's int64) to store them in the InferenceData, N-sized copies each
        try:
            import dask.array as da
        except ImportError:
            return np.asarray(self.array)
        # from the source, not the array: from_array copies a NumPy array (memmaps too) whole;
        # name=False: no hash of the whole array for a name
        return da.from_array(
            self, chunks=(BLOCK_ROWS * 16, *self.shape[1:]), name=False,
            meta=np.empty((0,) * len(self.shape), dtype=self.dtype),
        )

    def __reduce__(self):
        if self.path is not None:
            return (_open_npy, (os.fspath(self.path),))
        return (ArraySource, (np.asarray(self.array),))


def _open_npy(path: str) -> ArraySource:
    return ArraySource(np.load(path, mmap_mode="r"))


class ZarrSource(RowSource):
    """A Zarr array read by orthogonal selection (each chunk holding asked rows read once)."""

    in_memory = False

    def __init__(self, array) -> None:
        self.array = array
        self.shape, self.dtype = tuple(array.shape), np.dtype(array.dtype)

    def _take_sorted(self, rows: np.ndarray) -> np.ndarray:
        return np.asarray(self.array.get_orthogonal_selection((rows,)))

    @property
    def chunk_rows(self) -> int:
        return int(self.array.chunks[0])

    def user_value(self):
        return _require("dask.array").array.from_zarr(self.array)


class DaskSource(RowSource):
    """A Dask array, computed block by block with the active scheduler.

    A block of consecutive rows (a full-data pass reads them in order, on a thread of its
    own beside the threads that compute) is computed on that thread with Dask's synchronous
    scheduler unless a scheduler is set (``dask.config.set(scheduler=...)``, or a
    ``dask.distributed`` client, which sets it): handing each chunk's task to Dask's thread
    pool and back cost more than reading it (a 65,536-row block of 4,096-row chunks from
    Zarr, 39 ms of CPU a block against 30 ms, ``docs/benchmarks.md``).
    """

    in_memory = False

    def __init__(self, array) -> None:
        self.array = array
        self.shape, self.dtype = tuple(int(n) for n in array.shape), np.dtype(array.dtype)

    def _take_sorted(self, rows: np.ndarray) -> np.ndarray:
        return np.asarray(self.array[rows].compute())

    @property
    def chunk_rows(self) -> int:
        return int(max(self.array.chunks[0]))

    def _slice(self, start: int, stop: int) -> np.ndarray:
        import dask

        scheduler = None if dask.config.get("scheduler", None) is not None else "synchronous"
        return np.asarray(self.array[start:stop].compute(scheduler=scheduler))

    def all_finite(self) -> bool:
        """A Dask reduction: on the cluster when a client is active, only a bool comes back."""
        if self.dtype.kind not in "fc":
            return True
        import dask.array as da

        return bool(da.isfinite(self.array).all().compute())

    def user_value(self):
        return self.array


def as_row_source(value) -> RowSource:
    """The :class:`RowSource` of a NumPy array, ``.npy`` path, Zarr array or Dask array."""
    if isinstance(value, RowSource):
        return value
    if isinstance(value, str | os.PathLike):
        if os.fspath(value).endswith(".npy"):
            return ArraySource(np.load(value, mmap_mode="r"))
        zarr = _require("zarr")
        return ZarrSource(zarr.open_array(value, mode="r"))
    module = type(value).__module__.split(".")[0]
    if module == "dask":
        return DaskSource(value)
    if module == "zarr":
        return ZarrSource(value)
    if isinstance(value, np.ndarray) and not isinstance(value, np.ma.MaskedArray):
        return ArraySource(value)
    if isinstance(value, list | tuple):
        return ArraySource(np.asarray(value))
    raise TypeError(
        f"pms.Data takes a NumPy array, a memory-mapped .npy (or its path), a Zarr array or a "
        f"Dask array; got {type(value).__name__}. Convert it with np.asarray, or write it to a "
        "Zarr store (docs: Tall data from disk)."
    )


class _RowArray(np.ndarray):
    """The value a :func:`Data` container holds: the source's array, tied to its source.

    It does not copy on ``copy.deepcopy`` (a copied model shares the rows) and pickles as its
    source (a memory-mapped file as its path). Anything computed from it is a plain ndarray.
    """

    _source: RowSource | None = None

    def __array_finalize__(self, obj) -> None:
        self._source = None  # a view or slice is not the whole source

    def __array_wrap__(self, arr, context=None, return_scalar=False):
        arr = np.asarray(arr).view(np.ndarray)
        return arr[()] if return_scalar else arr

    def __deepcopy__(self, memo):
        return self if self._source is not None else np.array(self)

    def __reduce__(self):
        if self._source is None:
            return np.asarray(self).view(np.ndarray).__reduce__()
        return (_row_array, (self._source,))


def _row_array(source: RowSource) -> _RowArray:
    out = source.graph_value().view(_RowArray)
    out._source = source
    return out


class RowDataVariable(TensorSharedVariable):
    """The shared variable of a :func:`Data` container.

    ``get_value()`` (what PyMC stores as the InferenceData's observed data) returns the data
    without copying them: a Dask array over them (lazy) when Dask is installed, else the NumPy
    or memory-mapped array itself; never the stand-in the graph holds for Zarr and Dask
    sources. ``get_value(borrow=True)`` is what the graph holds.
    """

    def get_value(self, borrow: bool = False, return_internal_type: bool = False):
        value = self.container.storage[0]
        if isinstance(value, _RowArray) and value._source is not None and not borrow:
            return value._source.user_value()
        return super().get_value(borrow=borrow, return_internal_type=return_internal_type)


def row_source_of(var) -> RowSource | None:
    """The :class:`RowSource` behind a data container made by :func:`Data`, else None."""
    if not isinstance(var, SharedVariable):
        return None
    value = var.container.storage[0]
    return value._source if isinstance(value, _RowArray) else None


def Data(name: str, value, dims=None, model: pm.Model | None = None) -> SharedVariable:
    """A data container for tall data, read a few rows at a time (drop-in for ``pm.Data``).

    Parameters
    ----------
    name : str
        Name of the container in the model.
    value : array_like, str or path
        A NumPy array, a memory-mapped ``.npy`` or its path, a Zarr array (or the path of a
        Zarr store), or a Dask array. Rows run along the first axis. It is never loaded whole
        nor copied.
    dims : str or sequence of str, optional
        Names of its axes, added to the model's coordinates (lengths only) so that the
        model's variables can use them.
    model : pymc.Model, optional
        The model (default: the one in context).

    Returns
    -------
    SharedVariable
        A PyTensor shared variable usable wherever ``pm.Data`` is (``observed=`` included).

    Notes
    -----
    The container is not stored in the InferenceData's ``constant_data`` (PyMC would add an
    index coordinate of N integers for each of its axes), and ``pm.set_data`` does not reach
    it: build a new model for new data. Used as ``observed=``, it is in ``observed_data``
    like any observation, lazily (PyMC adds an N-long index; :func:`to_inference_data` does
    not). Store it in the distribution's own dtype, int64 for counts and 0/1 outcomes, or
    PyMC copies it to cast it. NaN and infinite
    entries are refused when a subsampling step is built (checked block by block). Models on
    NumPy and memory-mapped sources also run under NUTS; on Zarr and Dask sources only the
    subsampling steps can read the rows (NUTS fails at its first evaluation, never silently).
    """
    model = pm.modelcontext(model)
    source = as_row_source(value)
    if len(source.shape) == 0:
        raise ValueError(f"pms.Data '{name}' is a scalar; tall data need a row axis")
    ndim = len(source.shape)
    # built on an empty array, then given the tied value: PyTensor's filter would make a
    # plain ndarray of it (and materialise a stand-in)
    var = RowDataVariable(
        type=TensorType(dtype=str(source.dtype), shape=(None,) * ndim),
        value=np.zeros((0,) * ndim, dtype=source.dtype),
        strict=False,
        name=model.name_for(name),
    )
    var.container.storage[0] = _row_array(source)
    static = source.shape
    if isinstance(dims, str):
        dims = (dims,)
    if dims is not None:
        if len(dims) != len(static):
            raise ValueError(
                f"pms.Data '{name}' has {len(static)} axes but dims {tuple(dims)} name "
                f"{len(dims)}"
            )
        for axis, dim in enumerate(dims):
            if dim is not None and dim not in model.dim_lengths:
                model.add_coord(dim, length=static[axis])
    # not one of the model's data_vars: PyMC would store it in the InferenceData's
    # constant_data with an index coordinate of N integers per axis
    return var


def _row_data_observations(model: pm.Model) -> set[str]:
    """Names of the observed variables whose observations are :func:`Data` containers."""
    return {
        rv.name for rv in model.observed_RVs
        if any(row_source_of(v) is not None for v in graph_inputs([model.rvs_to_values[rv]]))
    }


def to_inference_data(trace, *, model: pm.Model | None = None, **kwargs):
    """:func:`pymc.to_inference_data`, storing :func:`Data` observations without an index.

    ArviZ gives every observed axis an index of N integers (``np.arange``), which pandas and
    xarray copy on the way: at N = 1e8 this took the peak memory of a whole MHSS run from
    0.79 to 2.16 GiB (``benchmarks/tall_data.py``). Here observations held in :func:`Data`
    containers keep their dimension names but get no index coordinate (xarray allows a
    dimension without one), and their values stay lazy (a Dask array over the source when
    Dask is installed, else the array itself). Every other group is PyMC's.

    Parameters
    ----------
    trace : pymc.backends.base.MultiTrace
        What ``pm.sample(..., return_inferencedata=False, compute_convergence_checks=False)``
        returns (the convergence checks would build PyMC's InferenceData first).
    model : pymc.Model, optional
        The model (default: the one in context).
    **kwargs
        Passed to PyMC's converter (``log_likelihood``, ``coords``, ``dims``, ...).

    Returns
    -------
    arviz.InferenceData
    """
    return _RowDataConverter(trace=trace, model=model, **kwargs).to_inference_data()


class _RowDataConverter(InferenceDataConverter):
    """PyMC's converter, except that observations of :func:`Data` containers get no index."""

    def observed_data_to_xarray(self):
        if self.predictions or not self.observations:
            return None
        tall = _row_data_observations(self.model) & self.observations.keys()
        rest = {k: v for k, v in self.observations.items() if k not in tall}
        dataset = (
            dict_to_dataset(rest, library=pm, coords=self.coords, dims=self.dims, default_dims=[])
            if rest else xr.Dataset(attrs=make_attrs(library=pm))
        )
        for name in sorted(tall):
            value = self.observations[name]
            named = list(self.dims.get(name) or ())
            dims = [
                named[i] if i < len(named) and named[i] is not None else f"{name}_dim_{i}"
                for i in range(np.ndim(value))
            ]
            coords = {d: np.asarray(self.coords[d]) for d in dims if d in self.coords}
            dataset[name] = xr.DataArray(value, dims=dims, coords=coords)
        return dataset
