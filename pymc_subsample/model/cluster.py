"""Full-data passes in blocks, locally or as tasks on a ``dask.distributed`` cluster.

:class:`GatheringFunction` reads the rows of :func:`pymc_subsample.Data` containers outside
the compiled PyTensor functions; :func:`map_row_blocks` runs a data pass's block function over
all rows, one block at a time, and, when a ``pms.Data`` container is a Dask array and a
``dask.distributed`` client is active, as one task a block on the cluster
(``docs/tall-data.md``, "Setup passes on a Dask cluster").
"""

from __future__ import annotations

import threading
import typing
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar

import numpy as np
from threadpoolctl import threadpool_limits

from pymc_subsample.model.build_progress import rows_advance
from pymc_subsample.model.data import BLOCK_ROWS, DaskSource, RowSource

if typing.TYPE_CHECKING:
    from pymc_subsample.model.passes import DataPass

#: Rows per chunk when a setup pass touches all N rows (bounds peak memory): the row
#: sources' block size, so that a block of a pass is one read of a source.
SETUP_CHUNK_ROWS = BLOCK_ROWS

#: Rows of a block handed over by :meth:`SubsampledLikelihood.map_row_blocks` on a Dask
#: worker: ``{"range": (start, stop), rows input name: block}``, read instead of the sources.
_GIVEN_ROWS: ContextVar[dict | None] = ContextVar("given_rows", default=None)
#: One lock per block function in a worker process: compiled functions are not thread-safe.
_BLOCK_LOCKS: dict[int, threading.Lock] = {}


def _run_block(data_pass, args: tuple, names: tuple[str, ...], start: int, stop: int,
               *blocks):
    """``data_pass.block(idx, *args)`` on rows ``start:stop``, their Dask blocks given (a
    task)."""
    token = _GIVEN_ROWS.set({"range": (start, stop), **dict(zip(names, blocks, strict=True))})
    lock = _BLOCK_LOCKS.setdefault(id(data_pass), threading.Lock())
    try:
        with lock, threadpool_limits(limits=1, user_api="blas"):
            # θ, like the blocks, arrives as a view into the task's message: align it too
            return data_pass.block(np.arange(start, stop, dtype=np.int64), *_aligned(args))
    finally:
        _GIVEN_ROWS.reset(token)


def _aligned(value, dtype=None):
    """``value`` with every array in it aligned and C-contiguous (of ``dtype`` if given).

    Arrays received from a ``dask.distributed`` worker (``compute()`` of rows in one chunk,
    a block handed to a task, a task's results) are views into the message's buffer, at any
    byte offset; PyTensor's C code refuses unaligned inputs. Arrays already aligned,
    contiguous and of the dtype are returned as they are (no copy); tuples and lists are
    walked.

    Parameters
    ----------
    value : ndarray, tuple, list or any
    dtype : numpy dtype, optional
        The graph input's dtype, for an array ``value``.

    Returns
    -------
    ndarray, tuple, list or any
        The same structure; anything that is not an array is returned unchanged.
    """
    if isinstance(value, np.ndarray):
        return np.require(value, dtype=dtype, requirements=("C", "A"))
    if isinstance(value, tuple | list):
        return type(value)(_aligned(v) for v in value)
    return value


def _active_client():
    """The active ``dask.distributed`` client, if Distributed is installed and one is."""
    try:
        from distributed import get_client
    except ImportError:
        return None
    try:
        return get_client()
    except ValueError:  # no client
        return None


class GatheringFunction:
    """A compiled function of a row index ``idx`` that reads the rows of its row sources itself.

    The rows of :func:`pymc_subsample.Data` containers are not indexed inside the PyTensor
    graph (a Zarr or Dask array cannot be held there, a memory-mapped one should not be read
    through it): the graph takes them as extra inputs, gathered here by
    :meth:`~pymc_subsample.model.data.RowSource.take` on every call (or handed to a cluster
    task by :func:`_run_block`) and passed on aligned, C-contiguous and of the graph
    input's dtype, whatever the source returned (:func:`_aligned`).
    """

    def __init__(
        self, fn, idx_position: int, sources: Sequence[RowSource], names: Sequence[str],
        dtypes: Sequence[str],
    ) -> None:
        self.fn = fn
        self.idx_position = idx_position
        self.sources = tuple(sources)
        self.names = tuple(names)
        self.dtypes = tuple(np.dtype(d) for d in dtypes)

    def __call__(self, *args):
        idx = args[self.idx_position]
        given = _GIVEN_ROWS.get()
        if given is not None:
            start, stop = given["range"]
            if not (len(idx) == stop - start and idx[0] == start and idx[-1] == stop - 1):
                given = None
        rows = (
            _aligned(given[name] if given is not None and name in given else source.take(idx),
                     dtype)
            for name, source, dtype in zip(self.names, self.sources, self.dtypes, strict=True)
        )
        return self.fn(*args, *rows)

    @property
    def trust_input(self) -> bool:
        return self.fn.trust_input

    @trust_input.setter
    def trust_input(self, value: bool) -> None:
        self.fn.trust_input = value


