r"""The automatic bound on many rows at a time, through the cells of a grid.

On tall data the rows' boxes are narrow and many rows share nearly the same box and data:
:class:`CellSuprema` encloses the row term's derivatives once per cell of a
:class:`~pymc_subsample.bounds.cell_grid.CellGrid` (made on a pass's first block, kept for its
other blocks and shared by its threads) and bounds each row from the cells its box meets,
with no interval evaluation of its own, except the few rows where refining at their own point
may gain most (``docs/methods/mhss.md``, "Automatic bounds").
:class:`~pymc_subsample.bounds.automatic.AutomaticFamily` asks it from
:data:`~pymc_subsample.bounds.automatic.GROUP_MIN_ROWS` rows at a time and falls back to
enclosing each row's box where it returns ``None``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

import numpy as np
from pytensor.graph.basic import Variable

from pymc_subsample.bounds.cell_grid import (
    MAX_COARSEN,
    CellFields,
    CellGrid,
    Locked,
    RowSpans,
    same_values,
)
from pymc_subsample.bounds.interval import (
    evaluate_intervals,
    magnitude,
    piece_boxes,
    piece_counts,
    undecided_comparisons,
)

__all__ = ["EVAL_ROWS", "CellSuprema"]

#: rows enclosed at a time: NumPy's temporaries of this many float64 (128 KiB) are reused
#: from the heap, where those of a whole 65,536-row chunk are fresh pages each time (four
#: times slower on the same work)
EVAL_ROWS = 16_384
#: rows are bounded through cells only when a block meets cells for at most this share of its
#: rows (or of the grid's first block's, if more), and at least this share of them has cells
#: (else no work saved)
GROUP_MAX_SHARE = 0.5
#: the cells' bounds may add at most this share to each sum of a block's suprema (each row
#: weighted as in its constant, :meth:`CellSuprema._rows_to_refine`): the rows where
#: refining may gain most are bounded at their own point until the rest may gain less
GROUP_SLACK = 0.15
#: boxes up to this many are enclosed with their centres in one interval evaluation, whose
#: cost is then mostly per op
MERGE_ROWS = 2_048


class CellSuprema(Locked):
    """The suprema of a row term's derivatives on many rows' boxes, through the cells of a
    grid kept per pass (:meth:`suprema`).

    Parameters
    ----------
    logp : Variable
        The row log-density ``f``, a graph of ``predictors``, ``data`` and constants.
    predictors, data : sequence of Variable
        As :class:`~pymc_subsample.bounds.automatic.AutomaticFamily`'s.
    conditions : sequence of Variable
        The comparisons of predictors each cell's box must decide where ``f`` reads them
        (:func:`~pymc_subsample.bounds.interval.undecided_comparisons`).
    pieces : int
        Parts a cell's box is bisected into along each predictor shared by every row (its
        box the row's, as wide as the region); half as many along one that varies between
        rows, where a cell is one step of a median box half-width. At 10⁶ rows, 4 parts
        along every axis (4³ on a zero-inflated negative binomial's cells: its first block
        alone 26,650 boxes, half the enclosures' CPU) against 4 × 2 × 2: the enclosures'
        CPU 5.1 → 2.8 s at the same rows per iteration (16.0–16.5 → 16.3); a hurdle negative
        binomial's 1.0 → 0.7 s, 38.1 → 42.1 rows per iteration (4 × 1 × 1: 51.0).
    """

    def __init__(self, logp: Variable, predictors: Sequence[Variable],
                 data: Sequence[Variable], conditions: Sequence[Variable],
                 pieces: int = 1) -> None:
        self._f = logp
        self._predictors = tuple(predictors)
        self._data = tuple(data)
        self._conditions = list(conditions)
        self.pieces = int(pieces)
        #: the cell grids of the current pass (:class:`~pymc_subsample.bounds.cell_grid.
        #: CellGrid`, or ``None`` where the rows have none), by order and the shared
        #: predictors' values
        self.grids: dict[tuple, CellGrid | None] = {}
        # pickled with the pass for a cluster's workers: the grids go too (made on the pass's
        # first block before the others are sent), the lock does not (Locked)
        self._lock = threading.Lock()

    def suprema(self, order: int, alphas: list[tuple[int, ...]], graphs: list[Variable],
                n_alpha: int, centres: list[np.ndarray], widths: list[np.ndarray],
                data: dict[Variable, np.ndarray], pieces: int,
                ) -> dict[tuple[int, ...], np.ndarray] | None:
        r"""``{α: S_α}`` per row through the cells of a grid (:class:`~pymc_subsample.bounds.
        cell_grid.CellGrid`), or ``None`` where the rows do not share cells.

        ``alphas``, ``graphs`` are :meth:`~pymc_subsample.bounds.automatic.AutomaticFamily.
        derivatives`'s, the first ``n_alpha`` of order ``order + 1``; ``centres``, ``widths``
        the rows' boxes per predictor; ``data`` the rows' data per variable; ``pieces`` the
        parts per axis of a row enclosed on its own box.

        The grid is made on the pass's first block of rows and kept for its other blocks,
        which may run in any order on any thread: what a block takes from the grid's cells,
        and whether it takes them at all, depends on its own rows only. The
        enclosures on each cell (its step along each predictor that varies between rows, the
        shared predictors' box, its data as exact values or an interval) are computed once,
        and a row is bounded from those of the cells its box meets (its *span*) and of the
        cell its centre :math:`\hat p_i` is in (its *home*, centre ``c``), with ``w_{ij}`` its
        box's half-widths and :math:`d_{ij} = |\hat p_{ij} - c_j|`:

        .. math::

            S_{\alpha,i} = \min\Big(\max_{\mathrm{span}} \sup |\partial^\alpha f|,\
            |\partial^\alpha f(c; Y)| + \sum_j d_{ij} \sup_{\mathrm{home}}
            |\partial_j \partial^\alpha f| + \sum_j w_{ij} \max_{\mathrm{span}}
            \sup |\partial_j \partial^\alpha f|\Big),

        where the first two terms of the second bound ``|∂^α f(p̂_i; y_i)|`` (mean-value
        theorem on the segment from ``c`` to ``p̂_i``, inside the home cell, for every ``y`` in
        its data interval ``Y``) and the last bounds ``|∂^α f|``'s change over the box. No
        row has an interval evaluation of its own. Where the home cell's data interval is
        wide (a continuous ``y``) the bound at the point may exceed what the row's own data
        give; the rows where that can matter most, weighted as in their constants, are
        refined one by one (:meth:`_rows_to_refine`, until the rest may add at most
        :data:`GROUP_SLACK` to each sum), with :math:`|\partial^\alpha f(\hat p_i; y_i)|`
        enclosed at their own point and data.

        A row whose span has a cell that leaves one of ``f``'s switches undecided or has no
        finite bound, whose box spans more than :data:`GROUP_MAX_SPAN` steps, or whose data
        are off the grid is enclosed on its own box, in ``pieces`` parts per axis, with the
        new cells (:meth:`enclose`).
        """
        n_rows = np.shape(centres[0])[0]
        grid, spans = self._grid(order, centres, widths, data, n_alpha, len(graphs) - n_alpha)
        if grid is None:
            return None
        # the block that made the grid has its spans already
        if spans is None:
            spans = RowSpans(grid, centres, widths, data)
        own, rows, first, home, dims = spans.own, spans.rows, spans.first, spans.home, spans.dims
        if rows.size < GROUP_MAX_SHARE * n_rows:
            return None  # most rows have no cells: no work saved
        keys = spans.keys
        unique, inverse = spans.unique_keys()
        ids, table = grid.lookup(unique)
        missing = unique[ids < 0]
        # the cells these rows meet, not the ones earlier blocks left to make: the choice is
        # then the block's own, the same whichever blocks ran before it (on another thread)
        # the cells a block meets grow slower than its rows: a pass's short last block met
        # about one a row (Beta at 10⁶: 17,218 on 16,960 rows, against 25,839 on the
        # grid's 65,536) and, enclosed row by row, took a fifth of the enclosures' time; the
        # share is of the grid's first block's rows at least (still the rows' own choice)
        if unique.size > GROUP_MAX_SHARE * max(n_rows, grid.first_rows):
            return None  # the cells would cost about as much as the rows
        # only the cells these rows meet: cells made ahead on the first block for later
        # blocks (each data value's steps widened by a tenth of the range) were 966 on a
        # zero-inflated negative binomial's first block at 10⁵ rows, whose rows met 641: the
        # same bounds without them, its enclosures 7.8 → 5.1–5.7 CPU s (docs/benchmarks.md)
        span = np.reshape(inverse, keys.shape)
        # a row whose span has a known cell with an undecided switch: on its own box (one
        # whose new cell has one: below, late)
        known = ids >= 0
        skip = np.zeros(rows.size, dtype=bool)
        if known.any():
            infinite = np.zeros(unique.size, dtype=bool)
            infinite[known] = ~np.isfinite(table[grid.fields.natural, ids[known]])
            skip = np.any(infinite[span], axis=0)
        own[rows[skip]] = True
        new, own_rows = self._enclose_with(alphas, graphs, n_alpha, grid, missing, own,
                                           centres, widths, data, pieces)
        if missing.size:
            added, table = grid.add(missing, new)
            ids[ids < 0] = added[np.searchsorted(missing, unique[ids < 0])]
        span = ids[span]
        home_ids = (span[np.ravel_multi_index(
            tuple(h - lo for h, lo in zip(home, first, strict=True)), dims),
            np.arange(rows.size)] if dims else span[0])
        best, box, lower, late = self._from_cells(alphas, n_alpha, grid, table, span,
                                                  home_ids, home, centres, widths, rows)
        # rows whose new cells turned out undecided: on their own box too, as if the cells
        # had been known (whether they were depends on the blocks before)
        late |= np.any(~np.isfinite(table[grid.fields.natural])[span], axis=0)
        late &= ~skip
        refine = np.flatnonzero(self._rows_to_refine(best, lower, [w[rows] for w in widths],
                                                     skip | late))
        eps = np.finfo(float).eps
        for start in range(0, refine.size, EVAL_ROWS):
            sub = refine[start : start + EVAL_ROWS]
            point = evaluate_intervals(
                graphs[:n_alpha], {**{p: c[rows[sub]] for p, c in zip(self._predictors,
                                                                      centres, strict=True)},
                                   **{v: d[rows[sub]] for v, d in data.items()}})
            for k, alpha in enumerate(alphas[:n_alpha]):
                bound = (magnitude(point[k]) + box[alpha][sub]) * (1.0 + 8.0 * eps)
                best[alpha][sub] = np.minimum(best[alpha][sub], np.nextafter(bound, np.inf))
        out = {alpha: np.empty(n_rows) for alpha in best}
        for alpha, value in best.items():
            out[alpha][rows] = value
            if own_rows:
                out[alpha][own] = own_rows[alpha]
        if late.any():
            again = np.zeros(n_rows, dtype=bool)
            again[rows[late]] = True
            _, values = self._enclose_with(alphas, graphs, n_alpha, grid, missing[:0], again,
                                           centres, widths, data, pieces)
            for alpha, value in values.items():
                out[alpha][again] = value
        return out

    @staticmethod
    def _from_cells(alphas, n_alpha, grid, table, span, home_ids, home, centres, widths, rows):
        """``S_α`` of the rows ``rows`` from their cells (:meth:`suprema`), the
        change over each row's box, the least each refined bound can be, and the rows with
        no finite bound from their cells; :data:`EVAL_ROWS` rows at a time (NumPy's
        temporaries then come from the heap: on a whole block this was 3.7 of an ordinal
        probit's 21.5 setup seconds at 10⁶ rows)."""
        if rows.size <= EVAL_ROWS:
            return CellSuprema._cells_chunk(alphas, n_alpha, grid, table, span, home_ids, home,
                                            centres, widths, rows)
        parts = [CellSuprema._cells_chunk(alphas, n_alpha, grid, table, span[:, at],
                                          home_ids[at], [h[at] for h in home], centres,
                                          widths, rows[at])
                 for at in (slice(s, s + EVAL_ROWS) for s in range(0, rows.size, EVAL_ROWS))]
        return (*({alpha: np.concatenate([p[m][alpha] for p in parts]) for alpha in parts[0][m]}
                  for m in range(3)),
                np.concatenate([p[3] for p in parts]))

    @staticmethod
    def _cells_chunk(alphas, n_alpha, grid, table, span, home_ids, home, centres, widths, rows):
        """:meth:`_from_cells` on one chunk of rows.

        Where the natural enclosure over a row's span is below the smallest normal float
        (``∂^α f = 0`` there, enclosed with its outward rounding: an ordinal row's derivatives
        in a cutpoint it does not read, a hurdle count's positive rows' mixed ones in ψ and
        μ), it is the row's ``S_α``: the centred form, which could only be smaller by less
        than that, is computed on the other rows alone, the same on them."""
        eps = np.finfo(float).eps
        # each row's centre less its home cell's (0 along a shared predictor)
        offset, late = [], np.zeros(rows.size, dtype=bool)
        varying = iter(home)
        for j, step in enumerate(grid.steps):
            if step is None:
                offset.append(None)
                continue
            c = (next(varying) + 0.5) * step
            t = centres[j][rows] - c
            # the segment from the home cell's centre stays in it (checked, not assumed)
            late |= (np.abs(t) * (1.0 + 4.0 * eps)
                     > 0.5 * step * (1.0 + 2.0**-40) + np.abs(c) * 2.0**-48)
            offset.append(t)
        everyone = _ChunkRows(grid, table, span, home_ids, offset,
                              [w[rows] for w in widths], alphas, n_alpha)
        selections = {}
        best, box, lower = {}, {}, {}
        for k, alpha in enumerate(alphas[:n_alpha]):
            natural = everyone.on_span(grid.fields.natural + k)
            vanishes = natural < np.finfo(float).tiny
            if not vanishes.any():
                best[alpha], box[alpha], lower[alpha] = everyone.centred(k, alpha, natural)
            else:
                # rows alike in which α's vanish (a class of an ordinal) share a selection
                picked = np.flatnonzero(~vanishes)
                key = picked.tobytes()
                if key not in selections:
                    selections[key] = everyone.subset(picked)
                best[alpha] = natural
                box[alpha], lower[alpha] = np.zeros(rows.size), np.zeros(rows.size)
                if picked.size:
                    for out, part in zip((best, box, lower),
                                         selections[key].centred(k, alpha, natural[picked]),
                                         strict=True):
                        out[alpha][picked] = part
            late |= ~np.isfinite(best[alpha])
        return best, box, lower, late

    def _enclose_with(self, alphas, graphs, n_alpha, grid, cells, own, centres, widths, data,
                      pieces):
        """The table rows of the cells ``cells`` and the suprema of the rows ``own`` on
        their own boxes (``pieces`` parts per axis), in one interval evaluation
        (:meth:`enclose`): ``S_α`` is the smaller of the natural enclosure and the
        mean-value form at the row's own point."""
        at = np.flatnonzero(own)
        parts = []
        for start in range(0, cells.size, EVAL_ROWS):
            groups = [(*grid.hulls(cells[start : start + EVAL_ROWS]),
                       tuple(max(1, self.pieces // 2) if value is None else self.pieces
                             for value in grid.shared))]
            if at.size and start + EVAL_ROWS >= cells.size:  # the rows with the last part
                groups.append(([c[at] for c in centres], [w[at] for w in widths],
                               [d[at] for d in data.values()], pieces))
            parts.extend(self.enclose(graphs, n_alpha, groups))
        if at.size and not cells.size:
            parts.extend(self.enclose(graphs, n_alpha, [([c[at] for c in centres],
                                                [w[at] for w in widths],
                                                [d[at] for d in data.values()], pieces)]))
        table_rows = np.concatenate(
            [grid.table_rows(*part) for part in parts[: len(parts) - bool(at.size)]]
            or [np.empty((grid.fields.size, 0))], axis=1)
        suprema = {}
        if at.size:
            sup, _, point = parts[-1]
            eps = np.finfo(float).eps
            for k, alpha in enumerate(alphas[:n_alpha]):
                bound = magnitude(point[k])
                for j, w in enumerate(widths):
                    beta = tuple(a + (i == j) for i, a in enumerate(alpha))
                    bound = bound + w[at] * sup[n_alpha + alphas[n_alpha:].index(beta)]
                with np.errstate(invalid="ignore", over="ignore"):
                    bound = np.nextafter(bound * (1.0 + 8.0 * eps), np.inf)
                    suprema[alpha] = np.where(np.isfinite(sup[k]),
                                              np.minimum(sup[k], bound), np.inf)
        return table_rows, suprema

    def enclose(self, graphs: list[Variable], n_alpha: int, groups: list[tuple]) -> list[tuple]:
        """For each group ``(centres, half-widths, data, pieces)`` of boxes: ``sup |g|`` on
        each box for every derivative graph (the largest over its parts, ``pieces`` per axis
        or ``pieces[j]`` along axis ``j`` (:func:`~pymc_subsample.bounds.interval.piece_boxes`);
        infinite where a switch of ``f`` is undecided on a part) and the enclosures of the
        ``|α| = order + 1`` ones at its centre; the groups' boxes enclosed together (one
        interval evaluation when they are few: its cost is mostly per op)."""
        lows = {p: [] for p in self._predictors}
        highs = {p: [] for p in self._predictors}
        values = {v: [] for v in self._data}
        layout = []
        for centres, halves, data, pieces in groups:
            n_parts = math.prod(piece_counts(pieces, len(self._predictors)))
            n = np.shape(centres[0])[0]
            for p, (lo, hi) in zip(self._predictors, piece_boxes(centres, halves, pieces),
                                   strict=True):
                lows[p].append(lo)
                highs[p].append(hi)
            for v, d in zip(self._data, data, strict=True):
                values[v].append(tuple(np.tile(x, n_parts) for x in d)
                                 if isinstance(d, tuple) else np.tile(d, n_parts))
            layout.append((n, n_parts, centres, data))
        n_boxes = sum(n * m for n, m, _, _ in layout)
        n_points = sum(n for n, _, _, _ in layout)
        merged = n_points <= MERGE_ROWS
        if merged:  # the centres as exact points after the boxes
            for _, _, centres, data in layout:
                for p, c in zip(self._predictors, centres, strict=True):
                    lows[p].append(c)
                    highs[p].append(c)
                for v, d in zip(self._data, data, strict=True):
                    values[v].append(d)
        boxes = {p: (np.concatenate(lows[p]), np.concatenate(highs[p]))
                 for p in self._predictors}
        inputs = {**boxes, **{v: _joined(parts) for v, parts in values.items()}}
        out = evaluate_intervals(graphs, inputs)
        total = n_boxes + (n_points if merged else 0)
        sup = [np.broadcast_to(magnitude(e), (total,)) for e in out]
        undecided = np.zeros(n_boxes, dtype=bool)
        if self._conditions:
            # only where the row reads them: a censored row's log-CDF, not its density
            box_inputs = {v: (x[0][:n_boxes], x[1][:n_boxes]) if isinstance(x, tuple)
                          else x[:n_boxes] for v, x in inputs.items()}
            undecided = np.broadcast_to(undecided_comparisons(self._f, box_inputs,
                                                              self._conditions), (n_boxes,))
        if merged:
            points = [(np.broadcast_to(e[0], (total,))[n_boxes:],
                       np.broadcast_to(e[1], (total,))[n_boxes:]) for e in out[:n_alpha]]
        else:
            point_inputs = {}
            for p in self._predictors:
                c = np.concatenate([centres[list(self._predictors).index(p)]
                                    for _, _, centres, _ in layout])
                point_inputs[p] = c
            for v in self._data:
                k = list(self._data).index(v)
                point_inputs[v] = _joined([data[k] for _, _, _, data in layout])
            points = [(np.broadcast_to(e[0], (n_points,)), np.broadcast_to(e[1], (n_points,)))
                      for e in evaluate_intervals(graphs[:n_alpha], point_inputs)]
        results = []
        box_at = point_at = 0
        for n, m, _, _ in layout:
            part = slice(box_at, box_at + n * m)
            bad = undecided[part].reshape(m, n).any(axis=0)
            group_sup = [np.where(bad, np.inf, s[part].reshape(m, n).max(axis=0)) for s in sup]
            # the next order's enclosures (not only their magnitudes): the centred form
            slopes = [(np.where(bad, -np.inf, np.broadcast_to(e[0], (total,))[part]
                                .reshape(m, n).min(axis=0)),
                       np.where(bad, np.inf, np.broadcast_to(e[1], (total,))[part]
                                .reshape(m, n).max(axis=0))) for e in out[n_alpha:]]
            pts = [(lo[point_at : point_at + n], hi[point_at : point_at + n])
                   for lo, hi in points]
            results.append((group_sup, slopes, pts))
            box_at += n * m
            point_at += n
        return results

    @staticmethod
    def _rows_to_refine(best, lower, widths, skip) -> np.ndarray:
        """The rows :meth:`suprema` bounds at their own point: the fewest, by
        largest weighted gain first, whose refinement leaves each ``α``'s possible gain over
        the other rows at most :data:`GROUP_SLACK` of ``Σ_i v_i S_i``. A row's possible gain
        is ``v_i (S_i − L_i)`` with ``L_i`` the least its refined bound can be and
        ``v_i = Π_j w_ij^{α_j}`` its factor in its constant."""
        n_rows = np.shape(skip)[0]
        shares = []
        powers: dict[tuple[int, int], np.ndarray] = {}  # each w_j^a once
        for alpha, upper in best.items():
            weight = np.ones(n_rows)
            for j, (a, w) in enumerate(zip(alpha, widths, strict=True)):
                if a:
                    if (j, a) not in powers:
                        powers[j, a] = w**a
                    weight = weight * powers[j, a]
            with np.errstate(invalid="ignore"):
                weight = np.where(skip, 0.0, weight)
                total = float(np.sum(np.where(skip, 0.0, weight * upper)))
                gain = np.where(skip, 0.0, weight * np.maximum(upper - lower[alpha], 0.0))
            shares.append(gain / total if total > 0.0 else np.zeros(n_rows))
        shares = np.array(shares)
        if np.all(shares.sum(axis=1) <= GROUP_SLACK):
            return np.zeros(n_rows, dtype=bool)
        by_gain = np.argsort(shares.max(axis=0), kind="stable")
        kept = np.all(np.cumsum(shares[:, by_gain], axis=1) <= GROUP_SLACK, axis=0)
        n_kept = n_rows if kept.all() else int(np.argmin(kept))
        refine = np.zeros(n_rows, dtype=bool)
        refine[by_gain[n_kept:]] = True
        return refine & ~skip

    def _grid(self, order, centres, widths, data, n_alpha, n_beta
              ) -> tuple[CellGrid | None, RowSpans | None]:
        """The pass's cell grid (made from the first block that asks, kept while the shared
        predictors keep their values), or ``None`` where there is none, and, to the block that
        made it, that block's :class:`RowSpans` on it (else ``None``). The pass computes its
        first block before it hands out the others (``first_alone`` of
        :func:`~pymc_subsample.model.cluster.map_row_blocks`), so the grid is that block's
        whichever thread or worker computes the rest."""
        shared = tuple((float(c[0]), float(w[0])) for c, w in zip(centres, widths, strict=True)
                       if same_values(c) and same_values(w))
        key = (order, shared)
        with self._lock:
            if key not in self.grids:
                if len(self.grids) >= 4:  # another pass (another θ): the old cells are done
                    self.grids.clear()
                fields = CellFields(0, n_alpha, n_alpha + n_beta, n_alpha + 3 * n_beta,
                                 3 * n_alpha + 3 * n_beta)
                # steps of a median box's width, doubled until the block meets few enough
                # cells: the boxes narrow like 1/√N, and at 4·10⁶ rows a Beta regression's
                # first block met more cells than half its rows (every row then enclosed on
                # its own box: 124 s of passes)
                spans = None
                for coarsen in range(MAX_COARSEN + 1):
                    grid = CellGrid.from_rows(centres, widths, list(data.values()), fields,
                                              coarsen)
                    if grid is None:
                        break
                    spans = RowSpans(grid, centres, widths, data)
                    if spans.fit(GROUP_MAX_SHARE):
                        break
                self.grids[key] = grid
                return grid, spans
            return self.grids[key], None


def _joined(parts: list) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Data values of several groups of boxes in one: arrays, or ``(lo, hi)`` where any
    group has an interval."""
    if not any(isinstance(x, tuple) for x in parts):
        return np.concatenate([np.asarray(x) for x in parts])
    pairs = [x if isinstance(x, tuple) else (x, x) for x in parts]
    return (np.concatenate([np.asarray(lo, dtype=np.float64) for lo, _ in pairs]),
            np.concatenate([np.asarray(hi, dtype=np.float64) for _, hi in pairs]))


class _ChunkRows:
    """A chunk's rows (or some of them) bounded from their cells: their span, home cell,
    offset from its centre and box half-widths (:meth:`CellSuprema._cells_chunk`)."""

    def __init__(self, grid, table, span, home_ids, offset, widths, alphas, n_alpha) -> None:
        self.grid, self.table, self.span, self.home_ids = grid, table, span, home_ids
        self.offset, self.widths = offset, widths
        # per varying predictor, once for all α: the offset's sign and size
        self.ahead = [None if t is None else t >= 0.0 for t in offset]
        self.size_of = [None if t is None else np.abs(t) for t in offset]
        self.alphas, self.n_alpha = alphas, n_alpha
        self.index = {beta: m for m, beta in enumerate(alphas[n_alpha:])}
        self._spread: dict = {}
        self._slopes: dict = {}

    def subset(self, picked: np.ndarray) -> _ChunkRows:
        """The rows ``picked`` of these."""
        return _ChunkRows(self.grid, self.table, self.span[:, picked], self.home_ids[picked],
                          [None if t is None else t[picked] for t in self.offset],
                          [w[picked] for w in self.widths], self.alphas, self.n_alpha)

    def on_span(self, field: int) -> np.ndarray:
        """The largest of a table row over each row's span."""
        values = self.table[field]
        out = values[self.span[0]]
        for m in range(1, self.span.shape[0]):
            np.maximum(out, values[self.span[m]], out=out)
        return out

    def spread(self, beta) -> np.ndarray:
        """``sup |∂^β f|`` over each row's span (each β once)."""
        if beta not in self._spread:
            self._spread[beta] = self.on_span(self.grid.fields.gradient + self.index[beta])
        return self._spread[beta]

    def slope(self, beta):
        """The home cell's enclosure of ``∂^β f`` and its magnitude (only the β a varying
        predictor's centred form reads, each once)."""
        if beta not in self._slopes:
            m, n_beta = self.index[beta], len(self.index)
            g_lo = self.table[self.grid.fields.slope + m][self.home_ids]
            g_hi = self.table[self.grid.fields.slope + n_beta + m][self.home_ids]
            self._slopes[beta] = g_lo, g_hi, np.maximum(np.abs(g_lo), np.abs(g_hi))
        return self._slopes[beta]

    def centred(self, k: int, alpha, natural: np.ndarray):
        """``S_α`` (the smaller of ``natural`` and the centred form,
        :meth:`CellSuprema.suprema`), the change over each row's box, and the least each
        refined bound can be."""
        fields, eps = self.grid.fields, np.finfo(float).eps
        lo = self.table[fields.point + k][self.home_ids]
        hi = self.table[fields.point + self.n_alpha + k][self.home_ids]
        size = np.maximum(np.abs(lo), np.abs(hi))
        change = None
        with np.errstate(invalid="ignore", over="ignore"):
            for j, w in enumerate(self.widths):
                beta = tuple(a + (i == j) for i, a in enumerate(alpha))
                term = w * self.spread(beta)
                change = term if change is None else np.add(change, term, out=change)
                if self.offset[j] is None:
                    continue
                # ∂^α f(p̂) ∈ ∂^α f(c) + (p̂_j − c_j) ∂_j∂^α f(home cell) (centred form)
                t = self.offset[j]
                g_lo, g_hi, g_size = self.slope(beta)
                np.add(lo, t * np.where(self.ahead[j], g_lo, g_hi), out=lo)
                np.add(hi, t * np.where(self.ahead[j], g_hi, g_lo), out=hi)
                np.add(size, self.size_of[j] * g_size, out=size)
            # outward past the rounding of these few sums and products
            slack = 8.0 * eps * size + 2.0**-1070
            np.subtract(lo, slack, out=lo)
            np.add(hi, slack, out=hi)
            lo_size, hi_size = np.abs(lo), np.abs(hi)
            # rounded up: a sum of bounds is a bound in exact arithmetic
            bound = (np.maximum(lo_size, hi_size) + change) * (1.0 + 8.0 * eps)
            best = np.minimum(natural, np.nextafter(bound, np.inf))
            # the least the row's refined bound may be
            least = np.where((lo > 0.0) | (hi < 0.0), np.minimum(lo_size, hi_size), 0.0)
        return best, change, least + change
