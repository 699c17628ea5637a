"""Row sources: where the rows of a :func:`~pymc_subsample.model.data.Data` container are
read from, a few at a time or block by block.

A NumPy array (kept as it is, never copied) or a memory-mapped ``.npy`` is an
:class:`ArraySource`; a Zarr array and a Dask array are :class:`ChunkedSource` s, whose
consecutive rows are read as the whole chunks that hold them, each chunk once in a full-data
pass. Every source answers one question, :meth:`RowSource.take` (the rows ``idx`` as a NumPy
array, gathered in sorted order so that each file page or chunk is read once), and yields
consecutive row blocks for the full-data passes (:meth:`RowSource.blocks`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import cached_property
from typing import Any

import numpy as np

from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.model.file_read_ahead import FileReadAhead
from pymc_subsample.model.zarr_chunks import SyncChunkReader, zarr_array_of

__all__ = ["ArraySource", "ChunkedSource", "DaskSource", "RowSource", "ZarrSource",
           "as_row_source"]

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

    #: Blocks of :data:`BLOCK_ROWS` rows not yet checked for NaN and infinities, while
    #: :meth:`check_finite_on_read` asks for it (None: nothing to check).
    _unchecked_blocks: np.ndarray | None = None

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
        unchecked = self._unchecked_blocks
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
        unchecked = self._unchecked_blocks
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
        unchecked = self._unchecked_blocks
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
        """Whether a full-data pass should read this source's next blocks ahead, on threads
        of their own (:func:`pymc_subsample.model.cluster.map_row_blocks`): reading it costs
        time (disk, decompression, a Dask computation)."""
        return not self.in_memory

    def read_block(self, idx: np.ndarray) -> np.ndarray:
        """The consecutive rows ``idx`` of a full-data pass, read now (not a lazy view)."""
        return self.take(idx)

    def reads_blocks_apart(self, block_rows: int) -> bool:
        """Whether a pass's blocks of ``block_rows`` rows can be read on several threads at
        once and still read each stored chunk once: no chunk holds rows of two blocks."""
        return True

    def __getstate__(self) -> dict:
        # the cache stays in this process (PyMC pickles the step for each worker)
        return {k: v for k, v in self.__dict__.items() if k != "_cache"}

    @cached_property
    def _cache(self) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
        """Large reads of :meth:`_cached_take`: ``(size, hash) → (rows, values)``."""
        return {}

    def _cached_take(self, rows: np.ndarray) -> np.ndarray:
        """:meth:`_take_sorted`, remembering large reads of sources outside memory.

        The reference point's subsample fit reads the same few thousand random rows at every
        Newton step: from Zarr or Dask each read touches most chunks, so it is kept
        (:data:`CACHE_BYTES` at most, oldest dropped first). Iterations read a few rows and
        are never cached.
        """
        if self.in_memory or rows.size < CACHE_MIN_ROWS:
            return self._take_sorted(rows)
        cache = self._cache
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
        # a copy, so that the file's pages are read here and not when the pass computes; the
        # kernel asked to read the next blocks meanwhile (FileReadAhead)
        if self._ahead is not None and idx.size:
            self._ahead.before_reading(int(idx[-1]) + 1)
        return np.array(self.take(idx))

    @cached_property
    def _ahead(self) -> FileReadAhead | None:
        """The file's read-ahead (a memory-mapped ``.npy`` on Linux), else None."""
        return FileReadAhead.of(self.array) if self.path is not None else None

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


