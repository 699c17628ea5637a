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

from collections.abc import Sequence

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

from pymc_subsample.bounds.cell_suprema import EVAL_ROWS, CellSuprema
from pymc_subsample.bounds.derivative_cache import (
    derivatives_entry,
    load_derivatives,
    store_derivatives,
)
from pymc_subsample.bounds.family import autodiff_row_terms, multi_indices
from pymc_subsample.bounds.interval import (
    check_rules,
    evaluate_intervals,
    magnitude,
    piece_boxes,
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
    ("hurdle_negative_binomial", "HurdleNegativeBinomial with mu=exp(η), a sampled alpha and "
                                 "a sampled psi"),
    ("zero_inflated_negative_binomial", "ZeroInflatedNegativeBinomial with mu=exp(η), a "
                                        "sampled alpha and a sampled psi"),
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


#: at most this many sub-boxes (rows × pieces^K) are enclosed per block: on few rows (small N,
#: where the boxes are wide and a natural enclosure loose) the box is bisected into more pieces
PIECES_BUDGET = 65_536
MAX_PIECES = 8
#: from this many rows at a time, rows are bounded through the cells of a grid
#: (:class:`~pymc_subsample.bounds.cell_suprema.CellSuprema`)
GROUP_MIN_ROWS = 4_096
#: with more than two predictors, derivatives of at most this order are simplified by
#: PyTensor's rewrites (:meth:`AutomaticFamily._partial`)
SIMPLIFY_ORDER = 2

class NonSmoothRow(ValueError):
    """The row term goes through an op with a kink in a predictor (:attr:`op_name`)."""

    def __init__(self, op_name: str) -> None:
        self.op_name = op_name
        super().__init__(f"the row term goes through {op_name} of a predictor (not smooth)")


class AutomaticFamily:
    """The bound of a row term ``f(p_1..p_K; data)`` from its graph, with no per-family code.

    It has the interface the location–scale pass uses for a
    :class:`~pymc_subsample.bounds.family.LocationScaleFamily` (:meth:`row_logp`,
    :meth:`row_terms`, :meth:`all_suprema`, :attr:`n_predictors`, :attr:`name`,
    :attr:`description`).

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
        #: the bounds of many rows at a time through the cells of a grid kept per pass
        self._cells = CellSuprema(logp, self._predictors, self._data, self._conditions,
                                  self.pieces)

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

    def row_terms(self, predictors: Sequence[Variable], y: Variable,
                  params: Sequence[Variable]
                  ) -> tuple[Variable, tuple[Variable, ...], tuple[Variable, ...]]:
        """``f`` with its gradient and Hessian in the predictors, by autodiff
        (:func:`~pymc_subsample.bounds.family.autodiff_row_terms`)."""
        return autodiff_row_terms(self.row_logp, tuple(predictors), y, tuple(params))

    @property
    def _simplify_order(self) -> int:
        """The highest order of derivatives simplified by PyTensor's rewrites."""
        return 3 if self.n_predictors <= 2 else SIMPLIFY_ORDER

    def _partial(self, alpha: tuple[int, ...]) -> Variable:
        """``∂^α f`` per row (cached): the gradient of the row sum of one derivative fewer."""
        if alpha not in self._memo:
            # one derivative fewer in the last predictor with a positive index
            j = max(i for i, a in enumerate(alpha) if a)
            lower = tuple(a - (i == j) for i, a in enumerate(alpha))
            # with its siblings: every α built from ``lower`` (a derivative in a predictor
            # from ``lower``'s last index on), in one backward pass through ``lower``'s graph
            # and one rewrite of them together (one per sibling was half an ordinal probit's
            # setup: its graphs in four predictors are large)
            first = max((i for i, a in enumerate(lower) if a), default=0)
            wrt = range(first, self.n_predictors)
            grads = pt.grad(self._partial(lower).sum(), [self._predictors[i] for i in wrt],
                            disconnected_inputs="ignore")
            # simplified at each order (rewriting the third derivatives at once can take
            # PyTensor minutes) up to SIMPLIFY_ORDER: beyond, the rewrites of a row term with
            # many predictors (an ordinal model's switch over its classes) ran for minutes,
            # and the unsimplified graphs are enclosed as validly (only less tightly)
            if sum(alpha) <= self._simplify_order:
                # on a copy: in place, the rewrites also rewrote the nodes the derivatives
                # share with f (a truncated Normal's, a hurdle Poisson's), whose comparisons
                # (self._conditions) the enclosures must find in f's graph
                fgraph = FunctionGraph(outputs=grads, clone=True, copy_inputs=False)
                grads = list(rewrite_graph(fgraph, include=("canonicalize",)).outputs)
            for i, grad in zip(wrt, grads, strict=True):
                self._memo[tuple(a + (k == i) for k, a in enumerate(lower))] = grad
        return self._memo[alpha]

    def derivatives(self, order: int) -> tuple[list[tuple[int, ...]], list[Variable]]:
        """``(α's, graphs)``: ``∂^α f`` for ``|α| = order + 1``, then ``∂^β f`` for
        ``|β| = order + 2`` (the mean-value form's gradients), simplified by PyTensor's
        rewrites (cached)."""
        check_order(order)
        if order not in self._derivative_graphs:
            # the same f, the same graphs: kept on disk between builds (1.5–4 s of rewrites)
            entry = derivatives_entry(self._f, self._inputs, order,
                                      f"simplified to order {self._simplify_order}")
            found = load_derivatives(entry, self._f, self._inputs)
            if found is None:
                alphas = [*multi_indices(self.n_predictors, order + 1),
                          *multi_indices(self.n_predictors, order + 2)]
                shape = self._predictors[0].shape
                graphs = _merged(self._inputs, [
                    pt.cast(pt.broadcast_to(self._partial(a), shape), "float64")
                    for a in alphas])
                store_derivatives(entry, self._f, self._inputs, alphas, graphs)
                found = (alphas, graphs)
            self._derivative_graphs[order] = found
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
        boxes (tall data) both are taken on the cells of a grid
        (:meth:`CellSuprema.suprema <pymc_subsample.bounds.cell_suprema.CellSuprema.suprema>`).
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
            grouped = self._cells.suprema(order, alphas, graphs, n_alpha, centres, widths,
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

    def _box_suprema(self, graphs, conditions, centres, widths, data,
                     pieces: int = 1) -> list[np.ndarray]:
        """``sup |g|`` over each row's box for each graph (the largest over the
        ``pieces^K`` parts, enclosed together as rows of one evaluation), then whether any
        condition is undecided on the row's box."""
        n_rows = np.shape(centres[0])[0]
        cells = list(np.ndindex(*(pieces,) * self.n_predictors))
        boxes = dict(zip(self._predictors, piece_boxes(centres, widths, pieces), strict=True))
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
