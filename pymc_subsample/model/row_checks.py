"""The refusals of the setup: a model whose rows are not independent given its parameters.

Static checks on the model (every free variable sampled, none discrete or per-row, one data
axis shared by the observed variables, a prior free of the row data) and the numerical check
of :func:`check_rows_independent`: the per-row terms evaluated on overlapping row sets must be
the model's own, so a likelihood that couples rows (a mean, sort, cumulative sum, scan or
matrix product along the row axis of a parameter-dependent quantity) is refused with the ops
that do it named, never subsampled. Each error is a
:class:`~pymc_subsample.errors.SubsamplingModelError` saying what to change.
"""

from __future__ import annotations

from typing import NoReturn

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.gradient import grad, jacobian
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.traversal import ancestors, toposort
from pytensor.graph.utils import MethodNotDefined
from pytensor.ifelse import ifelse
from pytensor.scan.op import Scan
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.math import All, Any, Dot
from pytensor.tensor.sort import ArgSortOp, SortOp
from pytensor.tensor.type import TensorType

from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.links import stable_bernoulli_logp
from pymc_subsample.model.rebuild import (
    CHECK_SEED,
    CHECK_STEP,
    close_values,
    data_name,
    distribution_name,
    first_line,
    is_data_leaf,
    leaf_value,
    observed_shape,
    probe_rows,
    tolerance,
)

#: Most rows for which :func:`check_rows_independent` compares the terms with the model's own
#: per-row log density on all N rows, an O(N) evaluation of the model's graph; above, with
#: our terms on the union of the check's row sets. The whole check of a logistic regression,
#: d = 10, in CPU seconds at a load of 7-12: 0.19-0.21 (all rows) against 0.12 (the union) at
#: 10⁶ rows, 0.9-1.3 against 0.09 at 10⁷.
FULL_REFERENCE_ROWS = 1_000_000
#: from this many rows the check is compiled to C where an elementwise op has no NumPy ufunc
#: (``many_rows``): element by element in Python such ops cost ~26 µs a row (26 s of an ordinal
#: probit's setup at 10⁶), compiling them ~10–15 s on an empty compile cache (an ordinal probit
#: or hurdle negative binomial at 20,000 rows: 55 → 67 s and 29 → 42 s cold)
COMPILED_CHECK_ROWS = 200_000


def check_vars(model: pm.Model, vars) -> list[Variable]:
    """The value variables a step samples: all of the model's, in its order."""
    all_vars = list(model.value_vars)
    if vars is None:
        return all_vars
    vars = list(vars)
    names = {v.name for v in vars}
    # named as the user wrote them: `sigma`, not its value variable `sigma_log__`
    missing = [model.values_to_rvs[v].name for v in all_vars if v.name not in names]
    if missing:
        raise SubsamplingModelError(
            f"A subsampling step must sample every free variable of the model together, but "
            f"{missing} would be left to another step. Pass no `vars` (or all of them): the "
            "control variates and bounds are only valid when all parameters move together."
        )
    return [v for v in all_vars if v.name in names]


def check_free_variables(model: pm.Model) -> None:
    obs_names = {rv.name for rv in model.observed_RVs}
    for rv in model.free_RVs:
        base = rv.name.removesuffix("_unobserved")
        if rv.name.endswith("_unobserved") and f"{base}_observed" in obs_names:
            raise SubsamplingModelError(
                f"Observed variable '{base}' has missing values (NaN or masked entries), so "
                f"PyMC imputes them with the per-row latent variable '{rv.name}'. Subsampling "
                "needs rows that are independent given global parameters: drop the rows with "
                "missing values before building the model, or sample it with NUTS."
            )
        value = model.rvs_to_values[rv]
        if value.dtype in pm.discrete_types:
            raise SubsamplingModelError(
                f"Free variable '{rv.name}' is discrete. Subsampling steps move all parameters "
                "together by continuous proposals (pCN, independence or random walk): "
                "marginalise it out, or assign it to another step "
                "(e.g. pm.CategoricalGibbsMetropolis) and sample the model without "
                "pymc-subsample."
            )


