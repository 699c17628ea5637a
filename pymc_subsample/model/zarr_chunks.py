"""Whole chunks of a Zarr array read and decoded on the calling thread, without Zarr's event
loop.

Zarr 3 reads every chunk through its asynchronous codec pipeline: a coroutine, a hop to its
event-loop thread and one to a worker thread per chunk and per codec. That bookkeeping is
Python, so it holds the GIL, and at small chunks it costs more than the decoding itself: a
pass over 10⁷ × 10 float64 rows in 4,096-row zstd chunks spent 1.9 CPU s on Zarr's event-loop
thread and 2.1 s on its workers, where reading the chunks' files and decoding them took 1.0 s
(``docs/benchmarks.md``, "Zarr chunks without the event loop"). Zarr ≥ 3.1.6 gives stores
that read synchronously (``zarr.abc.store.SupportsGetSync``, local and in-memory stores) and
codecs that decode synchronously (``zarr.abc.codec.SupportsSyncCodec``), for this hot path
(zarr-python PRs 3721 and 3725): :class:`SyncChunkReader` applies an array's own codec chain
with them, each chunk read once; the decompressors release the GIL, so a full-data pass's
reader threads overlap its arithmetic. Arrays it cannot read so (Zarr 2, sharded or
remote stores, chunks split across columns, a codec without a synchronous decode) are read by
Zarr's slicing, as before. :func:`zarr_array_of` finds the Zarr array behind a Dask array
that is ``dask.array.from_zarr`` of it, so that its rows are read so too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["SyncChunkReader", "zarr_array_of"]


class SyncChunkReader:
    """Reads whole row chunks of one Zarr 3 array with its codecs, synchronously.

    Build it with :meth:`of`, which says ``None`` where this path does not apply.

    Parameters
    ----------
    array : zarr.Array
        A Zarr 3 array on a regular grid, whose chunks span every column.
    store_path : zarr.storage.StorePath
        Where its chunks are, in a store that reads synchronously (:func:`_synchronous`).
    """

    def __init__(self, array: Any, store_path: Any) -> None:
        from zarr.core.buffer import default_buffer_prototype

        self.array = array
        self._store_path = store_path
        async_array = array.async_array
        self._pipeline = async_array.codec_pipeline
        chunk_coords = (0,) * array.ndim
        spec = array.metadata.get_chunk_spec(chunk_coords, async_array.config,
                                             default_buffer_prototype())
        # each codec decodes with the spec its input had when encoded (the pipeline's order)
        self._array_codecs = []
        for codec in self._pipeline.array_array_codecs:
            self._array_codecs.append((codec, spec))
            spec = codec.resolve_metadata(spec)
        self._bytes_codec = (self._pipeline.array_bytes_codec, spec)
        spec = self._pipeline.array_bytes_codec.resolve_metadata(spec)
        self._byte_codecs = []
        for codec in self._pipeline.bytes_bytes_codecs:
            self._byte_codecs.append((codec, spec))
            spec = codec.resolve_metadata(spec)
        self._prototype = default_buffer_prototype()
        self._rows = int(array.chunks[0])

    @classmethod
    def of(cls, array: Any) -> SyncChunkReader | None:
        """A reader for ``array``, or None where Zarr's own slicing must read it."""
        try:
            import zarr
            from zarr.abc.codec import SupportsSyncCodec
            from zarr.abc.store import SupportsGetSync
            from zarr.core.metadata.v3 import ArrayV3Metadata
        except ImportError:  # Zarr 2, or a Zarr 3 before the synchronous protocols
            return None
        if not (isinstance(array, zarr.Array) and isinstance(array.metadata, ArrayV3Metadata)
                and array.shards is None):
            return None
        store_path = _synchronous(array.store_path)
        if not isinstance(store_path.store, SupportsGetSync):
            return None
        if tuple(array.chunks[1:]) != tuple(array.shape[1:]):
            return None  # a chunk's rows split across columns: several reads a row
        if not all(isinstance(codec, SupportsSyncCodec) for codec in array.metadata.codecs):
            return None  # e.g. sharding, whose inner chunks are read through the pipeline
        return cls(array, store_path)

    def read(self, chunk: int) -> np.ndarray | None:
        """The rows of row chunk ``chunk`` (the last one cut to the array's rows), or None
        if the store has no such chunk (its rows are the fill value: Zarr's slicing says)."""
        key = self.array.metadata.encode_chunk_key((chunk,) + (0,) * (self.array.ndim - 1))
        data = (self._store_path / key).get_sync(prototype=self._prototype)
        if data is None:
            return None
        for codec, spec in reversed(self._byte_codecs):
            data = codec._decode_sync(data, spec)
        codec, spec = self._bytes_codec
        data = codec._decode_sync(data, spec)
        for codec, spec in reversed(self._array_codecs):
            data = codec._decode_sync(data, spec)
        rows = data.as_numpy_array()
        start = chunk * self._rows
        return rows[: max(0, min(self._rows, self.array.shape[0] - start))]


def _synchronous(store_path: Any) -> Any:
    """``store_path``, in a :class:`zarr.storage.LocalStore` when it is a local directory
    opened through fsspec (``dask.array.from_zarr`` of a path opens it so): the same files,
    read without fsspec's asynchronous wrapper."""
    try:
        from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper
        from fsspec.implementations.local import LocalFileSystem
    except ImportError:
        return store_path
    from zarr.storage import FsspecStore, LocalStore, StorePath

    store = store_path.store
    if (isinstance(store, FsspecStore) and isinstance(store.fs, AsyncFileSystemWrapper)
            and isinstance(store.fs.sync_fs, LocalFileSystem)):
        return StorePath(LocalStore(store.path, read_only=True), store_path.path)
    return store_path


def zarr_array_of(array: Any) -> Any:
    """The Zarr array the Dask array ``array`` is ``dask.array.from_zarr`` of, nothing
    computed on it; else None.

    ``from_zarr`` names the array by a token of ``z`` and of its ``chunks`` argument as
    written, so the array is recognised when its name is that of ``z`` with its own chunks or
    with its row chunks written in one of the usual ways (``(rows, -1)``, ``(rows, columns)``,
    ``rows``, the chunks in full); an array not recognised is computed by Dask, as any other
    graph."""
    import dask.array as da

    try:
        import zarr
    except ImportError:
        return None
    # from_zarr keeps the Zarr array as the one value of a layer of its own
    held = [value for layer in array.__dask_graph__().layers.values() if len(layer) == 1
            for value in layer.values() if isinstance(value, zarr.Array)]
    if len(held) != 1:
        return None
    rows, rest = array.chunks[0][0], array.shape[1:]
    written = (None, (rows, *(-1,) * len(rest)), (rows, *rest), rows, array.chunks)
    if not any(da.from_zarr(held[0], chunks=chunks).name == array.name for chunks in written):
        return None
    return held[0]
