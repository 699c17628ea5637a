"""Rebuilding a model's observed variables on a row index ``idx``.

The observed variables' nodes carry the static size ``N``, so slicing the model's own logp
graph would not work: :func:`rebuild_on_index` rebuilds each one with every data container
indexed by ``idx`` (:class:`ObservedBlock`). Every random variable in its graph whose batch
runs over the rows (the observed one, and the components of mixtures, censored, truncated and
hurdle distributions) is rebuilt with its size changed to ``len(idx)``; PyMC's
``SymbolicRandomVariable`` s (``Censored``, ``Truncated``, ``Mixture``, even ``Weibull``),
whose inner graphs carry the static ``N``, by PyMC's own resizing
(:func:`pymc.distributions.shape_utils.change_dist_size`).

Before that rebuild, every parameter-free expression of the row data (``x - x.mean()``,
``X / X.std(0)``) that does not commute with row indexing is evaluated once on the full data
and indexed, so it keeps its full-data meaning (:func:`_fold_data_expressions`); so is every
N-sized constant that is not data (``pt.zeros((N, 1))``), which is row data like a data array.
Expressions of :func:`pymc_subsample.Data` rows must be row-wise. The functions take the
:class:`~pymc_subsample.model.likelihood.SubsampledLikelihood` being built (``lik``: its model,
``N``, ``idx``, its compile function and the gathered row inputs).
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

import numpy as np
import pytensor.tensor as pt
from pymc.distributions.distribution import SymbolicRandomVariable
from pymc.distributions.shape_utils import change_dist_size
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.replace import clone_replace
from pytensor.graph.traversal import ancestors, toposort
from pytensor.tensor.basic import get_scalar_constant_value
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.random.op import RandomVariable
from pytensor.tensor.random.type import RandomType
from pytensor.tensor.shape import Shape, Shape_i
from pytensor.tensor.type import TensorType
from pytensor.tensor.type_other import NoneTypeT
from pytensor.tensor.variable import TensorConstant

from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.model.data import row_source_of

#: Seed of the setup checks' random rows and parameter point (construction is deterministic).
CHECK_SEED = 20240611
#: Largest row subset the setup checks evaluate (besides the full pass).
CHECK_ROWS = 16
#: Standard deviation of the random move away from the initial point for the setup checks.
CHECK_STEP = 0.2


@dataclass(frozen=True)
class ObservedBlock:
    """One observed variable rebuilt on a row index.

    Attributes
    ----------
    name : str
        The observed variable's name.
    rv : Variable
        The rebuilt random variable whose data inputs are indexed by ``idx``: a
        ``RandomVariable``, or for mixtures, censored and truncated distributions the
        ``SymbolicRandomVariable`` PyMC builds for them, with batch length ``len(idx)``
        (:func:`distribution_name` names it with its components).
    value : Variable
        Its observed value, indexed by ``idx``.
    data : tuple of Variable
        The model's data containers (``pm.Data`` or constants) that carry the row axis.
    """

    name: str
    rv: Variable
    value: Variable
    data: tuple[Variable, ...]


def leaf_value(var: Variable) -> np.ndarray:
    if isinstance(var, SharedVariable):
        return var.get_value(borrow=True)
    return var.data


def is_data_leaf(var: Variable) -> bool:
    return (
        var.owner is None
        and isinstance(var, SharedVariable | TensorConstant)
        and not isinstance(var.type, RandomType)
        and getattr(var.type, "ndim", 0) >= 1
    )


def observed_shape(value: Variable) -> tuple[int, ...]:
    """The shape of an observed variable's value (data leaf or expression of data)."""
    if value.owner is not None:
        return tuple(int(n) for n in value.shape.eval())
    return tuple(leaf_value(value).shape)


def data_name(var: Variable) -> str:
    return var.name if var.name else f"an unnamed constant of shape {leaf_value(var).shape}"


def first_line(err: Exception) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


def _take_rows(var: Variable, axis: int, idx: Variable) -> Variable:
    """``var`` indexed by ``idx`` along ``axis``."""
    return var[(slice(None),) * axis + (idx,)]


