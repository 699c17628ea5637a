r"""Automatic bounds: the suprema of a row's partial derivatives from its own graph.

A row term ``f(p_1, ..., p_K; data_i)`` whose parameters enter through ``K`` predictors affine
in ``θ`` (``docs/methods/mhss.md``, "Automatic bounds") needs, for the
order-``k`` control variates on the region ``‖φ‖ ≤ r``, per row and per multi-index ``α`` with
``|α| = k + 1``,

.. math::

    S_{\alpha,i} \ge \sup \{ |\partial^\alpha f(u; \mathrm{data}_i)| : u \in B_i \}, \qquad
    B_i = \prod_j [\hat p_{ij} - r s_{ij},\ \hat p_{ij} + r s_{ij}],

which :func:`~pymc_subsample.bounds.family.combine_multi_partials` turns into the row's
constant (the same combination the hand-derived location–scale families use). Here
``∂^α f`` is PyTensor's symbolic derivative: ``f`` is elementwise in the rows, so the gradient
of ``Σ_i f`` in the vector of ``j``-th predictors is each row's ``∂_j f``, and so on ``k + 1``
times; PyTensor's rewrites simplify it. The interval evaluator
(:mod:`~pymc_subsample.bounds.interval`) then encloses it over each row's box, rounding
outward, so ``S`` is a bound in exact arithmetic, not an estimate. Bisecting the box into
``pieces`` parts per axis and taking the largest enclosure tightens it (the natural interval
extension overestimates when a variable appears twice); on tall data the boxes are
``O(√(d/N))`` wide and the enclosure is close to ``|∂^α f(p̂_i)|`` already.

Exactness needs ``f`` to be ``k + 1`` times differentiable on the box: a ``switch`` of ``f``
whose condition is an inequality of the predictors must be decided on the whole box, else the
row's bound is infinite (and the model layer refuses); ``abs``, ``sign``, ``maximum``,
``minimum``, rounding of a predictor are refused outright. A switch on an *equality* of a
predictor (PyMC's ``0·log 0`` conventions: ``switch(α = 1, 0, (α − 1) log y)``) picks a
special value on a level set where the other branch takes the same value; its derivatives'
enclosure is the union of both branches', which holds the continuous row term's.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.replace import graph_replace
from pytensor.graph.rewriting.basic import MergeOptimizer
from pytensor.graph.rewriting.utils import rewrite_graph
from pytensor.graph.traversal import io_toposort
from pytensor.scalar import basic as ps
from pytensor.tensor.elemwise import Elemwise

from pymc_subsample.bounds.family import multi_indices
from pymc_subsample.bounds.interval import (
    check_rules,
    evaluate_intervals,
    magnitude,
    undecided_comparisons,
)
from pymc_subsample.bounds.remainder import check_order

__all__ = ["AUTOMATIC_FAMILIES", "AutomaticFamily", "NonSmoothRow"]

#: Families MHSS bounds from the model's graph, each checked against NUTS
#: (``tests/test_posterior_automatic.py``) or run at 10⁶ (``benchmarks/automatic_bounds.py``):
#: ``(name, how it is written in PyMC)``. The README's families table lists them beside the
#: hand-derived ones (:func:`~pymc_subsample.bounds.family.registered`); any other row-wise
#: likelihood whose parameters enter through affine predictors is read the same way.
AUTOMATIC_FAMILIES: tuple[tuple[str, str], ...] = (
    ("binomial", "Binomial with n=trials per row and logit_p=η (or p=invlogit(η))"),
    ("beta_binomial", "BetaBinomial with n=trials, alpha=p * phi, beta=(1 - p) * phi, "
                      "p=invlogit(η), phi sampled"),
    ("lognormal", "LogNormal with mu=η and a sampled sigma"),
    ("exponential", "Exponential with lam=exp(-η)"),
    ("weibull", "Weibull with beta=exp(η) and a sampled alpha"),
    ("beta", "Beta with alpha=p * phi, beta=(1 - p) * phi, p=invlogit(η), phi sampled"),
    ("zero_inflated_poisson", "ZeroInflatedPoisson with mu=exp(η) and a sampled psi"),
    ("censored_weibull", "Censored(Weibull.dist(alpha=k, beta=exp(η)), upper=c), k sampled"),
    ("censored_exponential", "Censored(Exponential.dist(lam=exp(-η)), upper=c)"),
    ("hurdle_lognormal", "HurdleLogNormal with mu=η, a sampled sigma and a sampled psi"),
    ("normal_mixture", "NormalMixture with fixed w and sigma, mu the sampled component means"),
    ("ordered_logistic", "OrderedLogistic with eta=η and sampled cutpoints (ordered transform, "
                         "at most 3)"),
    ("censored_normal", "Censored(Normal.dist(mu=η, sigma=s), lower=c and/or upper=c), s "
                        "sampled (Tobit)"),
    ("multinomial_logit", "Categorical with logit_p=concatenate([zeros((N, 1)), X @ B], "
                          "axis=1), a reference class and at most 4 others"),
    ("hurdle_poisson", "HurdlePoisson with mu=exp(η) and a sampled psi"),
    ("truncated_normal", "Truncated(Normal.dist(mu=η, sigma=s), lower=a and/or upper=b), s "
                         "sampled"),
    ("ordered_probit", "OrderedProbit with eta=η and sampled cutpoints (ordered transform, "
                       "at most 3)"),
)

#: scalar ops with a kink or a jump: a row through one of them with a predictor has no Taylor
#: bound
_KINKS = (ps.Abs, ps.Sign, ps.Maximum, ps.Minimum, ps.Floor, ps.Ceil, ps.RoundHalfToEven,
          ps.RoundHalfAwayFromZero, ps.Clip)


def _merged(inputs: list[Variable], graphs: list[Variable]) -> list[Variable]:
    """``graphs`` (copies) with their common sub-expressions merged, ``inputs`` kept: the
    derivatives of one row term share most of their terms (the same ``ψ'(pφ)`` in each), each
    then enclosed once per evaluation rather than once per graph."""
    fgraph = FunctionGraph(inputs, graphs, clone=True, copy_inputs=False)
    MergeOptimizer().rewrite(fgraph)
    return list(fgraph.outputs)


#: rows enclosed at a time: NumPy's temporaries of this many float64 (128 KiB) are reused
#: from the heap, where those of a whole 65,536-row chunk are fresh pages each time (four
#: times slower on the same work)
EVAL_ROWS = 16_384
#: at most this many sub-boxes (rows × pieces^K) are enclosed per block: on few rows (small N,
#: where the boxes are wide and a natural enclosure loose) the box is bisected into more pieces
PIECES_BUDGET = 65_536
MAX_PIECES = 8
#: from this many rows at a time, rows are bounded through the cells of a grid
#: (:meth:`AutomaticFamily._grouped_suprema`)
GROUP_MIN_ROWS = 4_096
#: a cell's step along a predictor that varies between rows, in the first block's median box
#: half-widths
GROUP_WIDTH = 1.0
#: a row whose box meets more steps than this along a predictor is enclosed on its own
GROUP_MAX_SPAN = 8
#: bins of a continuous data column (equal counts in the first block), besides its frequent
#: values' own
GROUP_QUANTILES = 64
#: a continuous column's bins wider than this many times their median width (its tails') are
#: split
GROUP_TAIL_WIDTH = 4.0
#: a data value on at least this share of the first block's rows (a censoring bound) is a cell
#: of its own
GROUP_EXACT_SHARE = 1.0 / 256.0
#: rows are bounded through cells only when a block needs new cells for at most this share of
#: its rows, and at least this share of them has cells (else no work saved)
GROUP_MAX_SHARE = 0.5
#: on the first block, each data value's cells are also made this share of the predictor's
#: range past each end of its own (where a later block's rows are likely to need them)
GROUP_PREFILL = 0.1
#: the cells' bounds may add at most this share to each sum of a block's suprema (each row
#: weighted as in its constant, :meth:`AutomaticFamily._rows_to_refine`): the rows where
#: refining may gain most are bounded at their own point until the rest may gain less
GROUP_SLACK = 0.15
#: boxes up to this many are enclosed with their centres in one interval evaluation, whose
#: cost is then mostly per op
MERGE_ROWS = 2_048
#: with more than two predictors, derivatives of at most this order are simplified by
#: PyTensor's rewrites (:meth:`AutomaticFamily._partial`)
SIMPLIFY_ORDER = 2
#: the widening of a piece's ends: a few ulps of ``|p̂| + 2w`` (each end is a few roundings)
_OUTWARD_REL = 2.0**-48
_OUTWARD_ABS = 2.0**-1070


class NonSmoothRow(ValueError):
    """The row term goes through an op with a kink in a predictor (:attr:`op_name`)."""

    def __init__(self, op_name: str) -> None:
        self.op_name = op_name
        super().__init__(f"the row term goes through {op_name} of a predictor (not smooth)")


class AutomaticFamily:
    """The bound of a row term ``f(p_1..p_K; data)`` from its graph, with no per-family code.

    It has the interface the location–scale pass uses for a
    :class:`~pymc_subsample.bounds.family.LocationScaleFamily` (:meth:`row_logp`,
    :meth:`all_suprema`, :attr:`n_predictors`, :attr:`name`, :attr:`description`).

    Parameters
    ----------
    logp : Variable
        The row log-density, shape ``(n,)``, a graph of ``predictors``, ``data`` and constants.
    predictors : sequence of Variable
        ``K`` float64 vectors, one value per row.
    data : sequence of Variable
        The row data the term reads besides the predictors (observations, trials, censoring
        flags), one value per row or a scalar; :meth:`all_suprema` takes their values in this
        order as ``params``.
    name, description : str
    pieces : int
        Parts per axis the box is bisected into (``pieces^K`` enclosures per row).

    Raises
    ------
    NonSmoothRow
        If ``f`` takes ``abs``, ``sign``, a rounding, ``maximum`` or ``minimum`` of a predictor.
    NoIntervalRule
        If a derivative graph has an op the interval evaluator has no rule for.
    """

    #: whether ``f`` switches between formulas on a predictor or compares one with ``<``,
    #: ``≤``, ``>``, ``≥`` (a possible kink or jump; PyMC's stabilised normal log-CDFs are ops
    #: of their own by then, :mod:`~pymc_subsample.bounds.normal_cdf_ops`): its bound is
    #: infinite on every row whose box reaches such a switch point where the row reads it
    inequality_switches = False

    #: interval enclosures of derivative graphs on every row: several times a pass over the
    #: data, so the reference fit computes them once, at the mode
    costly_suprema = True

    def __init__(self, logp: Variable, predictors: Sequence[Variable],
                 data: Sequence[Variable], name: str, description: str,
                 pieces: int = 1) -> None:
        self.name = name
        self.description = description
        self.pieces = int(pieces)
        self._f = logp
        self._predictors = tuple(predictors)
        self._data = tuple(data)
        self._derivative_graphs: dict[int, tuple[list[tuple[int, ...]], list[Variable]]] = {}
        self._memo: dict[tuple[int, ...], Variable] = {(0,) * len(self._predictors): logp}
        self._conditions = self._predictor_conditions()
        self._inputs = [*self._predictors, *self._data]
        #: the cell grids of the current pass (:class:`_CellGrid`), by order and the shared
        #: predictors' values
        self._grids: dict[tuple, _CellGrid | None] = {}
        self._grid_lock = threading.Lock()

    def __getstate__(self) -> dict:
        # a copy sent to a worker process starts with no cells (a lock is not picklable)
        state = dict(self.__dict__)
        state["_grids"], state["_grid_lock"] = {}, None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._grid_lock = threading.Lock()

    @property
    def n_predictors(self) -> int:
        """``K``."""
        return len(self._predictors)

    def _predictor_conditions(self) -> list[Variable]:
        """The comparisons of predictors across which ``f`` may have a kink or a jump (each
        must be decided on a row's box wherever ``f`` reads it there,
        :func:`~pymc_subsample.bounds.interval.undecided_comparisons`); refuse a kink
        (:data:`_KINKS`) of a predictor.

        They are the conditions of ``f``'s switches that depend on a predictor, and every
        inequality of a predictor (also one cast to a number). Not among them: a switch on an
        *equality* (module docstring)."""
        predictors = set(self._predictors)
        depends: dict[Variable, bool] = {}
        conditions: list[Variable] = []
        for node in io_toposort([*self._predictors, *self._data], [self._f]):
            inputs_depend = [v in predictors or depends.get(v, False) for v in node.inputs]
            for out in node.outputs:
                depends[out] = any(inputs_depend)
            if not isinstance(node.op, Elemwise) or not any(inputs_depend):
                continue
            scalar = node.op.scalar_op
            if isinstance(scalar, _KINKS):
                raise NonSmoothRow(type(scalar).__name__)
            cond = node.inputs[0]
            if (isinstance(scalar, ps.Switch) and inputs_depend[0]
                    and not isinstance(getattr(cond.owner.op, "scalar_op", None),
                                       ps.EQ | ps.NEQ)):
                conditions.append(cond)
            elif isinstance(scalar, ps.LT | ps.LE | ps.GT | ps.GE):
                conditions.append(node.outputs[0])
        conditions = list(dict.fromkeys(conditions))
        # an inequality among them (a switch on isinf, a mixture's −∞ column, is not one)
        self.inequality_switches = any(
            isinstance(getattr(c.owner.op, "scalar_op", None), ps.LT | ps.LE | ps.GT | ps.GE)
            for c in conditions)
        return conditions

    def row_logp(self, predictors: Sequence[Variable], y: Variable,
                 params: Sequence[Variable]) -> Variable:
        """``f`` per row as a graph of given predictor values and the row data ``params`` (the
        graphs :attr:`data` stands for); ``y`` is among them where ``f`` reads it."""
        del y
        replace = dict(zip(self._predictors, predictors, strict=True))
        replace.update(zip(self._data, params, strict=True))
        return graph_replace(self._f, replace, strict=False)

    def _partial(self, alpha: tuple[int, ...]) -> Variable:
        """``∂^α f`` per row (cached): the gradient of the row sum of one derivative fewer."""
        if alpha not in self._memo:
            # one derivative fewer in the last predictor with a positive index
            j = max(i for i, a in enumerate(alpha) if a)
            lower = tuple(a - (i == j) for i, a in enumerate(alpha))
            grad = pt.grad(self._partial(lower).sum(), self._predictors[j],
                           disconnected_inputs="ignore")
            # simplified at each order (rewriting the third derivatives at once can take
            # PyTensor minutes) up to SIMPLIFY_ORDER: beyond, the rewrites of a row term with
            # many predictors (an ordinal model's switch over its classes) ran for minutes,
            # and the unsimplified graphs are enclosed as validly (only less tightly)
            simplify = sum(alpha) <= (3 if self.n_predictors <= 2 else SIMPLIFY_ORDER)
            self._memo[alpha] = (rewrite_graph(grad, include=("canonicalize",))
                                 if simplify else grad)
        return self._memo[alpha]

    def derivatives(self, order: int) -> tuple[list[tuple[int, ...]], list[Variable]]:
        """``(α's, graphs)``: ``∂^α f`` for ``|α| = order + 1``, then ``∂^β f`` for
        ``|β| = order + 2`` (the mean-value form's gradients), simplified by PyTensor's
        rewrites (cached)."""
        check_order(order)
        if order not in self._derivative_graphs:
            alphas = [*multi_indices(self.n_predictors, order + 1),
                      *multi_indices(self.n_predictors, order + 2)]
            shape = self._predictors[0].shape
            graphs = [pt.cast(pt.broadcast_to(self._partial(a), shape), "float64")
                      for a in alphas]
            self._derivative_graphs[order] = (alphas, _merged(self._inputs, graphs))
        return self._derivative_graphs[order]

    def check_row_rules(self) -> None:
        """Raise :class:`~pymc_subsample.bounds.interval.NoIntervalRule` naming an op of the
        row term itself that has no interval rule (before any derivative is built)."""
        check_rules([self._f], [*self._predictors, *self._data])

    def check_rules(self, order: int) -> None:
        """Raise :class:`~pymc_subsample.bounds.interval.NoIntervalRule` naming an op of the
        derivative graphs (or of ``f``'s conditions) that has no interval rule."""
        inputs = [*self._predictors, *self._data]
        self.check_row_rules()  # the row term's own ops first: named as written
        _, graphs = self.derivatives(order)
        check_rules([*graphs, *self._conditions], inputs)

    def all_suprema(
        self,
        order: int,
        norms: tuple[np.ndarray, ...],
        y: np.ndarray,
        hats: tuple[np.ndarray, ...],
        radius: float,
        params: tuple[np.ndarray, ...] = (),
    ) -> dict[tuple[int, ...], np.ndarray]:
        r"""``{α: S_α}`` per row (module docstring) on the box ``|p_j − p̂_j| ≤ radius·s_j``;
        ``params`` are the values of :attr:`data` on these rows. ``inf`` on a row whose box
        reaches a pole or leaves a switch of ``f`` undecided.

        Each ``S_α`` is the smaller of two enclosures of ``sup_B |∂^α f|``: the natural one
        (the largest over the ``pieces^K`` parts of the box) and the mean-value form
        :math:`|\partial^\alpha f(\hat p)| + \sum_j w_j \sup_B |\partial_j\partial^\alpha
        f|` (``w_j = radius·s_j``), which is tight to first order in the box's width where the
        natural one suffers from a variable that appears several times. On many narrow
        boxes (tall data) both are taken on bins of similar rows (:meth:`_grouped_suprema`).
        """
        del y
        alphas, graphs = self.derivatives(order)
        n_alpha = len(multi_indices(self.n_predictors, order + 1))
        n_rows = np.shape(norms[0])[0]
        centres = [np.broadcast_to(np.asarray(h, dtype=np.float64), (n_rows,)) for h in hats]
        widths = [radius * np.broadcast_to(np.asarray(s, dtype=np.float64), (n_rows,))
                  for s in norms]
        data = {var: np.broadcast_to(np.asarray(value), (n_rows,))
                for var, value in zip(self._data, params, strict=True)}
        # bisection where it is cheap: few rows (small N), whose boxes are wide
        pieces = max(self.pieces, min(MAX_PIECES, int(
            (PIECES_BUDGET / max(n_rows, 1)) ** (1.0 / self.n_predictors) + 1e-9)))
        if n_rows >= GROUP_MIN_ROWS:
            grouped = self._grouped_suprema(order, alphas, graphs, n_alpha, centres, widths,
                                            data, pieces)
            if grouped is not None:
                return grouped
        blocks = [self._block_suprema(alphas, graphs, n_alpha, pieces,
                                      [c[start : start + EVAL_ROWS] for c in centres],
                                      [w[start : start + EVAL_ROWS] for w in widths],
                                      {v: d[start : start + EVAL_ROWS] for v, d in data.items()})
                  for start in range(0, max(n_rows, 1), EVAL_ROWS)]
        if len(blocks) == 1:
            return blocks[0]
        return {alpha: np.concatenate([b[alpha] for b in blocks]) for alpha in alphas[:n_alpha]}

    def _block_suprema(self, alphas, graphs, n_alpha, pieces, centres, widths, data):
        """:meth:`all_suprema` on one block of rows."""
        n_rows = np.shape(centres[0])[0]
        natural = self._box_suprema(graphs[:n_alpha], self._conditions, centres, widths, data,
                                    pieces)
        *natural, undecided = natural
        at_centre = [magnitude(e) for e in evaluate_intervals(
            graphs[:n_alpha], {**dict(zip(self._predictors, centres, strict=True)), **data})]
        # the mean-value form only where the natural enclosure is loose (rarely on tall data:
        # the fourth derivatives it needs are large graphs, costly on millions of rows)
        loose = np.zeros(n_rows, dtype=bool)
        for sup, point in zip(natural, at_centre, strict=True):
            loose |= sup > 1.25 * point + 1e-300
        best = {}
        rows = np.flatnonzero(loose & ~undecided)
        if rows.size:
            sub = self._box_suprema(graphs[n_alpha:], [], [c[rows] for c in centres],
                                    [w[rows] for w in widths],
                                    {v: d[rows] for v, d in data.items()})[:-1]
            gradient = dict(zip(alphas[n_alpha:], sub, strict=True))
        for k, alpha in enumerate(alphas[:n_alpha]):
            out = natural[k].copy()
            if rows.size:
                mean_value = at_centre[k][rows]
                for j, w in enumerate(widths):
                    beta = tuple(a + (i == j) for i, a in enumerate(alpha))
                    mean_value = mean_value + gradient[beta] * w[rows]
                # rounded up: the sum of bounds is a bound in exact arithmetic
                mean_value = np.nextafter(mean_value * (1.0 + 4.0 * np.finfo(float).eps),
                                          np.inf)
                out[rows] = np.minimum(out[rows], mean_value)
            best[alpha] = np.where(undecided, np.inf, out)
        return best

    def _grouped_suprema(self, order, alphas, graphs, n_alpha, centres, widths, data,
                         pieces):
        r""":meth:`all_suprema` through the cells of a grid (:class:`_CellGrid`), or ``None``
        where the rows do not share cells.

        The grid is made on the pass's first block of rows and kept for its other blocks; the
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
        new cells (:meth:`_enclose`).
        """
        n_rows = np.shape(centres[0])[0]
        grid = self._grid(order, centres, widths, data, n_alpha, len(graphs) - n_alpha)
        if grid is None:
            return None
        codes = grid.data_codes(list(data.values()))
        own = codes < 0
        # the steps each row's box meets along each varying predictor, and its centre's
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
        rows = np.flatnonzero(~own)
        if rows.size < GROUP_MAX_SHARE * n_rows:
            return None  # most rows have no cells: no work saved
        codes = codes[rows]
        first = [lo[rows] for lo in first]
        count = [n[rows] for n in count]
        home = [h[rows] for h in home]
        dims = tuple(int(n.max()) for n in count)
        offsets = list(np.ndindex(*dims))
        # each (offset, row)'s cell (the last step spanned past the row's count: a repeat)
        keys = np.stack([grid.keys(codes, [lo + np.minimum(d, n - 1)
                                           for lo, n, d in zip(first, count, offset,
                                                               strict=True)])
                         for offset in offsets])
        unique, inverse = np.unique(keys, return_inverse=True)
        ids, table = grid.lookup(unique)
        missing = unique[ids < 0]
        if missing.size > GROUP_MAX_SHARE * n_rows:
            return None  # the cells would cost about as much as the rows
        if not grid.prefilled:
            extra = self._prefill(grid, codes, first, count)
            if extra is not None:
                missing = np.union1d(missing, extra)
        span = np.reshape(inverse, keys.shape)
        # a row whose span has a known cell with an undecided switch: on its own box
        known = ids >= 0
        skip = np.zeros(rows.size, dtype=bool)
        if known.any():
            infinite = np.zeros(unique.size, dtype=bool)
            infinite[known] = ~np.isfinite(table[grid.fields.natural, ids[known]])
            skip = np.any(infinite[span], axis=0)
        own[rows[skip]] = True
        new, own_rows = self._enclose_with(order, grid, missing, own, centres, widths, data,
                                           pieces)
        if missing.size:
            added, table = grid.add(missing, new)
            ids[ids < 0] = added[np.searchsorted(missing, unique[ids < 0])]
        span = ids[span]
        home_ids = (span[np.ravel_multi_index(
            tuple(h - lo for h, lo in zip(home, first, strict=True)), dims),
            np.arange(rows.size)] if dims else span[0])
        best, box, lower, late = self._from_cells(alphas, n_alpha, grid, table, span,
                                                  home_ids, home, centres, widths, rows)
        late &= ~skip  # rows whose new cells turned out undecided: on their own box too
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
            _, values = self._enclose_with(order, grid, missing[:0], again, centres, widths,
                                           data, pieces)
            for alpha, value in values.items():
                out[alpha][again] = value
        return out

    def _from_cells(self, alphas, n_alpha, grid, table, span, home_ids, home, centres,
                    widths, rows):
        """``S_α`` of the rows ``rows`` from their cells (:meth:`_grouped_suprema`), the
        change over each row's box, the least each refined bound can be, and the rows with
        no finite bound from their cells."""
        fields = grid.fields
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
        dims = span.shape[0]

        def on_span(field: int) -> np.ndarray:
            values = table[field]
            out = values[span[0]]
            for m in range(1, dims):
                np.maximum(out, values[span[m]], out=out)
            return out

        n_beta = len(alphas) - n_alpha
        slope = {beta: (table[fields.slope + m][home_ids],
                        table[fields.slope + n_beta + m][home_ids])
                 for m, beta in enumerate(alphas[n_alpha:])}
        spread = {beta: on_span(fields.gradient + m)
                  for m, beta in enumerate(alphas[n_alpha:])}
        w_rows = [w[rows] for w in widths]
        best, box, lower = {}, {}, {}
        for k, alpha in enumerate(alphas[:n_alpha]):
            natural = on_span(fields.natural + k)
            lo = table[fields.point + k][home_ids]
            hi = table[fields.point + n_alpha + k][home_ids]
            size = np.maximum(np.abs(lo), np.abs(hi))
            box[alpha] = 0.0
            with np.errstate(invalid="ignore", over="ignore"):
                for j, w in enumerate(w_rows):
                    beta = tuple(a + (i == j) for i, a in enumerate(alpha))
                    box[alpha] = box[alpha] + w * spread[beta]
                    if offset[j] is None:
                        continue
                    # ∂^α f(p̂) ∈ ∂^α f(c) + (p̂_j − c_j) ∂_j∂^α f(home cell) (centred form)
                    t = offset[j]
                    g_lo, g_hi = slope[beta]
                    lo = lo + np.where(t >= 0.0, t * g_lo, t * g_hi)
                    hi = hi + np.where(t >= 0.0, t * g_hi, t * g_lo)
                    size = size + np.abs(t) * np.maximum(np.abs(g_lo), np.abs(g_hi))
                # outward past the rounding of these few sums and products
                slack = 8.0 * eps * size + 2.0**-1070
                lo, hi = lo - slack, hi + slack
                at_point = np.maximum(np.abs(lo), np.abs(hi))
                # rounded up: a sum of bounds is a bound in exact arithmetic
                bound = (at_point + box[alpha]) * (1.0 + 8.0 * eps)
                best[alpha] = np.minimum(natural, np.nextafter(bound, np.inf))
                # the least the row's refined bound may be
                least = np.where((lo > 0.0) | (hi < 0.0), np.minimum(np.abs(lo), np.abs(hi)),
                                 0.0)
                lower[alpha] = least + box[alpha]
            late |= ~np.isfinite(best[alpha])
        return best, box, lower, late

    def _enclose_with(self, order, grid, cells, own, centres, widths, data, pieces):
        """The table rows of the cells ``cells`` and the suprema of the rows ``own`` on
        their own boxes (``pieces`` parts per axis), in one interval evaluation
        (:meth:`_enclose`): ``S_α`` is the smaller of the natural enclosure and the
        mean-value form at the row's own point."""
        at = np.flatnonzero(own)
        n_alpha = len(multi_indices(self.n_predictors, order + 1))
        alphas, _ = self.derivatives(order)
        parts = []
        for start in range(0, cells.size, EVAL_ROWS):
            groups = [(*grid.hulls(cells[start : start + EVAL_ROWS]), self.pieces)]
            if at.size and start + EVAL_ROWS >= cells.size:  # the rows with the last part
                groups.append(([c[at] for c in centres], [w[at] for w in widths],
                               [d[at] for d in data.values()], pieces))
            parts.extend(self._enclose(order, groups))
        if at.size and not cells.size:
            parts.extend(self._enclose(order, [([c[at] for c in centres],
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

    def _enclose(self, order, groups) -> list[tuple[list, list]]:
        """For each group ``(centres, half-widths, data, pieces)`` of boxes: ``sup |g|`` on
        each box for every derivative graph (the largest over its ``pieces^K`` parts;
        infinite where a switch of ``f`` is undecided on a part) and the enclosures of the
        ``|α| = order + 1`` ones at its centre; the groups' boxes enclosed together (one
        interval evaluation when they are few: its cost is mostly per op)."""
        alphas, graphs = self.derivatives(order)
        n_alpha = len(multi_indices(self.n_predictors, order + 1))
        lows = {p: [] for p in self._predictors}
        highs = {p: [] for p in self._predictors}
        values = {v: [] for v in self._data}
        layout = []
        for centres, halves, data, pieces in groups:
            cells = list(np.ndindex(*(pieces,) * self.n_predictors))
            n = np.shape(centres[0])[0]
            for j, (p, c, w) in enumerate(zip(self._predictors, centres, halves,
                                              strict=True)):
                t = np.array([cell[j] for cell in cells], dtype=np.float64)[:, None]
                lo = c - w + 2.0 * w * (t / pieces)
                hi = c - w + 2.0 * w * ((t + 1.0) / pieces)
                # outward past the few roundings of each end (relative to |p̂| + 2w)
                slack = (np.abs(c) + 2.0 * np.abs(w)) * _OUTWARD_REL + _OUTWARD_ABS
                lows[p].append((lo - slack).ravel())
                highs[p].append((hi + slack).ravel())
            for v, d in zip(self._data, data, strict=True):
                values[v].append(tuple(np.tile(x, len(cells)) for x in d)
                                 if isinstance(d, tuple) else np.tile(d, len(cells)))
            layout.append((n, len(cells), centres, data))
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
    def _prefill(grid, codes, first, count) -> np.ndarray | None:
        """On the grid's first block: the keys of the cells a later block likely needs beyond
        this one's, along one varying predictor (each data code's steps widened by
        :data:`GROUP_PREFILL` of their range on each side), or ``None``."""
        grid.prefilled = True
        if len(first) != 1:
            return None
        n_codes = int(codes.max()) + 1
        low = np.full(n_codes, np.iinfo(np.int64).max)
        high = np.full(n_codes, np.iinfo(np.int64).min)
        np.minimum.at(low, codes, first[0])
        np.maximum.at(high, codes, first[0] + count[0] - 1)
        seen = low <= high
        margin = int(np.ceil(GROUP_PREFILL * (high[seen].max() - low[seen].min()) + 1.0))
        low = np.maximum(low - margin, -grid.max_step + 1)
        high = np.minimum(high + margin, grid.max_step - 1)
        sizes = np.where(seen, high - low + 1, 0)
        if sizes.sum() > GROUP_MAX_SHARE * codes.size:
            return None
        at = np.repeat(np.flatnonzero(seen), sizes[seen])
        steps = low[at] + np.arange(at.size) - np.repeat(np.cumsum(sizes[seen]) - sizes[seen],
                                                         sizes[seen])
        return np.unique(grid.keys(at, [steps]))

    @staticmethod
    def _rows_to_refine(best, lower, widths, skip) -> np.ndarray:
        """The rows :meth:`_grouped_suprema` bounds at their own point: the fewest, by
        largest weighted gain first, whose refinement leaves each ``α``'s possible gain over
        the other rows at most :data:`GROUP_SLACK` of ``Σ_i v_i S_i``. A row's possible gain
        is ``v_i (S_i − L_i)`` with ``L_i`` the least its refined bound can be and
        ``v_i = Π_j w_ij^{α_j}`` its factor in its constant."""
        n_rows = np.shape(skip)[0]
        shares = []
        for alpha, upper in best.items():
            weight = np.ones(n_rows)
            for a, w in zip(alpha, widths, strict=True):
                if a:
                    weight = weight * w**a
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

    def _grid(self, order, centres, widths, data, n_alpha, n_beta) -> _CellGrid | None:
        """The pass's cell grid (made from the first block that asks, kept while the shared
        predictors keep their values), or ``None`` where there is none."""
        shared = tuple((float(c[0]), float(w[0])) for c, w in zip(centres, widths, strict=True)
                       if _same(c) and _same(w))
        key = (order, shared)
        with self._grid_lock:
            if key not in self._grids:
                if len(self._grids) >= 4:  # another pass (another θ): the old cells are done
                    self._grids.clear()
                fields = _Fields(0, n_alpha, n_alpha + n_beta, n_alpha + 3 * n_beta,
                                 3 * n_alpha + 3 * n_beta)
                self._grids[key] = _CellGrid.from_rows(centres, widths, list(data.values()),
                                                       fields)
            return self._grids[key]

    def _box_suprema(self, graphs, conditions, centres, widths, data,
                     pieces: int = 1) -> list[np.ndarray]:
        """``sup |g|`` over each row's box for each graph (the largest over the
        ``pieces^K`` parts, enclosed together as rows of one evaluation), then whether any
        condition is undecided on the row's box."""
        n_rows = np.shape(centres[0])[0]
        cells = list(np.ndindex(*(pieces,) * self.n_predictors))
        boxes = {}
        for j, (p, c, w) in enumerate(zip(self._predictors, centres, widths, strict=True)):
            t = np.array([cell[j] for cell in cells], dtype=np.float64)[:, None]
            lo = c - w + 2.0 * w * (t / pieces)
            hi = c - w + 2.0 * w * ((t + 1.0) / pieces)
            # outward by more than the few roundings of each end (relative to |p̂| + 2w, not
            # to the end itself, which may cancel to about 0): the pieces' union covers the box
            slack = (np.abs(c) + 2.0 * np.abs(w)) * _OUTWARD_REL + _OUTWARD_ABS
            boxes[p] = ((lo - slack).ravel(), (hi + slack).ravel())
        if len(cells) > 1:
            # a bin's data are intervals (lo, hi): each end tiled
            data = {v: tuple(np.tile(x, len(cells)) for x in d) if isinstance(d, tuple)
                    else np.tile(d, len(cells)) for v, d in data.items()}
        out = evaluate_intervals(graphs, {**boxes, **data})
        shape = (len(cells), n_rows)

        def by_cell(v):
            return np.broadcast_to(v, (len(cells) * n_rows,)).reshape(shape)

        sup = [by_cell(magnitude(e)).max(axis=0) for e in out]
        undecided = np.zeros(n_rows, dtype=bool)
        if conditions:
            # only where the row reads them: a censored row's log-CDF, not its density
            undecided = by_cell(undecided_comparisons(self._f, {**boxes, **data},
                                                      conditions)).any(axis=0)
        return [*sup, undecided]


def _same(values: np.ndarray) -> bool:
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


class _Fields(NamedTuple):
    """Where each quantity starts among the rows of a :class:`_CellGrid`'s table."""

    natural: int  # sup |∂^α f| on the cell (natural enclosure), |α| = order + 1
    gradient: int  # sup |∂^β f| on the cell, |β| = order + 2
    slope: int  # the enclosures of ∂^β f on the cell: lower ends, then upper ends
    point: int  # the enclosures of ∂^α f at the cell's centre: lower ends, then upper ends
    size: int


class _CellGrid:
    """Cells of the predictors' and the data's space, the same for every block of rows of a
    pass, and the enclosures on each (:meth:`AutomaticFamily._grouped_suprema`).

    Along a predictor that varies between rows a cell is a step ``[k s, (k + 1) s]``, ``s``
    :data:`GROUP_WIDTH` times the first block's median box half-width; along one the same on
    every row (one σ for all) it is that row's box. Its data are exact (an integer, a flag,
    a float column with at most :data:`GROUP_QUANTILES` values, a frequent value), or one of
    about :data:`GROUP_QUANTILES` bins of a continuous column (equal counts in the first
    block, the tails' split to at most :data:`GROUP_TAIL_WIDTH` median bin widths, and two
    more such bins past each end), taken as an interval. A row's box is covered by the cells
    of its data whose steps it meets (its *span*).

    A cell is keyed by one int64: its data's code (the tuples of data keys in order of first
    sight), then its step along each varying predictor. The cells' enclosures are computed
    once (:meth:`AutomaticFamily._cell_enclosures`) and kept in a table, shared by the
    pass's threads under a lock (a cell two threads compute at once is kept once).
    """

    #: bits of a cell key for its data's code
    CODE_BITS = 20

    def __init__(self, steps: list, shared: list, columns: list, fields: _Fields) -> None:
        self.steps = steps  # per predictor: the step, None for one shared by every row
        self.shared = shared  # the shared predictors' (value, half-width)
        self.columns = columns  # per data column: None (exact), or (bin edges, frequent)
        self.fields = fields
        n_varying = sum(s is not None for s in steps)
        #: bits of a cell key per varying predictor's step, and the largest |step| it holds
        self.step_bits = (63 - self.CODE_BITS) // max(n_varying, 1)
        self.max_step = 2 ** (self.step_bits - 1) - 2 * GROUP_MAX_SPAN
        self.prefilled = False
        self._lock = threading.Lock()
        self._codes: dict[bytes, int] = {}
        # per data column, each code's value (exact) or interval (binned)
        self._data_lo: list[list] = [[] for _ in columns]
        self._data_hi: list[list] = [[] for _ in columns]
        self._keys = np.empty(0, dtype=np.int64)  # sorted
        self._ids = np.empty(0, dtype=np.int64)
        # one row per field, one column per cell (a field's values contiguous for gathers)
        self._table = np.empty((fields.size, 0))

    @classmethod
    def from_rows(cls, centres, widths, data, fields: _Fields) -> _CellGrid | None:
        """The grid of a pass, from its first block's rows; ``None`` where a step is not
        positive and finite, or more than two predictors vary between rows."""
        steps, shared = [], []
        for c, w in zip(centres, widths, strict=True):
            if _same(c) and _same(w):
                steps.append(None)
                shared.append((float(c[0]), float(w[0])))
                continue
            step = GROUP_WIDTH * float(np.median(w))
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
        return cls(steps, shared, columns, fields)

    def data_codes(self, data) -> np.ndarray:
        """Each row's data code (``-1`` where its data are off the grid: a continuous value
        beyond the bins), new codes numbered (at most ``2**CODE_BITS``)."""
        n_rows = np.shape(data[0])[0]
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
        :meth:`AutomaticFamily.derivatives`'s order), enclosures of the next order's and
        enclosures at their centres."""
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


def _joined(parts: list) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Data values of several groups of boxes in one: arrays, or ``(lo, hi)`` where any
    group has an interval."""
    if not any(isinstance(x, tuple) for x in parts):
        return np.concatenate([np.asarray(x) for x in parts])
    pairs = [x if isinstance(x, tuple) else (x, x) for x in parts]
    return (np.concatenate([np.asarray(lo, dtype=np.float64) for lo, _ in pairs]),
            np.concatenate([np.asarray(hi, dtype=np.float64) for _, hi in pairs]))