def raise_no_second_derivative(lik, err: MethodNotDefined) -> NoReturn:
    """Refuse order-2 control variates for terms PyTensor cannot differentiate twice.

    ``err`` is PyTensor's error for an op without a gradient met while differentiating the
    gradient (the truncated negative binomial's log CDF: ``betainc``, whose gradient is a
    ``ScalarLoop``). The refusal names the first observed variable whose terms have no
    Hessian, its distribution and the op.
    """
    op = err.args[2] if len(err.args) > 2 else str(err)
    culprit = lik.blocks[0]
    for block, term in zip(lik.blocks, lik.block_terms, strict=True):
        try:
            jacobian(grad(term.sum(), lik.theta), lik.theta, vectorize=True)
        except MethodNotDefined:
            culprit = block
            break
    raise SubsamplingModelError(
        f"Observed variable '{culprit.name}' ({distribution_name(culprit.rv)}): PyTensor has "
        f"no second derivative of its log density ({op} has no gradient), which the order-2 "
        "control variates need. Use cv_order=1 (the Laplace frame then differentiates the "
        "gradient numerically), or sample with NUTS."
    ) from err


def find_data_axis(model: pm.Model) -> int:
    if not model.observed_RVs:
        raise SubsamplingModelError(
            "The model has no observed variables, so there is no data to subsample. "
            "Use pm.sample() with NUTS."
        )
    lengths = {}
    for rv in model.observed_RVs:
        shape = observed_shape(model.rvs_to_values[rv])
        if len(shape) == 0:
            raise SubsamplingModelError(
                f"Observed variable '{rv.name}' is a scalar; subsampling needs a data axis. "
                "Give every observed variable one row per data point."
            )
        lengths[rv.name] = int(shape[0])
        ndim_supp = getattr(rv.owner.op, "ndim_supp", 0)
        batch = shape[: len(shape) - ndim_supp] if ndim_supp else shape
        if shape[0] == 1 and int(np.prod(batch)) > 1:
            # one row of many independent draws: the data points run along another axis
            raise SubsamplingModelError(
                f"Observed variable '{rv.name}' has shape {shape}: a single row along the "
                "first axis, so its data points must run along another axis. Subsampling "
                "draws rows of the first axis: put one data point per row on the first "
                "axis (e.g. observed=y.T with the data transposed to match)."
            )
    if len(set(lengths.values())) > 1:
        raise SubsamplingModelError(
            f"Observed variables have different numbers of rows: {lengths}. Subsampling "
            "needs every observed variable to share the row axis (one entry per data point); "
            "combine them into one observed variable per row or sample with NUTS."
        )
    n_rows = next(iter(lengths.values()))
    if n_rows == 0:
        raise SubsamplingModelError(
            f"Observed variable '{model.observed_RVs[0].name}' has no rows. Pass a "
            "non-empty data set."
        )
    return n_rows


def check_latent_rows(lik, model: pm.Model) -> None:
    if lik.n_rows < 2:
        return
    for rv in model.free_RVs:
        shape = lik.initial_point[model.rvs_to_values[rv].name].shape
        if lik.n_rows in shape:
            raise SubsamplingModelError(
                f"Free variable '{rv.name}' has shape {shape}, one entry per data row "
                f"(N = {lik.n_rows}): a per-row latent variable. Subsampling needs the "
                "likelihood to be a sum over rows given global parameters: marginalise "
                f"'{rv.name}' out of the likelihood, or sample this model with NUTS."
            )


def check_prior_free_of_data(lik, logp0) -> None:
    def row_data(graph):
        return [v for v in ancestors([graph])
                if is_data_leaf(v) and leaf_value(v).shape[0] == lik.n_rows
                and lik.n_rows > 1]

    rows = row_data(logp0)
    if rows:
        # name the term: each Potential, or the free variable whose prior uses the data
        users = [f"the pm.Potential '{t.name}'" for t in lik.model.potentials
                 if row_data(t)]
        users += [f"the prior of '{t.name}'" for t in lik.model.free_RVs if row_data(t)]
        where = users[0] if users else "a pm.Potential or a prior"
        raise SubsamplingModelError(
            f"A term outside the observed variables, {where}, uses the row data "
            f"'{data_name(rows[0])}'. Subsampling can only see per-row terms of observed "
            "variables: express that term as an observed variable, or sample with NUTS."
        )


