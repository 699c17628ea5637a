"""Full-data passes in blocks: on a pool of threads, or as tasks on a ``dask.distributed``
cluster.

:class:`GatheringFunction` reads the rows of :func:`pymc_subsample.Data` containers outside
the compiled PyTensor functions; :func:`map_row_blocks` runs a data pass's block function over
all rows, block by block on :func:`pass_threads` threads, and, when a ``pms.Data`` container is
a Dask array and a ``dask.distributed`` client is active, as one task a block on the cluster
(``docs/tall-data.md``, "Setup passes on a Dask cluster").
"""

from __future__ import annotations

import os
import queue
import threading
import typing
import weakref
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import ContextVar
from itertools import chain, islice

import numpy as np
from threadpoolctl import threadpool_limits

from pymc_subsample.model.build_progress import rows_advance
from pymc_subsample.model.row_sources import BLOCK_ROWS, DaskSource, RowSource

if typing.TYPE_CHECKING:
    from pymc_subsample.model.data_pass import DataPass

#: Rows per chunk when a setup pass touches all N rows (bounds peak memory): the row
#: sources' block size, so that a block of a pass is one read of a source.
SETUP_CHUNK_ROWS = BLOCK_ROWS

#: Rows of a block handed over by :meth:`SubsampledLikelihood.map_row_blocks` on a Dask
#: worker: ``{"range": (start, stop), rows input name: block}``, read instead of the sources.
_GIVEN_ROWS: ContextVar[dict | None] = ContextVar("given_rows", default=None)
#: One lock per block function in a worker process: compiled functions are not thread-safe.
_BLOCK_LOCKS: dict[int, threading.Lock] = {}

#: The environment variable that sets the threads of a full-data pass (:func:`pass_threads`).
THREADS_VARIABLE = "PYMC_SUBSAMPLE_THREADS"
#: Blocks each thread of a pass has queued at most (memory: this many blocks' rows and
#: results per thread, beyond the one it computes).
_QUEUED_PER_THREAD = 2
#: Per data pass, its copies for the threads of a pass (made once, kept while it lives).
_THREAD_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def pass_threads() -> int:
    """Threads a full-data pass computes its blocks on.

    The environment variable ``PYMC_SUBSAMPLE_THREADS`` when set (``1``: one thread, the
    blocks in turn), else the CPUs this process may run on (``os.sched_getaffinity``, else
    ``os.cpu_count()``). Read at each pass.

    Raises
    ------
    ValueError
        If ``PYMC_SUBSAMPLE_THREADS`` is not a positive whole number.
    """
    value = os.environ.get(THREADS_VARIABLE, "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(
                f"{THREADS_VARIABLE}={value!r}: set it to a positive whole number of threads "
                "for the passes over the data before the first draw (1: one thread), or "
                "unset it to use every CPU."
            )
        return int(value)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _run_block(data_pass, args: tuple, names: tuple[str, ...], start: int, stop: int,
               *blocks):
    """``data_pass.block(idx, *args)`` on rows ``start:stop``, their Dask blocks given (a
    task)."""
    given = {"range": (start, stop), **dict(zip(names, blocks, strict=True))}
    lock = _BLOCK_LOCKS.setdefault(id(data_pass), threading.Lock())
    with lock, threadpool_limits(limits=1, user_api="blas"):
        # θ, like the blocks, arrives as a view into the task's message: align it too
        return _block_given(data_pass, np.arange(start, stop, dtype=np.int64),
                            _aligned(args), given)


def _block_given(data_pass: DataPass, idx: np.ndarray, args: tuple, given: dict | None):
    """``data_pass.block(idx, *args)``, reading the rows ``given`` (as :data:`_GIVEN_ROWS`
    hands them over: read ahead, or a Dask task's blocks) instead of the sources."""
    if given is None:
        return data_pass.block(idx, *args)
    token = _GIVEN_ROWS.set(given)
    try:
        return data_pass.block(idx, *args)
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
    :meth:`~pymc_subsample.model.row_sources.RowSource.take` on every call (or handed to a cluster
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
            _aligned(source.checked(given[name], *given["range"])
                     if given is not None and name in given else source.take(idx), dtype)
            for name, source, dtype in zip(self.names, self.sources, self.dtypes, strict=True)
        )
        return self.fn(*args, *rows)

    def copy(self) -> GatheringFunction:
        """A copy reading the same sources, with storage of its own (``Function.copy``), for
        another thread."""
        return GatheringFunction(self.fn.copy(), self.idx_position, self.sources, self.names,
                                 self.dtypes)

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
    :attr:`~pymc_subsample.model.row_sources.RowSource.read_ahead`) read on a second thread while
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
            yield idx, _block_given(data_pass, idx, args, given)
            idx = following