def _replace(outputs: list[Variable], repl: dict[Variable, Variable]) -> list[Variable]:
    """``outputs`` rebuilt with ``repl`` (subgraphs and leaves inside them alike).

    Nodes are remade so that types are inferred anew: a static length ``N`` must become the
    unknown length of ``idx`` (``graph_replace`` would pin it with a failing SpecifyShape).
    """
    if not repl:
        return list(outputs)
    return clone_replace(list(outputs), replace=repl, rebuild_strict=False)


def tolerance(dtype) -> float:
    # 100·√eps relative: 1.5e-6 in float64. A different graph for the same density rounds
    # differently (truncated normals: 2e-8); a coupling of rows changes terms by far more.
    return float(100 * np.sqrt(np.finfo(np.dtype(dtype)).eps)) if np.dtype(dtype).itemsize > 4 \
        else float(np.sqrt(np.finfo(np.dtype(dtype)).eps))


def close_values(ours: np.ndarray, ref: np.ndarray, tol: float) -> np.ndarray:
    return np.isclose(ours, ref, rtol=tol, atol=tol, equal_nan=True)


def _same_values(ours: np.ndarray, ref: np.ndarray) -> bool:
    """Equal shapes and values (to rounding for floats, exactly for integers and booleans)."""
    ours, ref = np.asarray(ours), np.asarray(ref)
    if ours.shape != ref.shape:
        return False
    if ref.dtype.kind in "fc":
        return bool(np.all(close_values(ours, ref, tolerance(ref.dtype))))
    return bool(np.array_equal(ours, ref))




def _is_data_root(var: Variable) -> bool:
    """A root whose value is fixed data (not a parameter, an RNG or a free input)."""
    return isinstance(var, SharedVariable | Constant) and not isinstance(var.type, RandomType)


def _data_expressions(
    outputs: list[Variable], row_leaves: set[Variable], n_rows: int,
    skip: Container[Variable] = (),
) -> list[Variable]:
    """The maximal parameter-free subgraphs of ``outputs`` whose values run over the rows.

    A variable qualifies when every root below it is data (no value variable, no random draw)
    and either it reads a row-data leaf other than through its shape (``X.shape[0]`` must
    follow the index), or it reads no row data at all but has an axis of length ``N``: an
    N-sized constant that is not data (``pt.zeros((N, 1))``) is row data as a data leaf is.
    Such a constant whose static shape is unknown qualifies too (the fold evaluates it).
    Leaves themselves are left out: they are indexed directly; so are the variables in
    ``skip`` (random variables' sizes).
    """
    fixed: dict[Variable, bool] = {}
    rows: dict[Variable, bool] = {}
    touches: dict[Variable, bool] = {}  # reads row data, if only through its shape
    constant: dict[Variable, bool] = {}  # every root a constant (no pm.Data)
    for node in toposort(outputs):
        for inp in node.inputs:
            if inp.owner is None:
                fixed[inp] = _is_data_root(inp)
                rows[inp] = touches[inp] = inp in row_leaves
                constant[inp] = isinstance(inp, Constant)
        # a distribution is not data, even one without a random generator (DiracDelta)
        is_fixed = not isinstance(node.op, RandomVariable | SymbolicRandomVariable) and all(
            fixed[i] for i in node.inputs
        )
        reads_rows = not isinstance(node.op, Shape | Shape_i) and any(rows[i] for i in node.inputs)
        for out in node.outputs:
            fixed[out], rows[out] = is_fixed, reads_rows
            touches[out] = any(touches[i] for i in node.inputs)
            constant[out] = all(constant[i] for i in node.inputs)
    found, seen, stack = [], set(), list(outputs)
    while stack:
        var = stack.pop()
        if var in seen or var.owner is None or var in skip:
            continue
        seen.add(var)
        if fixed[var] and isinstance(var.type, TensorType):
            if rows[var]:
                found.append(var)
                continue
            if not touches[var]:
                # the same value on any rows: only an axis of length N makes it row data
                shape = var.type.shape
                if n_rows > 1 and (n_rows in shape or (None in shape and constant[var])):
                    found.append(var)
                continue
        stack.extend(var.owner.inputs)
    return found