def _model_row_terms(lik) -> list[Variable]:
    """The model's own per-row log density of each observed variable on all N rows."""
    out = []
    for rv, block in zip(lik.model.observed_RVs, lik.blocks, strict=True):
        # the same stable probit/cloglog as the indexed terms (PyMC's own cancels in the
        # tails)
        stable = stable_bernoulli_logp(rv, lik.model.rvs_to_values[rv])
        if stable is not None:
            # the model's random variables in it stand for their value variables
            out.extend(lik.model.replace_rvs_by_values([stable]))
            continue
        (logp,) = lik.model.logp(vars=[rv], sum=False, jacobian=False)
        if logp.ndim == 0:
            raise SubsamplingModelError(
                f"The log-likelihood of observed variable '{block.name}' is a single joint "
                "term over all rows, not a sum over rows. Subsampling needs independent "
                "rows: reshape it so each row is one draw, or sample with NUTS."
            )
        if logp.ndim > 1:
            logp = logp.sum(axis=tuple(range(1, logp.ndim)))
        out.append(logp)
    return out


def check_rows_independent(lik) -> None:
    """Each observed variable's per-row terms must be the model's own, on any row set.

    At a random point near the initial one, the terms on the first chunk of rows and on
    overlapping row subsets (:meth:`_probe_rows`) are compared with a reference: the
    model's per-row log density on the full data when ``N ≤`` :data:`FULL_REFERENCE_ROWS`
    (which also checks the terms rebuilt on a row index against the model's own graph), or,
    for more rows and for models with pms.Data rows (whose Zarr or Dask rows are not in the
    model's graph at all), our own terms on all of these rows together, so that a row's
    term must not change with the other rows present: a check of O(65,536) rows whatever
    ``N`` (the model's terms on 10⁷ rows were 0.6 s of a 3.8 s setup). A likelihood that
    couples rows (a mean, sort, cumulative sum or matrix product along the row axis) gives
    other values on a subset whatever op does it, so either reference catches every
    coupling the probes can see; the error then names the ops.
    """
    rng = np.random.default_rng(CHECK_SEED)
    theta0 = lik.ravel(lik.initial_point)
    theta = theta0 + CHECK_STEP * rng.standard_normal(lik.dim)
    ours = lik.in_theta(lik._block_terms)
    sets = [next(iter(lik.row_chunks())), *probe_rows(lik)]
    many_rows = lik.n_rows >= COMPILED_CHECK_ROWS
    if lik.gathered or lik.n_rows > FULL_REFERENCE_ROWS:
        ref_rows = np.unique(np.concatenate(sets))
        terms_fn = lik.compile([lik.theta, lik.idx], ours, once=True, many_rows=many_rows)

        def run(theta: np.ndarray, rows: np.ndarray, with_ref: bool) -> list:
            refs = list(terms_fn(theta, ref_rows)) if with_ref else []
            return [*terms_fn(theta, rows), *refs]

        reference = f"with the {ref_rows.size} rows of the check's row sets together"
    else:
        ref_rows = None
        # one compiled function: our terms on the rows idx and, when asked for (a lazy
        # branch), the model's own per-row terms on all rows
        want_ref = pt.scalar("want_ref", dtype="bool")
        refs = [
            ifelse(want_ref, r, pt.zeros((0,), dtype=r.dtype))
            for r in lik.in_theta(_model_row_terms(lik))
        ]
        check_fn = lik.compile([lik.theta, lik.idx, want_ref], [*ours, *refs], once=True,
                               many_rows=many_rows)

        def run(theta: np.ndarray, rows: np.ndarray, with_ref: bool) -> list:
            return check_fn(theta, rows, np.bool_(with_ref))

        reference = f"in the model on all N = {lik.n_rows} rows"

    def evaluate(theta: np.ndarray, rows: np.ndarray, with_ref: bool) -> list[np.ndarray]:
        try:
            return run(theta, rows, with_ref)
        except SubsamplingModelError:  # the rows read hold a NaN (RowSource.checked)
            raise
        except Exception as err:  # reported with the variable's name
            _raise_failed(lik, ours, theta, rows, err)

    out = evaluate(theta, sets[0], True)
    if not all(np.all(np.isfinite(r)) for r in out[len(ours):]):
        # the random point may leave a support: fall back to the initial point
        theta = theta0
        out = evaluate(theta, sets[0], True)
    ref = [np.asarray(r) for r in out[len(ours):]]
    n_ref = lik.n_rows if ref_rows is None else ref_rows.size
    for j, block in enumerate(lik.blocks):
        if ref[j].shape != (n_ref,):
            _raise_not_row_sum(lik, block.name, f"its log density has shape {ref[j].shape}")
    # the first chunk and overlapping random subsets: a coupling changes terms on subsets,
    # so this needs no pass of our terms over all rows
    for k, rows in enumerate(sets):
        values = out if k == 0 else evaluate(theta, rows, False)
        at = rows if ref_rows is None else np.searchsorted(ref_rows, rows)
        for j, block in enumerate(lik.blocks):
            got = np.asarray(values[j])
            if got.shape != rows.shape:
                _raise_not_row_sum(
                    lik, block.name,
                    f"its terms on {len(rows)} rows have shape {got.shape}, so some data "
                    "were not indexed by row and were broadcast",
                )
            expected = ref[j][at]
            bad = np.flatnonzero(~close_values(got, expected, tolerance(ours[j].dtype)))
            if bad.size:
                _raise_coupled(lik, j, theta, rows, got, expected, int(bad[0]), reference)