def _thread_copies(data_pass: DataPass, n: int) -> queue.SimpleQueue:
    """``data_pass`` and ``n - 1`` copies of it
    (:meth:`~pymc_subsample.model.data_pass.DataPass.thread_copy`; about 0.1 s each for a
    pass compiled to C) to hand to the ``n`` threads of a pass, the copies made on first use
    and kept while the pass lives. The calling thread waits for the blocks meanwhile, so the
    pass itself is free to run on one of them."""
    made = _THREAD_COPIES.setdefault(data_pass, [])
    while len(made) < n - 1:
        made.append(data_pass.thread_copy())
    free: queue.SimpleQueue = queue.SimpleQueue()
    for twin in (data_pass, *made[: n - 1]):
        free.put(twin)
    return free


def _copy_block(free: queue.SimpleQueue, idx: np.ndarray, args: tuple,
                given: Future | None):
    """``block(idx, *args)`` of a free copy of the pass, the rows ``given`` when read ahead."""
    data_pass = free.get()
    try:
        return _block_given(data_pass, idx, args, given.result() if given is not None else None)
    finally:
        free.put(data_pass)


def _on_threads(lik, data_pass: DataPass, args: tuple, chunks: Iterable[np.ndarray],
                threads: int, *, consecutive: bool = True
                ) -> Iterator[tuple[np.ndarray, typing.Any]]:
    """``(idx, data_pass.block(idx, *args))`` over ``chunks`` in order, the blocks computed on
    ``threads`` threads, each with a pass of its own (``data_pass`` or a copy); when the
    chunks are ``consecutive`` blocks of rows, the rows of sources that cost a read
    (:attr:`~pymc_subsample.model.row_sources.RowSource.read_ahead`) read in block order on
    as many more threads, ahead of the blocks that need them (on one when a stored chunk
    holds rows of two blocks:
    :meth:`~pymc_subsample.model.row_sources.RowSource.reads_blocks_apart`): decoding a
    block's Zarr chunks costs about as much CPU as its arithmetic, and one reader left both
    compute threads waiting for it (``docs/benchmarks.md``, "Two reader threads").

    What runs in parallel is what releases Python's GIL: NumPy's and BLAS's arithmetic on a
    block (the products of :meth:`~pymc_subsample.model.glm_pass.GLMPass.block`, the row
    constants), reading files and decompressing Zarr chunks. PyTensor's compiled C code
    holds the GIL while it runs, so two threads' calls of the compiled row terms take turns
    (``docs/benchmarks.md``, "Threads of a pass"). Each block's result is its own, and the
    caller combines them in block order: the sums are the same to the last bit whatever the
    number of threads. BLAS runs on one thread inside each.
    """
    sources = [(rows.name, source) for rows, source in lik.gathered.values()
               if source.read_ahead and consecutive]
    free = _thread_copies(data_pass, threads)
    compute = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="pms-pass")
    apart = all(source.reads_blocks_apart(SETUP_CHUNK_ROWS) for _, source in sources)
    reader = (ThreadPoolExecutor(max_workers=threads if apart else 1,
                                 thread_name_prefix="pms-read") if sources else None)
    pending: deque = deque()

    def submit(idx: np.ndarray) -> None:
        given = reader.submit(_read_block, sources, idx) if reader is not None else None
        pending.append((idx, compute.submit(_copy_block, free, idx, args, given)))

    chunks = iter(chunks)
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            for idx in islice(chunks, (_QUEUED_PER_THREAD + 1) * threads):
                submit(idx)
            while pending:
                idx, future = pending.popleft()
                result = future.result()
                following = next(chunks, None)
                if following is not None:
                    submit(following)
                yield idx, result
    finally:
        # on an error (or a pass left unfinished) the queued blocks are dropped
        compute.shutdown(wait=True, cancel_futures=True)
        if reader is not None:
            reader.shutdown(wait=True, cancel_futures=True)


