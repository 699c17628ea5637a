r"""The cells of a grid shared by a pass's blocks of rows, and their enclosures' table.

On tall data the boxes of the automatic bound (:mod:`~pymc_subsample.bounds.automatic`) are
narrow and many rows have nearly the same box and data. A :class:`CellGrid` splits the
predictors' and the data's space into cells, made on a pass's first block of rows and kept for
its other blocks: along a predictor that varies between rows a step of about a box's width
(wider where the first block's rows would otherwise meet too many cells: :class:`RowSpans`),
along one shared by every row (one σ for all) that row's box, and the data as exact values or
bins. :class:`~pymc_subsample.bounds.cell_suprema.CellSuprema` encloses the row term's
derivatives once per cell and keeps them in the grid's table, from which each row is bounded
(``docs/methods/mhss.md``, "Automatic bounds").
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np

__all__ = ["GROUP_MAX_SPAN", "MAX_COARSEN", "CellFields", "CellGrid", "Locked", "RowSpans",
           "same_values"]

#: a cell's step along a predictor that varies between rows, in the first block's median box
#: half-widths
GROUP_WIDTH = 1.0
#: a row whose box meets more steps than this along a predictor is enclosed on its own
GROUP_MAX_SPAN = 8
#: most doublings of the step a grid takes to fit its first block (:meth:`CellGrid.from_rows`)
MAX_COARSEN = 5
#: bins of a continuous data column (equal counts in the first block), besides its frequent
#: values' own: at N = 10⁶ Beta's suprema took 3.5 processor seconds with 128 bins against
#: 4.9 with 64 (fewer rows refined at their own point, the same expected rows per
#: iteration); 256 made the first block's new cells too many for the grid (every row then
#: enclosed on its own)
GROUP_QUANTILES = 128
#: a continuous column's bins wider than this many times their median width (its tails') are
#: split
GROUP_TAIL_WIDTH = 4.0
#: a data value on at least this share of the first block's rows (a censoring bound) is a cell
#: of its own
GROUP_EXACT_SHARE = 1.0 / 256.0


def same_values(values: np.ndarray) -> bool:
    """Whether every row has the same value (one σ for all rows)."""
    return bool(values[0] == values[-1]) and bool(np.all(values == values[0]))


def _bits(values: np.ndarray) -> np.ndarray:
    """An exact data column as int64 keys: its integers, or its floats' bit patterns."""
    if np.issubdtype(values.dtype, np.floating):
        return values.astype(np.float64).view(np.int64)
    return values.astype(np.int64)