def _raise_failed(
    lik, ours: list[Variable], theta: np.ndarray, rows: np.ndarray, err: Exception
) -> NoReturn:
    """Name the observed variable whose terms fail on ``rows`` (one compile per block)."""
    name = lik.blocks[0].name
    for j, block in enumerate(lik.blocks if len(lik.blocks) > 1 else ()):
        try:
            lik.compile([lik.theta, lik.idx], ours[j])(theta, rows)
        except Exception:  # the first block that fails on its own
            name = block.name
            break
    _raise_not_row_sum(
        lik, name, f"evaluating its terms on {len(rows)} rows failed ({first_line(err)})", err
    )


def _other_axes_note(lik) -> str:
    """Which data were indexed along an axis other than the first (a possible cause)."""
    axes = [f"'{data_name(v)}' (axis {a})" for v, a in lik._row_axes.items()]
    if not axes:
        return ""
    return f" Data taken as having rows on another axis than the first: {', '.join(axes)}."


def _raise_not_row_sum(
    lik, name: str, what: str, cause: Exception | None = None
) -> NoReturn:
    raise SubsamplingModelError(
        f"Observed variable '{name}': {what}; its log-likelihood is not a sum over rows along "
        f"the first axis (N = {lik.n_rows}).{_other_axes_note(lik)} Put one row per data "
        "point on the first axis of the observed values and of every data array, or sample "
        "with NUTS."
    ) from cause


def _raise_coupled(
    lik, j: int, theta: np.ndarray, rows: np.ndarray, got: np.ndarray,
    expected: np.ndarray, k: int, reference: str,
) -> NoReturn:
    """Refuse block ``j``: its term of row ``rows[k]`` is not ``expected[k]``, its value
    ``reference`` (on all rows in the model, or with other rows present)."""
    block = lik.blocks[j]
    row = int(rows[k])
    if np.array_equal(rows, np.arange(lik.n_rows)):
        _raise_not_row_sum(
            lik, block.name,
            f"the term of row {row} is {got[k]:.8g} but {expected[k]:.8g} {reference}",
        )
    ops = _coupling_ops(lik, j, theta)
    cause = (
        f"its log-probability graph applies {', '.join(ops)} along the row axis"
        if ops
        else "an operation in its log-probability graph mixes rows"
    )
    raise SubsamplingModelError(
        f"Observed variable '{block.name}' couples its rows: row {row}'s log-likelihood term "
        f"is {got[k]:.8g} when evaluated with {len(rows)} rows but {expected[k]:.8g} "
        f"{reference} ({cause}). Subsampling needs each row's term "
        "to depend only on that row's data and the global parameters: compute data "
        "summaries (means, scales) from pm.Data or constants alone, keep means, sums, "
        "sorts, cumulative sums and matrix products over rows out of the likelihood, or "
        f"sample this model with NUTS.{_other_axes_note(lik)}"
    )