def probe_rows(lik) -> list[np.ndarray]:
    """Overlapping row index sets that expose terms depending on which rows are present.

    A shuffled proper subset, a shuffled set sharing half of it plus other rows and a
    repeated row, and a single row (all of ``[0]`` or ``[0, 0]`` when ``N = 1``).
    """
    rng = np.random.default_rng(CHECK_SEED)
    n = lik.n_rows
    m = max(1, min(n - 1, CHECK_ROWS))
    # O(m) memory whatever N (a permutation of all rows would be N-sized)
    perm = rng.choice(n, size=min(n, 2 * m), replace=False).astype(np.int64)
    first = perm[:m]
    second = rng.permutation(np.concatenate([first[: (m + 1) // 2], perm[m : 2 * m]]))
    second = np.append(second, second[0]).astype(np.int64)
    return [first, second, first[:1].copy()]


def rebuild_on_index(lik, rv: Variable) -> ObservedBlock:
    """``rv`` rebuilt with its row data indexed by ``idx`` and its batch length ``len(idx)``.

    Every random variable in its graph whose batch runs over the rows (the observed one, and
    the components of a mixture, censored, truncated or hurdle distribution) is rebuilt with
    its size changed (:func:`_resized`); the rest of the graph is remade with its row data
    indexed (:func:`_rebuild`).
    """
    model = lik.model
    node = rv.owner
    op = node.op
    if not isinstance(op, RandomVariable | SymbolicRandomVariable):
        raise SubsamplingModelError(
            f"Observed variable '{rv.name}' uses {type(op).__name__}, which pymc-subsample "
            "cannot rebuild on a row index (PyMC distributions such as Normal, Bernoulli, "
            "Poisson, StudentT, mixtures, censored and truncated distributions, and "
            "pm.CustomDist with a logp are supported). Write its per-row log density with "
            "pm.CustomDist(..., logp=...), or sample with NUTS."
        )
    value = model.rvs_to_values[rv]
    if op.ndim_supp >= value.type.ndim:
        raise SubsamplingModelError(
            f"Observed variable '{rv.name}' is a single {type(op).__name__} draw over the "
            "whole data axis, so its log-likelihood is not a sum over rows. Subsampling "
            "needs independent rows: give it one draw per row (rows on the first axis), "
            "or sample with NUTS."
        )
    inputs = model.replace_rvs_by_values(node.inputs)
    # sizes (a constant ``[N, k]``) are not row data: they take the row count of idx
    sizes = {
        size
        for n in (*toposort(inputs), node)
        if isinstance(n.op, RandomVariable | SymbolicRandomVariable)
        and (size := _size_param(n)) is not None
    }
    repl, data = _row_replacements(lik, rv.name, inputs, value, skip=sizes)
    *new_inputs, new_value = _rebuild(lik, rv.name, [*inputs, value], repl)
    shape = observed_shape(value)
    batch = shape[: len(shape) - op.ndim_supp]
    new_rv = _resized(lik, rv.name, node, new_inputs, batch[1:])[node.outputs.index(rv)]
    return ObservedBlock(rv.name, new_rv, new_value, data)


def distribution_name(rv: Variable) -> str:
    """The distribution of ``rv`` as PyMC prints it, with its component distributions.

    ``Censored(Weibull)``, ``Mixture(DiracDelta, Poisson)`` (a zero-inflated Poisson),
    ``Hurdle(DiracDelta, TruncatedPoisson)``, ``Categorical`` (also ``OrderedLogistic``,
    which PyMC builds as one). The components are the inputs that are distributions
    themselves: in a rebuilt block (:class:`ObservedBlock`) the model's own random variables
    have been replaced by their values.
    """
    op = rv.owner.op
    # PyMC's display name ("Weibull", not the op's class WeibullBetaRV); ops outside PyMC's
    # distributions may have none
    name = getattr(op, "_print_name", (type(op).__name__.removesuffix("RV"),))[0]
    parts = [
        distribution_name(i) for i in rv.owner.inputs
        if i.owner is not None and isinstance(i.owner.op, RandomVariable | SymbolicRandomVariable)
    ]
    return f"{name}({', '.join(parts)})" if parts else name


def _size_param(node: Apply) -> Variable | None:
    """A random variable's ``size`` input, or ``None`` (none given, or none declared)."""
    try:
        size = node.op.size_param(node)
    except ValueError:  # a SymbolicRandomVariable without extended_signature (TruncatedRV)
        return None
    return None if size is None or isinstance(size.type, NoneTypeT) else size


def _row_batched(lik, node: Apply, reads_rows: bool) -> bool:
    """A random variable whose batch runs over the rows: its first batch axis has length
    ``N`` (static shape or constant size), or it reads row data (``reads_rows``: PyMC's
    truncated components may not know their static length)."""
    if not isinstance(node.op, RandomVariable | SymbolicRandomVariable):
        return False
    out = node.default_output()
    if out.type.ndim <= node.op.ndim_supp:
        return False
    if reads_rows or out.type.shape[0] == lik.n_rows:
        return True
    size = _size_param(node)
    return size is not None and _leading_length(size) == lik.n_rows


def _rebuild(lik, name: str, outputs: list[Variable], repl: dict) -> list[Variable]:
    """``outputs`` with ``repl`` applied and every row-batched random variable resized.

    Nodes are remade so that types are inferred anew: a static length ``N`` must become the
    unknown length of ``idx`` (``graph_replace`` would pin it with a failing SpecifyShape).
    A random variable whose batch runs over the rows is rebuilt by :func:`_resized`, not
    re-applied: a ``SymbolicRandomVariable`` (PyMC's Censored, Truncated, Weibull, the
    components of a hurdle) has an inner graph whose input types carry the static ``N``.
    """
    row_inputs = {lik.idx, *(rows for rows, _ in lik.gathered.values())}
    memo = dict(repl)
    # the replacements that carry the row axis (not a data expression folded to a constant)
    on_rows = {new for new in repl.values() if any(v in row_inputs for v in ancestors([new]))}
    for node in toposort(outputs, blockers=list(repl)):
        new_inputs = [memo.get(i, i) for i in node.inputs]
        reads_rows = any(i in on_rows for i in new_inputs)
        if _row_batched(lik, node, reads_rows):
            out = node.default_output()
            batch = out.type.shape[1 : out.type.ndim - node.op.ndim_supp]
            if None in batch:
                raise SubsamplingModelError(
                    f"Observed variable '{name}' has a component {type(node.op).__name__} "
                    "whose shape beyond the rows is not known before sampling, which "
                    "pymc-subsample cannot rebuild on a row index. Give the component a "
                    "fixed shape, write its per-row log density with pm.CustomDist(..., "
                    "logp=...), or sample with NUTS."
                )
            new_outputs = _resized(lik, name, node, new_inputs, batch)
            reads_rows = True
        elif any(new is not old for new, old in zip(new_inputs, node.inputs, strict=True)):
            new_outputs = node.clone_with_new_inputs(new_inputs, strict=False).outputs
        else:
            continue
        memo.update(zip(node.outputs, new_outputs, strict=True))
        if reads_rows:
            on_rows.update(new_outputs)
    return [memo.get(out, out) for out in outputs]


def _resized(
    lik, name: str, node: Apply, new_inputs: list[Variable], trailing: tuple[int, ...]
) -> list[Variable]:
    """The outputs of random variable ``node`` on ``new_inputs`` (row data indexed), with batch
    shape ``(len(idx), *trailing)``.

    A ``RandomVariable`` is made anew with that size (or none, when it had none: its
    parameters give the shape). A ``SymbolicRandomVariable`` is resized by PyMC's own
    :func:`~pymc.distributions.shape_utils.change_dist_size`, which builds a fresh inner graph
    (censored, truncated, mixtures resize their components likewise), from a carrier node that
    holds the indexed inputs and is only read by the resizing, never run.
    """
    op = node.op
    new_size = pt.concatenate(
        [lik.idx.shape[:1], pt.as_tensor(np.asarray(trailing, dtype=np.int64))]
    )
    carrier = Apply(op, new_inputs, [out.type() for out in node.outputs])
    if isinstance(op, RandomVariable):
        size = op.size_param(carrier)
        if isinstance(size.type, NoneTypeT):
            new_size = size
        return op.make_node(op.rng_param(carrier), new_size, *op.dist_params(carrier)).outputs
    try:
        new_rv = change_dist_size(carrier.outputs[node.outputs.index(node.default_output())],
                                  new_size)
    except (NotImplementedError, ValueError) as err:  # one PyMC cannot resize
        raise SubsamplingModelError(
            f"Observed variable '{name}' uses {type(op).__name__}, which pymc-subsample "
            f"cannot rebuild on a row index ({first_line(err)}). Write its per-row log "
            "density with pm.CustomDist(..., logp=...), or sample with NUTS."
        ) from err
    new_outputs = new_rv.owner.outputs
    if len(new_outputs) != len(node.outputs):  # not seen in PyMC's distributions
        raise SubsamplingModelError(
            f"Observed variable '{name}' uses {type(op).__name__}, which PyMC resizes into a "
            "different op, so pymc-subsample cannot rebuild it on a row index. Write its "
            "per-row log density with pm.CustomDist(..., logp=...), or sample with NUTS."
        )
    return list(new_outputs)


def _leading_length(size: Variable) -> int | None:
    """The first entry of a random variable's ``size`` when it is a known constant."""
    if isinstance(size.type, NoneTypeT) or size.type.shape[0] == 0:
        return None
    try:
        return int(get_scalar_constant_value(size[0]))
    except NotScalarConstantError:
        return None


def _row_replacements(
    lik,
    name: str,
    graphs: list[Variable],
    value: Variable,
    skip: Container[Variable] = (),
) -> tuple[dict[Variable, Variable], tuple[Variable, ...]]:
    """Replacements indexing the row data of ``graphs`` and ``value`` by ``idx``.

    Returns the replacements (row-data leaves and folded data expressions) and the
    row-data leaves themselves; leaves in ``skip`` are never taken as row data.
    """
    leaves = [v for v in ancestors([*graphs, value]) if is_data_leaf(v) and v not in skip]
    axes = {}
    for var in leaves:
        axis = row_axis(lik, leaf_value(var).shape, name, f"data '{data_name(var)}'")
        if axis is not None:
            axes[var] = axis
    data = list(axes)
    for var in data:
        source = row_source_of(var)
        if source is not None and axes[var] != 0:
            raise SubsamplingModelError(
                f"The pms.Data '{data_name(var)}' used by observed variable '{name}' has "
                f"shape {source.shape}: its rows must run along the first axis. Write the "
                "data with one row per data point (transpose before writing)."
            )
        where = "observed values" if var is value else "data"
        not_finite = (
            f"The {where} '{data_name(var)}' used by observed variable '{name}' contain NaN "
            "or infinite entries. Drop or impute those rows before building the model."
        )
        if source is not None:
            # checked as the build reads its rows: no pass over the data of its own
            source.check_finite_on_read(not_finite)
            continue
        arr = leaf_value(var)
        if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
            raise SubsamplingModelError(not_finite)
    repl = {var: _rows_on_index(lik, var, axis) for var, axis in axes.items()}
    lik._row_axes.update({var: axis for var, axis in axes.items() if axis != 0})
    repl.update(_fold_data_expressions(lik, name, [*graphs, value], set(data), repl, skip))
    return repl, tuple(data)


def _rows_on_index(lik, var: Variable, axis: int) -> Variable:
    """``var``'s rows ``idx``: indexed in the graph, or a gathered input for pms.Data."""
    source = row_source_of(var)
    if source is None:
        return _take_rows(var, axis, lik.idx)
    if var not in lik.gathered:
        rows = var.type.clone(shape=(None,) * var.type.ndim)(f"{var.name}[idx]")
        lik.gathered[var] = (rows, source)
    return lik.gathered[var][0]


def row_axis(lik, shape: tuple[int, ...], name: str, what: str) -> int | None:
    """The axis of ``shape`` that runs over the data rows, or ``None`` if there is none.

    The first axis when its length is ``N`` (the convention); otherwise the only axis of
    length ``N`` (``Xt`` of shape ``(d, N)``); several such axes are ambiguous.
    """
    if len(shape) == 0:
        return None
    if shape[0] == lik.n_rows:
        return 0
    if lik.n_rows < 2:
        return None
    axes = [a for a, length in enumerate(shape) if length == lik.n_rows]
    if len(axes) > 1:
        raise SubsamplingModelError(
            f"The {what} used by observed variable '{name}' has shape {tuple(shape)}: axes "
            f"{axes} all have the number of rows N = {lik.n_rows}, so the row axis is "
            "ambiguous. Put one row per data point on the first axis of every data array "
            "(e.g. pass X rather than X.T), or sample with NUTS."
        )
    return axes[0] if axes else None


def _fold_data_expressions(
    lik, name: str, outputs: list[Variable], row_leaves: set[Variable], leaf_repl: dict,
    skip: Container[Variable] = (),
) -> dict[Variable, Variable]:
    """Replacements freezing the row-data expressions that do not commute with indexing.

    Each maximal parameter-free subgraph that reads row data (``x - x.mean()``), or is an
    N-sized constant (``pt.zeros((N, 1))``; :func:`_data_expressions`), is evaluated on all
    rows. If it has no row axis (``X.mean(0)``) it becomes a constant; if it does and
    rebuilding it on a few row sets gives the full-data values of those rows (``X[:, 0]``,
    ``log(x)``), it stays symbolic, so ``pm.set_data`` keeps reaching it; otherwise it becomes
    a constant indexed by ``idx`` along its row axis, as a data array is.
    """
    exprs = _data_expressions(outputs, row_leaves, lik.n_rows, skip)
    on_sources = [e for e in exprs if any(v in lik.gathered for v in ancestors([e]))]
    _check_row_wise_on_sources(lik, name, on_sources, leaf_repl)
    exprs = [e for e in exprs if e not in on_sources]
    if not exprs:
        return {}
    on_idx = _replace(exprs, leaf_repl)
    fn = lik.compile([lik.idx], [*exprs, *on_idx])
    probes = probe_rows(lik)
    try:
        runs = [fn(rows) for rows in probes]
    except SubsamplingModelError:  # the rows read hold a NaN (RowSource.checked)
        raise
    except Exception as err:  # reported with the variable's name
        raise SubsamplingModelError(
            f"Evaluating the data expressions of observed variable '{name}' on a subset of "
            f"rows failed ({first_line(err)}). Put one row "
            "per data point on the first axis of every data array, or sample with NUTS."
        ) from err
    repl = {}
    for k, expr in enumerate(exprs):
        full = np.asarray(runs[0][k])
        names = sorted({data_name(v) for v in ancestors([expr]) if v in row_leaves})
        what = f"expression of the data {names}" if names else (
            f"constant expression of shape {full.shape}")
        if full.dtype.kind in "fc" and np.isnan(full).any():
            raise SubsamplingModelError(
                f"The {what} used by observed variable '{name}' evaluates to NaN on the full "
                "data (e.g. dividing by the standard deviation of a constant column). Fix "
                "the expression or drop the offending column before building the model."
            )
        axis = row_axis(lik, full.shape, name, what)
        if axis is None:
            repl[expr] = pt.constant(full, dtype=expr.dtype)
            continue
        row_wise = all(
            _same_values(run[len(exprs) + k], np.take(full, rows, axis=axis))
            for rows, run in zip(probes, runs, strict=True)
        )
        if not row_wise:
            const = pt.constant(full, dtype=expr.dtype)
            repl[expr] = _take_rows(const, axis, lik.idx)
    return repl


def _check_row_wise_on_sources(
    lik, name: str, exprs: list[Variable], leaf_repl: dict
) -> None:
    """Refuse expressions of pms.Data rows that read other rows (``x - x.mean()``).

    They cannot be folded on the full data without reading it all, so each must be
    row-wise: evaluated on overlapping row sets (:meth:`_probe_rows`) and on all of them
    together, a row's value must not depend on which other rows are present.
    """
    if not exprs:
        return
    on_idx = _replace(exprs, leaf_repl)
    fn = lik.compile([lik.idx], on_idx, once=True)
    probes = probe_rows(lik)
    union = np.unique(np.concatenate(probes))
    together = fn(union)
    runs = [fn(rows) for rows in probes]
    for k, expr in enumerate(exprs):
        ref = np.asarray(together[k])
        if ref.ndim >= 1 and ref.shape[0] == union.size and all(
            _same_values(run[k], ref[np.searchsorted(union, rows)])
            for rows, run in zip(probes, runs, strict=True)
        ):
            continue
        names = sorted({data_name(v) for v in ancestors([expr]) if v in lik.gathered})
        raise SubsamplingModelError(
            f"Observed variable '{name}' uses an expression of the pms.Data {names} that "
            "combines rows (a mean, a standard deviation, a sort along the rows). Reading "
            "it needs every row: compute it before writing the data (standardise the "
            "columns in the writer), or use pm.Data for data that fit in memory."
        )