def _recode(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """One code per row for its tuple of int64 keys (``0, 1, ...`` in sorted order), and
    one row of each code."""
    order = np.lexsort(columns[::-1])
    ordered = [c[order] for c in columns]
    starts = np.ones(order.size, dtype=bool)
    if order.size:
        starts[1:] = np.any([c[1:] != c[:-1] for c in ordered], axis=0)
    codes = np.empty(order.size, dtype=np.int64)
    codes[order] = np.cumsum(starts) - 1
    return codes, order[starts]


class Locked:
    """An object whose threads share it under its ``_lock``: pickled (sent to a worker process
    with its pass) without the lock, which is not picklable, and given a new one."""

    _lock: threading.Lock

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_lock"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


class CellFields(NamedTuple):
    """Where each quantity starts among the rows of a :class:`CellGrid`'s table."""

    natural: int  # sup |∂^α f| on the cell (natural enclosure), |α| = order + 1
    gradient: int  # sup |∂^β f| on the cell, |β| = order + 2
    slope: int  # the enclosures of ∂^β f on the cell: lower ends, then upper ends
    point: int  # the enclosures of ∂^α f at the cell's centre: lower ends, then upper ends
    size: int


class CellGrid(Locked):
    """Cells of the predictors' and the data's space, the same for every block of rows of a
    pass, and the enclosures on each
    (:meth:`~pymc_subsample.bounds.cell_suprema.CellSuprema.suprema`).

    Along a predictor that varies between rows a cell is a step ``[k s, (k + 1) s]``, ``s``
    :data:`GROUP_WIDTH` times the first block's median box half-width, doubled ``coarsen``
    times where the first block would meet too many cells; along one the same on
    every row (one σ for all) it is that row's box. Its data are exact (an integer, a flag,
    a float column with at most :data:`GROUP_QUANTILES` values, a frequent value), or one of
    about :data:`GROUP_QUANTILES` bins of a continuous column (equal counts in the first
    block, the tails' split to at most :data:`GROUP_TAIL_WIDTH` median bin widths, and two
    more such bins past each end), taken as an interval. A row's box is covered by the cells
    of its data whose steps it meets (its *span*).

    A cell is keyed by one int64: its data's code (the tuples of data keys in order of first
    sight), then its step along each varying predictor. The cells' enclosures are computed
    once (:meth:`~pymc_subsample.bounds.cell_suprema.CellSuprema.enclose`) and kept in a table,
    shared by the pass's threads under a lock (a cell two threads compute at once is kept
    once).
    """

    #: bits of a cell key for its data's code
    CODE_BITS = 20

    def __init__(self, steps: list, shared: list, columns: list, fields: CellFields,
                 first_rows: int, coarsen: int = 0) -> None:
        self.first_rows = first_rows  # the rows of the block the grid was made from
        self.coarsen = coarsen  # doublings of the steps (from_rows)
        self.steps = steps  # per predictor: the step, None for one shared by every row
        self.shared = shared  # the shared predictors' (value, half-width)
        self.columns = columns  # per data column: None (exact), or (bin edges, frequent)
        self.fields = fields
        n_varying = sum(s is not None for s in steps)
        #: bits of a cell key per varying predictor's step, and the largest |step| it holds
        self.step_bits = (63 - self.CODE_BITS) // max(n_varying, 1)
        self.max_step = 2 ** (self.step_bits - 1) - 2 * GROUP_MAX_SPAN
        self._lock = threading.Lock()
        self._codes: dict[bytes, int] = {}
        # per data column, each code's value (exact) or interval (binned)
        self._data_lo: list[list] = [[] for _ in columns]
        self._data_hi: list[list] = [[] for _ in columns]
        self._keys = np.empty(0, dtype=np.int64)  # sorted
        self._ids = np.empty(0, dtype=np.int64)
        # one row per field, one column per cell (a field's values contiguous for gathers)
        self._table = np.empty((fields.size, 0))

    @property
    def n_cells(self) -> int:
        """How many cells have enclosures in the table."""
        return self._table.shape[1]

    @classmethod
    def from_rows(cls, centres, widths, data, fields: CellFields,
                  coarsen: int = 0) -> CellGrid | None:
        """The grid of a pass, from its first block's rows, its steps doubled ``coarsen``
        times; ``None`` where a step is not positive and finite, or more than two predictors
        vary between rows."""
        steps, shared = [], []
        for c, w in zip(centres, widths, strict=True):
            if same_values(c) and same_values(w):
                steps.append(None)
                shared.append((float(c[0]), float(w[0])))
                continue
            step = GROUP_WIDTH * 2.0**coarsen * float(np.median(w))
            if not (step > 0.0 and np.isfinite(step)):
                return None
            steps.append(step)
            shared.append(None)
        if sum(s is not None for s in steps) > 2:
            return None
        columns = []
        for d in data:
            d = np.asarray(d)
            unique, counts = np.unique(d, return_counts=True)
            if unique.size <= GROUP_QUANTILES or not np.issubdtype(d.dtype, np.floating):
                columns.append(None)
                continue
            frequent = unique[counts >= GROUP_EXACT_SHARE * d.size]
            rest = np.isfinite(unique) & ~np.isin(unique, frequent)
            values, counts = unique[rest], counts[rest]
            if values.size < 2:
                columns.append(None)
                continue
            # equal-count edges at data values, the first and the last among them
            before = np.cumsum(counts) - counts
            picks = np.searchsorted(before, np.linspace(0, before[-1], GROUP_QUANTILES + 1),
                                    side="right") - 1
            edges = np.unique(np.concatenate([values[picks], values[-1:]]))
            # the tails' bins split, and two more past each end (a later block's extremes)
            most = GROUP_TAIL_WIDTH * float(np.median(np.diff(edges)))
            if most > 0.0:
                parts = np.ceil(np.diff(edges) / most).astype(np.int64)
                edges = np.unique(np.concatenate(
                    [edges[:1] - most * np.arange(2, 0, -1), edges[-1:] + most * np.arange(3),
                     *(np.linspace(a, b, n, endpoint=False)
                       for a, b, n in zip(edges[:-1], edges[1:], parts, strict=True))]))
            columns.append((edges, frequent))
        return cls(steps, shared, columns, fields, int(np.shape(centres[0])[0]), coarsen)

    def data_codes(self, data: list[np.ndarray], n_rows: int) -> np.ndarray:
        """Each of the ``n_rows`` rows' data code (``-1`` where its data are off the grid: a
        continuous value beyond the bins), new codes numbered (at most ``2**CODE_BITS``); a
        row term that reads no data (a mixture's ``y − μ_k`` are its predictors) has one code.
        """
        on_grid = np.ones(n_rows, dtype=bool)
        keys, hulls = [], []
        for d, column in zip(data, self.columns, strict=True):
            d = np.asarray(d)
            if column is None:
                keys.append(_bits(d))
                hulls.append(None)
                continue
            edges, frequent = column
            code = np.searchsorted(edges, d, side="right") - 1
            code = np.where(d == edges[-1], edges.size - 2, code)
            fine = (code >= 0) & (code < edges.size - 1)
            if frequent.size:
                where = np.minimum(np.searchsorted(frequent, d), frequent.size - 1)
                is_frequent = frequent[where] == d
                code = np.where(is_frequent, edges.size + where, code)
                fine |= is_frequent
            on_grid &= fine
            keys.append(np.where(fine, code, -1).astype(np.int64))
            hulls.append(code)
        rows = np.flatnonzero(on_grid)
        codes = np.full(n_rows, -1, dtype=np.int64)
        if rows.size == 0:
            return codes
        if not keys:
            keys = [np.zeros(n_rows, dtype=np.int64)]
        inverse, first = _recode([k[rows] for k in keys])
        names = np.column_stack([k[rows[first]] for k in keys])
        with self._lock:
            found = []
            for name, row in zip(names, rows[first], strict=True):
                code = self._codes.get(name.tobytes())
                if code is None:
                    code = len(self._codes)
                    if code >= 2**self.CODE_BITS:
                        code = -1
                    else:
                        self._codes[name.tobytes()] = code
                        self._add_data_hull(data, hulls, row)
                found.append(code)
        codes[rows] = np.array(found, dtype=np.int64)[inverse]
        return codes

    def _add_data_hull(self, data, bins, row: int) -> None:
        """The data of a new code (``row`` has them): exact values, or a bin's ends."""
        for m, (d, column, b) in enumerate(zip(data, self.columns, bins, strict=True)):
            value = np.asarray(d)[row]
            if column is None:
                self._data_lo[m].append(value)
                self._data_hi[m].append(value)
                continue
            edges, _ = column
            if b[row] < edges.size - 1:
                value, upper = edges[b[row]], edges[b[row] + 1]
            else:  # a frequent value, exact
                upper = value
            self._data_lo[m].append(float(value))
            self._data_hi[m].append(float(upper))

    def keys(self, codes: np.ndarray, steps_at: list[np.ndarray]) -> np.ndarray:
        """The int64 keys of the cells of these data codes and steps."""
        key = codes.astype(np.int64)
        offset = 2 ** (self.step_bits - 1)
        for k in steps_at:
            key = (key << self.step_bits) | (k + offset)
        return key

    def hulls(self, keys: np.ndarray) -> tuple[list, list, list]:
        """The boxes of the cells ``keys``: centres, half-widths and data (exact arrays, or
        ``(lo, hi)`` for a binned column) per predictor and column."""
        varying = [j for j, s in enumerate(self.steps) if s is not None]
        offset = 2 ** (self.step_bits - 1)
        mask = 2**self.step_bits - 1
        steps_at = {}
        rest = keys.copy()
        for j in reversed(varying):
            steps_at[j] = (rest & mask) - offset
            rest >>= self.step_bits
        codes = rest
        centres, halves = [], []
        for j, (step, shared) in enumerate(zip(self.steps, self.shared, strict=True)):
            if step is None:
                centres.append(np.full(keys.size, shared[0]))
                halves.append(np.full(keys.size, shared[1]))
                continue
            c = (steps_at[j] + 0.5) * step
            centres.append(c)
            # [k s, (k + 1) s] in exact arithmetic, past a few roundings of c
            halves.append(0.5 * step * (1.0 + 2.0**-40) + np.abs(c) * 2.0**-48)
        with self._lock:
            data = []
            for m, column in enumerate(self.columns):
                lo = np.asarray(self._data_lo[m])[codes]
                if column is None:
                    data.append(lo)
                else:
                    data.append((lo.astype(np.float64),
                                 np.asarray(self._data_hi[m], dtype=np.float64)[codes]))
        return centres, halves, data

    def table_rows(self, sup: list[np.ndarray], slopes: list, points: list) -> np.ndarray:
        """The table's columns for cells with these suprema (every derivative graph's, in
        :meth:`~pymc_subsample.bounds.automatic.AutomaticFamily.derivatives`'s order),
        enclosures of the next order's and enclosures at their centres."""
        return np.array([*sup, *(lo for lo, _ in slopes), *(hi for _, hi in slopes),
                         *(lo for lo, _ in points), *(hi for _, hi in points)],
                        dtype=np.float64).reshape(self.fields.size, -1)

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The table columns of the cells ``keys`` (sorted, unique; ``-1`` for one not in the
        table yet) and the table."""
        with self._lock:
            at = np.minimum(np.searchsorted(self._keys, keys), max(self._keys.size - 1, 0))
            found = (np.where(self._keys[at] == keys, self._ids[at], -1) if self._keys.size
                     else np.full(keys.size, -1, dtype=np.int64))
            return found, self._table

    def add(self, keys: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Keep the enclosures ``rows`` (:meth:`table_rows`) of the cells ``keys`` (sorted,
        unique): their columns in the table, and the table."""
        with self._lock:
            # a cell another thread added meanwhile keeps its first table row
            known, table = self._keys, self._table
            at = np.minimum(np.searchsorted(known, keys), max(known.size - 1, 0))
            old = (known[at] == keys) if known.size else np.zeros(keys.size, dtype=bool)
            ids = np.where(old, self._ids[at] if known.size else -1,
                           table.shape[1] + np.cumsum(~old) - 1)
            self._table = np.concatenate([table, rows[:, ~old]], axis=1)
            merged = np.concatenate([known, keys[~old]])
            order = np.argsort(merged, kind="stable")
            self._keys = merged[order]
            self._ids = np.concatenate([self._ids, ids[~old]])[order]
            return ids, self._table


class RowSpans:
    """The cells each row's box meets on a grid
    (:meth:`~pymc_subsample.bounds.cell_suprema.CellSuprema.suprema`): along each varying
    predictor its first step and their count, and the step of its centre (*home*),
    for the rows with cells (``rows``; ``own`` marks the others: data off the grid, a shared
    predictor's box not the grid's, a box over more than :data:`GROUP_MAX_SPAN` steps), and
    each ``(offset, row)``'s cell key."""

    def __init__(self, grid: CellGrid, centres, widths, data) -> None:
        n_rows = np.shape(centres[0])[0]
        codes = grid.data_codes(list(data.values()), n_rows)
        own = codes < 0
        first, count, home = [], [], []
        for j, shared in enumerate(grid.shared):
            if shared is not None:
                own |= (centres[j] != shared[0]) | (widths[j] != shared[1])
                continue
            step, c, w = grid.steps[j], centres[j], widths[j]
            with np.errstate(invalid="ignore", over="ignore"):
                # widened past the rounding of the quotients: the steps cover the box
                margin = 2.0**-30 * (1.0 + (np.abs(c) + w) / step)
                lo = np.floor((c - w) / step - margin)
                hi = np.floor((c + w) / step + margin)
                fine = (np.isfinite(lo) & np.isfinite(hi) & (np.abs(lo) < grid.max_step)
                        & (np.abs(hi) < grid.max_step) & (hi - lo < GROUP_MAX_SPAN))
                at = np.clip(np.floor(c / step), lo, hi)
            own |= ~fine
            first.append(np.where(fine, lo, 0.0).astype(np.int64))
            count.append(np.where(fine, hi - lo + 1.0, 1.0).astype(np.int64))
            home.append(np.where(fine, at, 0.0).astype(np.int64))
        self.n_rows, self.own = n_rows, own
        self.rows = rows = np.flatnonzero(~own)
        self.first = [lo[rows] for lo in first]
        self.count = [n[rows] for n in count]
        self.home = [h[rows] for h in home]
        self.dims = tuple(int(n.max()) if rows.size else 1 for n in self.count)
        codes = codes[rows]
        # each (offset, row)'s cell (the last step spanned past the row's count: a repeat)
        self.keys = np.stack([grid.keys(codes, [lo + np.minimum(d, n - 1)
                                                for lo, n, d in zip(self.first, self.count,
                                                                    offset, strict=True)])
                              for offset in np.ndindex(*self.dims)])
        self._unique: tuple[np.ndarray, np.ndarray] | None = None

    def unique_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """The distinct cells the rows meet (sorted keys) and where each of :attr:`keys` is
        among them (``np.unique`` with ``return_inverse``, computed once)."""
        if self._unique is None:
            self._unique = np.unique(self.keys, return_inverse=True)
        return self._unique

    def fit(self, share: float) -> bool:
        """Whether at least ``share`` of the rows have cells and the cells they meet are at
        most ``share`` of the rows (the rows then share cells)."""
        return (self.rows.size >= share * self.n_rows
                and self.unique_keys()[0].size <= share * self.n_rows)