def _coupling_ops(lik, j: int, theta: np.ndarray) -> list[str]:
    """Names of the ops of block ``j`` that act along the row axis (best effort)."""
    graph = lik.in_theta([lik._block_terms[j]])[0]
    # run on a number of rows no other axis has, so an axis of that length is the row axis
    leaves = [v for v in ancestors([graph]) if is_data_leaf(v)]
    lengths = {lik.dim, *(n for v in leaves for n in leaf_value(v).shape)}
    rows = next(n for n in range(7, 7 + len(lengths) + 1) if n not in lengths)
    depends = {lik.idx}
    nodes = []
    for node in toposort([graph]):
        if any(i in depends for i in node.inputs):
            depends.update(node.outputs)
            nodes.append(node)
    inputs = [i for node in nodes for i in node.inputs if isinstance(i.type, TensorType)]
    try:
        fn = lik.compile([lik.theta, lik.idx], [i.shape for i in inputs])
        idx = np.resize(np.arange(lik.n_rows, dtype=np.int64), rows)
        shapes = {i: tuple(map(int, s)) for i, s in zip(inputs, fn(theta, idx), strict=True)}
    except Exception:  # only a hint for the message
        return []
    return _row_mixing_ops(nodes, shapes, rows)


def _row_mixing_ops(nodes, shapes: dict[Variable, tuple[int, ...]], rows: int) -> list[str]:
    """Ops that reduce, sort, scan or contract along an axis of length ``rows``.

    ``shapes`` holds the input shapes observed when the graph ran on ``rows`` rows (a length
    chosen to differ from every other axis), so an axis of that length is the row axis.
    """

    def along(var, axes) -> bool:
        shape = shapes.get(var)
        if shape is None:
            return False
        axes = range(len(shape)) if axes is None else axes
        return any(shape[a] == rows for a in axes if -len(shape) <= a < len(shape))

    found = []
    for node in nodes:
        op = node.op
        if isinstance(op, Scan):
            hit = any(shapes.get(i) is not None and rows in shapes[i] for i in node.inputs)
        elif isinstance(op, SortOp | ArgSortOp):
            axis = node.inputs[1]
            axis = axis.data if isinstance(axis, Constant) else None
            hit = along(node.inputs[0], None if axis is None else [int(axis)])
        elif isinstance(op, Dot):
            hit = along(node.inputs[0], [-1]) or along(node.inputs[1], [0])
        elif isinstance(op, Blockwise):
            out_dims = {d for sig in op.outputs_sig for d in sig}
            hit = False
            for inp, sig in zip(node.inputs, op.inputs_sig, strict=True):
                # a matrix product contracts the core dims missing from its output; other
                # core ops (solve, cholesky) mix every core axis
                matmul = isinstance(op.core_op, Dot)
                core = [a - len(sig) for a, d in enumerate(sig) if not matmul or d not in out_dims]
                hit = hit or along(inp, core)
        elif isinstance(op, All | Any):
            continue  # PyMC's parameter checks (`all(p >= 0)`), not a coupling of the terms
        elif hasattr(op, "axis"):
            # CAReduce (sum, mean, max), CumOp, Softmax, Argmax: `axis=None` means all axes
            axis = op.axis
            hit = along(node.inputs[0], None if axis is None else np.atleast_1d(axis).tolist())
        else:
            continue
        if hit and str(op) not in found:
            found.append(str(op))
    return found
