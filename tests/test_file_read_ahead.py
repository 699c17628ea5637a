"""The kernel asked to read a memory-mapped .npy ahead of a pass (model/file_read_ahead.py):
the rows unchanged, the advice only for whole mapped arrays, each byte asked for once a pass."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from pymc_subsample.model import file_read_ahead
from pymc_subsample.model.file_read_ahead import FileReadAhead
from pymc_subsample.model.row_sources import as_row_source

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="posix_fadvise: Linux")


def test_blocks_of_a_pass_advise_the_bytes_after_them_once(tmp_path, monkeypatch):
    ref = np.random.default_rng(7).normal(size=(1000, 3))
    np.save(tmp_path / "a.npy", ref)
    monkeypatch.setattr(file_read_ahead, "AHEAD_BYTES", 500 * 24)  # more than a block
    asked = []
    advise = os.posix_fadvise
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, start, size, how: asked.append(
        (start, size)) or advise(fd, start, size, how))
    source = as_row_source(tmp_path / "a.npy")
    header = int(source.array.offset)
    for _ in range(2):  # two passes
        asked.clear()
        rows = [source.read_block(np.arange(s, min(s + 300, 1000))) for s in range(0, 1000, 300)]
        np.testing.assert_array_equal(np.concatenate(rows), ref)
        # each byte after the first block up to the end, asked for once, in order
        starts = [header + 300 * 24] + [start + size for start, size in asked[:-1]]
        assert [start for start, _ in asked] == starts
        assert sum(size for _, size in asked) == (1000 - 300) * 24
    assert FileReadAhead.of(source.array[10:]) is None
    assert FileReadAhead.of(ref) is None