class ChunkedSource(RowSource):
    """A source stored in chunks of rows (Zarr, Dask), read in whole chunks.

    Reading any row of a Zarr chunk decompresses all its rows, and a Dask chunk is computed
    whole, so the chunks are the unit of the reads: consecutive rows
    (:meth:`_slice`, a full-data pass's blocks) are one read of the chunks that hold them,
    and the last of those chunks is kept when the rows end inside it, so that a pass whose
    blocks do not fall on chunk boundaries still reads each chunk once.
    """

    in_memory = False
    #: ``(chunk, its rows from the first row the last read did not return)`` or None.
    _kept: tuple[int, np.ndarray] | None = None

    #: row boundaries of the chunks along the first axis (int64, ``n_chunks + 1``): each
    #: kind of source's own, computed once
    _bounds: np.ndarray

    def _read_chunks(self, first: int, stop: int) -> np.ndarray:
        """The rows of chunks ``first:stop``, in one read."""
        raise NotImplementedError

    @property
    def chunk_rows(self) -> int:
        return int(np.diff(self._bounds).max())

    def reads_blocks_apart(self, block_rows: int) -> bool:
        # a chunk across a block boundary is kept from one block's read for the next
        # (_slice): read at once on two threads, it would be read twice
        return bool(np.isin(np.arange(block_rows, self.n_rows, block_rows), self._bounds).all())

    def _chunk_of(self, rows):
        """The chunks holding rows ``rows`` (an int or a sorted array)."""
        return np.searchsorted(self._bounds, rows, side="right") - 1

    def _chunk_runs(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``chunks, first, last``: the chunks holding the sorted ``rows``, each chunk's rows
        the run ``rows[first[j]:last[j]]``."""
        chunks, first = np.unique(self._chunk_of(rows), return_index=True)
        return chunks, first, np.append(first[1:], rows.size)

    def _slice(self, start: int, stop: int) -> np.ndarray:
        bounds = self._bounds
        first, last = int(self._chunk_of(start)), int(self._chunk_of(stop - 1))
        # the last chunk of the previous read (one assignment: a race only costs a re-read)
        kept = self._kept
        parts = []
        if kept is not None and kept[0] == first:
            parts.append(kept[1])
        if first + len(parts) <= last:
            parts.append(self._read_chunks(first + len(parts), last + 1))
        rows = parts[0] if len(parts) == 1 else np.concatenate(parts)
        # the next block of a pass starts inside this chunk: keep it (a copy: no view that
        # holds the whole block)
        self._kept = ((last, np.array(rows[bounds[last] - bounds[first]:]))
                      if stop < bounds[last + 1] else None)
        return rows[start - bounds[first] : stop - bounds[first]]

    def __getstate__(self) -> dict:
        # what a process reads is its own (PyMC pickles the step for each worker)
        return {k: v for k, v in super().__getstate__().items()
                if k not in ("_kept", "_tasks", "_bounds", "_reader", "_behind")}


class ZarrSource(ChunkedSource):
    """A Zarr array: consecutive rows read as whole chunks (:class:`ChunkedSource`), other
    rows from the chunks that hold them, each read once (:class:`SyncChunkReader` where it
    applies, else Zarr's orthogonal selection)."""

    def __init__(self, array) -> None:
        self.array = array
        self.shape, self.dtype = tuple(array.shape), np.dtype(array.dtype)

    @cached_property
    def _bounds(self) -> np.ndarray:
        step = int(self.array.chunks[0])
        return np.append(np.arange(0, self.n_rows, step, dtype=np.int64), self.n_rows)

    @cached_property
    def _reader(self) -> SyncChunkReader | None:
        """Whole chunks without Zarr's event loop where its store and codecs allow: its
        per-chunk bookkeeping holds the GIL and cost more than decoding 4,096-row chunks."""
        return SyncChunkReader.of(self.array)

    def _gather(self, chunks: np.ndarray, out_rows: list[slice], rows: list) -> np.ndarray | None:
        """Rows ``rows[j]`` of chunk ``chunks[j]`` into ``out_rows[j]`` of a new array, each
        chunk copied out as soon as decoded (its memory reused for the next one: holding a
        block's chunks to concatenate them cost page faults on fresh memory); None if a chunk
        was never written (Zarr's slicing gives its fill value) or without a reader."""
        reader = self._reader
        if reader is None:
            return None
        out = np.empty((out_rows[-1].stop, *self.shape[1:]), dtype=self.dtype)
        for k, where, which in zip(chunks, out_rows, rows, strict=True):
            values = reader.read(int(k))
            if values is None:
                return None
            out[where] = values[which]
        return out

    def _read_chunks(self, first: int, stop: int) -> np.ndarray:
        bounds = self._bounds
        chunks = range(first, stop)
        out = self._gather(chunks, [slice(bounds[k] - bounds[first], bounds[k + 1] - bounds[first])
                                    for k in chunks], [slice(None)] * len(chunks))
        return out if out is not None else np.asarray(self.array[bounds[first] : bounds[stop]])

    def _take_sorted(self, rows: np.ndarray) -> np.ndarray:
        bounds = self._bounds
        chunks, first, last = self._chunk_runs(rows)
        out = self._gather(chunks, [slice(a, b) for a, b in zip(first, last, strict=True)],
                           [rows[a:b] - bounds[k] for k, a, b in zip(chunks, first, last,
                                                                     strict=True)])
        return out if out is not None else np.asarray(
            self.array.get_orthogonal_selection((rows,)))

    def user_value(self):
        return _require("dask.array").array.from_zarr(self.array)


#: Bytes of chunks a Dask source computes at once to gather scattered rows (bounds memory).
GATHER_BYTES = 64 * 2**20
#: A Dask source reads rows by Dask's indexing, not whole chunks, when the chunks that hold
#: them have more than this many times their rows and SPARSE_BYTES in all: one row of a
#: 65,536-row chunk of a Zarr store took 14-20 ms of CPU as the whole chunk, 3.1-3.3 ms by
#: indexing; a row of a 4,096-row chunk 2.5-3.1 ms as the chunk, 4.5 ms by indexing
#: (2026-11-27, load 7-9).
SPARSE_FACTOR = 8
SPARSE_BYTES = 2**20


class DaskSource(ChunkedSource):
    """A Dask array, computed chunk by chunk with the active scheduler.

    Its row chunks are the Dask array's own (columns in one chunk), each a ``Delayed`` made
    once (``to_delayed``), so that reading rows is one ``dask.compute`` of the chunks that
    hold them: slicing the array instead built and optimised a graph over all its chunks at
    each read (a 65,536-row block of a memory-mapped array in 2,442 chunks: 25.5 ms of CPU a
    block against 3.6 ms, load 9). The
    chunks are computed with the scheduler set (``dask.config.set(scheduler=...)``, or a
    ``dask.distributed`` client, which sets it), else Dask's threaded scheduler, so that the
    chunks of a block are read side by side.
    """

    def __init__(self, array) -> None:
        self.array = array
        self.shape, self.dtype = tuple(int(n) for n in array.shape), np.dtype(array.dtype)

    @cached_property
    def _tasks(self) -> np.ndarray:
        """The row chunks as ``Delayed`` objects (made once; the graph optimised once)."""
        array = self.array
        if any(len(c) > 1 for c in array.chunks[1:]):
            array = array.rechunk({a: -1 for a in range(1, array.ndim)})
        return array.to_delayed().reshape(-1)

    @cached_property
    def _bounds(self) -> np.ndarray:
        return np.cumsum((0, *self.array.chunks[0]), dtype=np.int64)

    @staticmethod
    def _scheduler() -> str | None:
        import dask

        return None if dask.config.get("scheduler", None) is not None else "threads"

    def _compute(self, chunks) -> tuple[np.ndarray, ...]:
        import dask

        return dask.compute(*self._tasks[chunks], scheduler=self._scheduler())

    def _sparse(self, rows: int, held: int) -> bool:
        """Whether ``rows`` rows are a small part of the ``held`` rows of the chunks that
        hold them (:data:`SPARSE_FACTOR`): Dask's own indexing then reads only what the
        chunks' readers give for those rows (from Zarr, the Zarr chunks that hold them)."""
        row_bytes = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        return held > SPARSE_FACTOR * rows and held * row_bytes > SPARSE_BYTES

    def _zarr_behind(self) -> ZarrSource | None:
        """The Zarr array this Dask array reads as it is, as a :class:`ZarrSource`, while no
        scheduler is set (no ``dask.distributed`` client): else None.

        ``dask.array.from_zarr(z)`` or ``from_zarr(z, chunks=...)`` (nothing computed on it,
        :func:`~pymc_subsample.model.zarr_chunks.zarr_array_of`) is read from ``z``
        directly, in ``z``'s own chunks: Dask's threaded scheduler cost about 1 ms of CPU a
        chunk, most of a pass over 4,096-row chunks, and Dask chunks of 65,536 rows read
        each through Zarr's event loop (``docs/benchmarks.md``); any other graph over the
        same store is computed by Dask.
        """
        import dask

        if dask.config.get("scheduler", None) is not None:
            return None
        return self._behind

    @cached_property
    def _behind(self) -> ZarrSource | None:
        """The :class:`ZarrSource` of the Zarr array this is ``from_zarr`` of, else None."""
        array = zarr_array_of(self.array)
        return ZarrSource(array) if array is not None else None

    @property
    def chunk_rows(self) -> int:
        behind = self._zarr_behind()
        return behind.chunk_rows if behind is not None else super().chunk_rows

    def reads_blocks_apart(self, block_rows: int) -> bool:
        behind = self._zarr_behind()
        return (behind.reads_blocks_apart(block_rows) if behind is not None
                else super().reads_blocks_apart(block_rows))

    def _slice(self, start: int, stop: int) -> np.ndarray:
        if (behind := self._zarr_behind()) is not None:  # in the Zarr array's chunks
            return behind._slice(start, stop)
        bounds = self._bounds
        first, last = int(self._chunk_of(start)), int(self._chunk_of(stop - 1))
        kept = self._kept
        if ((kept is None or kept[0] != first)
                and self._sparse(stop - start, int(bounds[last + 1] - bounds[first]))):
            return np.asarray(self.array[start:stop].compute(scheduler=self._scheduler()))
        return super()._slice(start, stop)

    def _read_chunks(self, first: int, stop: int) -> np.ndarray:
        parts = [np.asarray(p) for p in self._compute(slice(first, stop))]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _take_sorted(self, rows: np.ndarray) -> np.ndarray:
        """The rows ``rows`` from the chunks that hold them, computed :data:`GATHER_BYTES` of
        chunks at a time (rows scattered over every chunk never hold the whole array), or by
        Dask's indexing when they are a small part of large chunks (:data:`SPARSE_FACTOR`)."""
        if (behind := self._zarr_behind()) is not None:
            return behind._take_sorted(rows)
        bounds = self._bounds
        chunks, first, last = self._chunk_runs(rows)
        row_bytes = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        if self._sparse(rows.size, int((bounds[chunks + 1] - bounds[chunks]).sum())):
            return np.asarray(self.array[rows].compute(scheduler=self._scheduler()))
        per_call = max(1, GATHER_BYTES // max(1, row_bytes * self.chunk_rows))
        out = np.empty((rows.size, *self.shape[1:]), dtype=self.dtype)
        for i in range(0, chunks.size, per_call):
            parts = self._compute(chunks[i : i + per_call])
            for k, part in enumerate(parts, start=i):
                lo, hi = first[k], last[k]
                out[lo:hi] = np.asarray(part)[rows[lo:hi] - bounds[chunks[k]]]
        return out

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