def map_row_blocks(
    lik, data_pass: DataPass, *args, chunks: typing.Iterable[np.ndarray] | None = None,
    first_alone: bool = False,
) -> typing.Iterator[tuple[np.ndarray, typing.Any]]:
    """``(idx, data_pass.block(idx, *args))`` for ``idx`` in ``lik.row_chunks()``, in order.

    ``first_alone``: the first block is computed on the calling thread before the others
    start, which then run as without it (on threads, or on a cluster's workers, each sent a
    copy of the pass made after the first block). What that block leaves in the pass (an
    automatic bound's cell grid) is then the same whichever thread computes the other
    blocks, and in whatever order, so that the bounds, and a seeded run's draws, do not
    depend on the threads' timing.

    With ``chunks`` (a subsample's index arrays), over those: on :func:`pass_threads` threads
    too when every ``pms.Data`` source is in memory (or memory-mapped), else on the calling
    thread. Without,
    a full-data pass: locally by default, on :func:`pass_threads` threads (no more than there
    are blocks: :func:`_on_threads`), or with one thread on the calling thread, the next
    block of any source outside memory read on a second one meanwhile (:func:`_read_ahead`);
    rows of Dask sources are read with Dask's own scheduler. When a pms.Data container is a
    Dask array and a ``dask.distributed`` client is active, each block is a task on the
    cluster instead: ``data_pass`` (with its compiled functions) is sent once to each worker
    and kept there for later passes, each task carries only ``args`` (``θ``, small), and the
    workers read their blocks of the Dask arrays and return only the block's results (sums, a
    block's row constants). Within a worker process the calls are serialised (compiled functions are
    not thread-safe), so one thread per worker is what helps.
    """
    block_fn = data_pass.block
    if chunks is not None:
        chunks = list(chunks)
        # rows in memory only: a Zarr or Dask source's cache of large reads is not for threads
        threads = (min(pass_threads(), len(chunks) - first_alone) if lik.rows_in_memory
                   else 1)
        if threads <= 1:
            return ((idx, block_fn(idx, *args)) for idx in chunks)
        return _first_then_threads(lik, data_pass, args, chunks, threads, first_alone,
                                   consecutive=False)
    dask_rows = [(rows.name, source) for rows, source in lik.gathered.values()
                 if isinstance(source, DaskSource)]
    client = _active_client() if dask_rows else None
    if client is None:
        # lazily: a pass holds a few blocks' results at a time
        threads = min(pass_threads(), -(-lik.n_rows // SETUP_CHUNK_ROWS) - first_alone)
        if threads <= 1:
            blocks = _read_ahead(lik, data_pass, args, lik.row_chunks())
        else:
            blocks = _first_then_threads(lik, data_pass, args, lik.row_chunks(), threads,
                                         first_alone)
        return _advancing(blocks, rows_advance(lik.n_rows))
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
    first = []
    if first_alone:
        # here, the rows read through the cluster; then the pass, with what the block left in
        # it, sent to the workers afresh
        first = [block_fn(next(iter(lik.row_chunks(chunk))), *args)]
        lik._scattered.pop(key, None)
    if key not in lik._scattered:
        [future] = client.scatter([data_pass], broadcast=True, hash=False)
        lik._scattered[key] = (data_pass, future)
    future = lik._scattered[key][1]
    tasks = [
        dask.delayed(_run_block, pure=False)(
            future, args, names, start, min(start + chunk, lik.n_rows),
            *(b[k] for b in blocks)
        )
        for k, start in enumerate(range(0, lik.n_rows, chunk)) if k >= len(first)
    ]
    lik.cluster_blocks += len(tasks)
    # the results (sums, row constants) arrive as views into the workers' messages
    results = chain(first, (_aligned(r) for r in client.gather(client.compute(tasks))))
    return _checked_on_workers(zip(lik.row_chunks(chunk), results, strict=True),
                               [source for _, source in dask_rows])


def _first_then_threads(lik, data_pass: DataPass, args: tuple, chunks: Iterable[np.ndarray],
                        threads: int, first_alone: bool, *, consecutive: bool = True
                        ) -> Iterator[tuple[np.ndarray, typing.Any]]:
    """:func:`_on_threads` over ``chunks``, the first computed on the calling thread before
    the others start when ``first_alone`` (:func:`map_row_blocks`)."""
    chunks = iter(chunks)
    first = ([(idx, data_pass.block(idx, *args)) for idx in islice(chunks, 1)]
             if first_alone else [])
    return chain(first, _on_threads(lik, data_pass, args, chunks, threads,
                                    consecutive=consecutive))


def _checked_on_workers(blocks, sources: Sequence[RowSource]):
    """``blocks`` as they are, their rows marked as checked for NaN and infinities in each of
    ``sources``: the workers' copies of the sources checked the blocks they were handed
    (:meth:`~pymc_subsample.model.row_sources.RowSource.checked`)."""
    for idx, result in blocks:
        for source in sources:
            source.mark_checked(int(idx[0]), int(idx[-1]) + 1)
        yield idx, result
