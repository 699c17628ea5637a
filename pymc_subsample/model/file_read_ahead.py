"""Ask the kernel to read a memory-mapped ``.npy`` file ahead of a full-data pass.

A pass copies each block of rows out of the mapped file on a reader thread
(:meth:`pymc_subsample.model.row_sources.ArraySource.read_block`). Pages not in the page cache
are then read by page faults, a few at a time: 2.1 GB of a 10⁸ × 10 file came off the disk
at 0.42–0.55 GB/s that way, and at 0.94–1.02 GB/s (the disk's rate with large direct reads,
1.1 GB/s) when each block first asked the kernel for the next 64 MiB with
``posix_fadvise(..., POSIX_FADV_WILLNEED)`` (``docs/benchmarks.md``, "Zarr chunks without the
event loop"). The advice is a hint: it changes when pages are read, never what is read.
"""

from __future__ import annotations

import mmap
import os
import sys
import weakref

import numpy as np

__all__ = ["FileReadAhead"]

#: Bytes of the file asked for ahead of the block being copied (a pass's next ~13 blocks of
#: 65,536 rows of 10 float64).
AHEAD_BYTES = 64 * 2**20


class FileReadAhead:
    """Advises the kernel to read rows of a C-contiguous memory-mapped array ahead.

    Build it with :meth:`of`, which says ``None`` off Linux or for arrays whose rows are not
    laid out one after the other in the file.
    """

    def __init__(self, array: np.memmap) -> None:
        self._row_bytes = int(np.prod(array.shape[1:], dtype=np.int64)) * array.itemsize
        self._start = int(array.offset)
        self._end = self._start + array.shape[0] * self._row_bytes
        self._fd = os.open(array.filename, os.O_RDONLY)
        weakref.finalize(self, os.close, self._fd)
        self._advised = 0  # the file is asked for up to this byte

    @classmethod
    def of(cls, array: np.ndarray) -> FileReadAhead | None:
        """A read-ahead for ``array``, or None (not a whole memory-mapped ``.npy`` array)."""
        # the array np.memmap made over the file (its base the map itself), not a view of it,
        # whose offset would still be the file's
        if not (sys.platform == "linux" and isinstance(array, np.memmap)
                and isinstance(array.base, mmap.mmap) and array.filename is not None
                and array.flags.c_contiguous and array.ndim >= 1):
            return None
        return cls(array)

    def before_reading(self, stop: int) -> None:
        """Rows up to ``stop`` are about to be copied: ask for the bytes after them."""
        low = self._start + stop * self._row_bytes
        high = min(low + AHEAD_BYTES, self._end)
        if not low <= self._advised <= high:  # a new pass, or reads elsewhere
            self._advised = low
        if self._advised < high:
            os.posix_fadvise(self._fd, self._advised, high - self._advised,
                             os.POSIX_FADV_WILLNEED)
            self._advised = high