def _advancing(blocks, advance):
    """``blocks`` as they are, each one's rows counted on the build's bar."""
    for idx, result in blocks:
        advance(len(idx))
        yield idx, result


def _read_block(sources: Sequence[tuple[str, RowSource]], idx: np.ndarray) -> dict:
    """The rows ``idx`` (consecutive) of each source, as :data:`_GIVEN_ROWS` hands them over."""
    return {"range": (int(idx[0]), int(idx[-1]) + 1),
            **{name: source.read_block(idx) for name, source in sources}}


def _read_ahead(lik, data_pass: DataPass, args: tuple,
                chunks: Iterable[np.ndarray]) -> Iterator[tuple[np.ndarray, typing.Any]]:
    """``(idx, data_pass.block(idx, *args))`` over ``chunks``, the next block's rows of the
    sources that cost a read (Zarr, Dask, memory-mapped ``.npy`` files:
    :attr:`~pymc_subsample.model.data.RowSource.read_ahead`) read on a second thread while
    this one computes. Decompressing Zarr chunks and copying pages out of a mapped file
    release the GIL, so the read and the pass's arithmetic overlap on two cores: a pass over
    such a source costs about the larger of the two instead of their sum. Blocks are
    computed in order, one read ahead (memory: two blocks)."""
    sources = [(rows.name, source) for rows, source in lik.gathered.values()
               if source.read_ahead]
    if not sources:
        yield from ((idx, data_pass.block(idx, *args)) for idx in chunks)
        return
    chunks = iter(chunks)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pms-read") as pool:
        idx = next(chunks, None)
        ahead = pool.submit(_read_block, sources, idx) if idx is not None else None
        while idx is not None:
            given = ahead.result()
            following = next(chunks, None)
            if following is not None:
                ahead = pool.submit(_read_block, sources, following)
            token = _GIVEN_ROWS.set(given)
            try:
                result = data_pass.block(idx, *args)
            finally:
                _GIVEN_ROWS.reset(token)
            yield idx, result
            idx = following


def map_row_blocks(
    lik, data_pass: DataPass, *args, chunks: typing.Iterable[np.ndarray] | None = None
) -> typing.Iterator[tuple[np.ndarray, typing.Any]]:
    """``(idx, data_pass.block(idx, *args))`` for ``idx`` in ``lik.row_chunks()``, in order.

    With ``chunks`` (a subsample's index arrays), over those, locally. Without, a
    full-data pass: locally by default, the next block of any source outside memory read
    on a second thread meanwhile (:func:`_read_ahead`; rows of Dask sources are read with
    Dask's own scheduler). When a pms.Data container is a Dask array and a ``dask.distributed``
    client is active, each block is a task on the cluster instead: ``data_pass`` (with its
    compiled functions) is sent once to each worker and kept there for later
    passes, each task carries only ``args`` (``θ``, small), and the workers read their
    blocks of the Dask arrays and return only the block's results (sums, a block's row
    constants). Within a worker process the calls are serialised (compiled functions are
    not thread-safe), so one thread per worker is what helps.
    """
    block_fn = data_pass.block
    if chunks is not None:
        return ((idx, block_fn(idx, *args)) for idx in chunks)
    dask_rows = [(rows.name, source) for rows, source in lik.gathered.values()
                 if isinstance(source, DaskSource)]
    client = _active_client() if dask_rows else None
    if client is None:
        # lazily: a pass holds one block's results at a time
        return _advancing(_read_ahead(lik, data_pass, args, lik.row_chunks()),
                          rows_advance(lik.n_rows))
    import dask

    chunk = SETUP_CHUNK_ROWS
    names = tuple(name for name, _ in dask_rows)
    blocks = [
        source.array.rechunk({0: chunk, **{a: -1 for a in range(1, source.array.ndim)}})
        .to_delayed().reshape(-1)
        for _, source in dask_rows
    ]
    # one copy of the pass per worker for the step's lifetime (unpickling compiles)
    key = (id(client), id(data_pass))
    if key not in lik._scattered:
        [future] = client.scatter([data_pass], broadcast=True, hash=False)
        lik._scattered[key] = (data_pass, future)
    future = lik._scattered[key][1]
    tasks = [
        dask.delayed(_run_block, pure=False)(
            future, args, names, start, min(start + chunk, lik.n_rows),
            *(b[k] for b in blocks)
        )
        for k, start in enumerate(range(0, lik.n_rows, chunk))
    ]
    lik.cluster_blocks += len(tasks)
    # the results (sums, row constants) arrive as views into the workers' messages
    results = (_aligned(r) for r in client.gather(client.compute(tasks)))
    return zip(lik.row_chunks(chunk), results, strict=True)
