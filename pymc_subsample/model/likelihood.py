"""The subsampled likelihood: a PyMC model split into per-row terms and everything else.

For data ``x_1..x_N`` that are independent given the parameters, the model's log density is

    log π(θ) = log p0(θ) + (1/K) Σ_i ℓ_i(θ)

where ``θ`` is the raveled vector of the sampled (transformed) value variables, ``ℓ_i`` is row
``i``'s log-likelihood summed over every observed variable, ``K`` the temperature and
``log p0`` every other term (priors, Jacobians of transforms, potentials). See
``docs/methods/mhss.md`` ("Setting") and Prado, Nemeth & Sherlock (2024), Sec. 2.

:class:`SubsampledLikelihood` finds the data axis in a PyMC model and compiles, once, PyTensor
functions of ``(θ, idx)`` whose cost is proportional to ``len(idx)``. Its pieces live beside it:
:mod:`~pymc_subsample.model.rebuild` rebuilds the observed variables on ``idx`` (data
expressions folded), :mod:`~pymc_subsample.model.row_checks` refuses a model whose rows are not
independent (a likelihood that couples rows is never subsampled), and
:mod:`~pymc_subsample.model.cluster` reads ``pms.Data`` rows outside the compiled functions and
runs full-data passes block by block, locally or on a ``dask.distributed`` cluster.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Sequence
from functools import cached_property

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.pytensorf import compile as pm_compile
from pytensor.compile.mode import Mode, get_mode, optdb
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.gradient import grad
from pytensor.graph.basic import Variable
from pytensor.graph.replace import graph_replace
from pytensor.graph.rewriting.basic import in2out, node_rewriter
from pytensor.graph.traversal import ancestors
from pytensor.scalar.basic import Add, Cast, Mul, Second
from pytensor.scalar.math import Softplus
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.extra_ops import broadcast_shape

from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.model.cluster import SETUP_CHUNK_ROWS, GatheringFunction, map_row_blocks
from pymc_subsample.model.function_cache import compile_cached
from pymc_subsample.model.numpy_pass_ops import matrix_vector, take_rows
from pymc_subsample.model.rebuild import ObservedBlock, rebuild_on_index
from pymc_subsample.model.row_checks import (
    check_free_variables,
    check_latent_rows,
    check_prior_free_of_data,
    check_rows_independent,
    check_vars,
    find_data_axis,
)
from pymc_subsample.model.row_logp import row_logp
from pymc_subsample.model.row_sources import RowSource
from pymc_subsample.model.ufunc_linker import UFUNC_LINKER

__all__ = ["SubsampledLikelihood", "ObservedBlock"]

@node_rewriter([Elemwise])
def _binary_sums_and_products(fgraph, node):
    """An n-ary product or sum as a chain of binary ones. ``FAST_COMPILE``'s rewrites fold
    products into one n-ary node, which NumPy has no ufunc for, so its Python linker evaluates
    it element by element (5 s on 10⁶ Student-t rows); a binary one is one ufunc call."""
    op = node.op.scalar_op
    if not isinstance(op, Mul | Add) or len(node.inputs) <= 2:
        return None
    combine = pt.mul if isinstance(op, Mul) else pt.add
    out = node.inputs[0]
    for x in node.inputs[1:]:
        out = combine(out, x)
    return [pt.cast(out, node.outputs[0].dtype)]


@node_rewriter([Elemwise])
def _as_ufuncs(fgraph, node):
    """Elementwise ops NumPy has no ufunc for, written without them (the Python linker would
    otherwise call them once per element): ``softplus(x) = max(x, 0) + log1p(exp(−|x|))``, the
    same stable value; a cast to float64 as a product with ``1.0``, exact; ``second(x, y)``
    (``y`` filled to the shape of both, in gradients) as a broadcast."""
    op = node.op.scalar_op
    x = node.inputs[0]
    if isinstance(op, Softplus):
        out = pt.maximum(x, 0) + pt.log1p(pt.exp(-pt.abs(x)))
    elif isinstance(op, Cast) and node.outputs[0].dtype == "float64":
        out = pt.mul(x, pt.constant(1.0, dtype="float64"))
    elif isinstance(op, Second):
        # y broadcast against x: the output's shape is both inputs' broadcast shape
        out = pt.broadcast_to(node.inputs[1], broadcast_shape(x, node.inputs[1]))
    else:
        return None
    return [pt.cast(out, node.outputs[0].dtype)]


#: The mode of functions compiled ``once`` or for the setup's data passes
#: (:meth:`SubsampledLikelihood.compile`): ``FAST_COMPILE`` — few rewrites and no C code, each
#: node a NumPy call — with n-ary sums and products made binary and softplus written in ufuncs
#: at the end, and float64 casts as products, so that each elementwise node is one ufunc call.
optdb.register("pymc_subsample_ufuncs",
               in2out(_binary_sums_and_products, _as_ufuncs, name="numpy_ufuncs"),
               "numpy_ufuncs", position=100)
# and a block's rows gathered as a slice's copy, a matrix times a vector as one product
# (model/numpy_pass_ops.py: a quarter of a logistic pass's time, d = 10)
optdb.register("pymc_subsample_rows", in2out(take_rows, matrix_vector, name="numpy_rows"),
               "numpy_rows", position=100.5)
# a mode by name, not by rewriter objects: functions compiled in it pickle (spawned workers,
# Dask clusters)
_NUMPY_MODE = get_mode("FAST_COMPILE").including("numpy_ufuncs", "numpy_rows")

#: The mode of small per-iteration functions (``ufuncs=True`` in
#: :meth:`SubsampledLikelihood.compile`): ``FAST_RUN``'s rewrites except the C-only ones
#: (fused loops, in-place ops, BLAS), each elementwise node a direct ufunc call
#: (:class:`~pymc_subsample.model.ufunc_linker.UfuncLinker`); no C code.
_UFUNC_MODE = Mode(linker=UFUNC_LINKER, optimizer=get_mode("FAST_RUN").excluding(
    "fusion", "inplace", "BlasOpt").including("numpy_ufuncs").provided_optimizer)

#: Largest ``N`` whose data passes run in :data:`_NUMPY_MODE`. A pass there costs about 3×
#: the compiled C one (0.27 s against 0.08 s on 10⁶ logistic rows, d = 10) but compiles in
#: 0.1 s instead of 5 s with an empty PyTensor cache (0.3 s warm): below this size the two
#: or three passes of a setup are cheaper than the compile, above it the fused C loops win.
NUMPY_PASS_ROWS = 500_000


def _runs_as_ufuncs(fn) -> bool:
    """Whether every elementwise node of a function compiled in :data:`_NUMPY_MODE` is one
    NumPy ufunc call (one that is not, a scalar op with no NumPy counterpart, is evaluated
    element by element in Python)."""
    for node in fn.maker.fgraph.apply_nodes:
        if isinstance(node.op, Elemwise):
            spec = node.op.nfunc_spec
            if spec is None or spec[1] != len(node.inputs):
                return False
    return True


class SubsampledLikelihood:
    """Per-row log-likelihood terms of a PyMC model, compiled once for any row index array.

    Parameters
    ----------
    model : pymc.Model
        A model whose observed variables share a leading data axis of length ``N``.
    vars : sequence of value variables, optional
        The variables a step samples; they must be all of the model's free variables.
    temperature : float
        ``K > 0``; the likelihood is divided by ``K`` (Seita et al. 2017, Sec. 6).
    compile_kwargs : dict, optional
        Passed to :func:`pymc.pytensorf.compile` (e.g. ``{"mode": "NUMBA"}``).

    Attributes
    ----------
    n_rows : int
        ``N``, the length of the data axis.
    dim : int
        ``d``, the length of the raveled parameter vector ``θ``.
    theta : TensorVariable
        The symbolic raveled parameter vector used by every graph below.
    idx : TensorVariable
        The symbolic int64 row index vector.
    terms : TensorVariable
        Symbolic ``ℓ_i(θ)/K`` for the rows in ``idx``, shape ``(len(idx),)``.
    logp0_graph : TensorVariable
        Symbolic ``log p0(θ)``.

    Notes
    -----
    ``N`` is the length of the observed variables' first axis; observed variables with
    trailing axes contribute the sum over those axes. Every data array in an observed
    variable's graph (``pm.Data`` containers, observed arrays, constants) with an axis of
    length ``N`` is indexed by row along that axis: the first one if it has length ``N``,
    else the only other one (``Xt`` of shape ``(d, N)``); several candidate axes are refused.

    Parameter-free expressions of the row data that do not commute with row indexing
    (``x - x.mean()``, ``X / X.std(0)``) are evaluated once here on the full data: changing
    their inputs with ``pm.set_data`` afterwards does not reach them (plain ``pm.Data``
    containers and row-wise expressions of them are read at every call).

    Models built with ``floatX="float32"`` compute in float32; ``θ`` stays float64 at the
    interface (cast inside the graphs) and the compiled functions accept float32 ``θ`` too.

    Examples
    --------
    >>> lik = SubsampledLikelihood(model)                      # doctest: +SKIP
    >>> lik.loglik_terms(lik.ravel(model.initial_point()), np.array([0, 5, 7]))  # doctest: +SKIP
    """

    def __init__(
        self,
        model: pm.Model,
        vars: Sequence[Variable] | None = None,
        temperature: float = 1.0,
        compile_kwargs: dict | None = None,
    ) -> None:
        if not np.isfinite(temperature) or temperature <= 0:
            raise ValueError(
                f"temperature must be a positive finite number; got {temperature!r}. "
                "Use temperature=1.0 for the true posterior."
            )
        self.model = model
        self.temperature = float(temperature)
        self.compile_kwargs = dict(compile_kwargs or {})
        self.value_vars = check_vars(model, vars)
        #: whether the model computes in float64 (a float32 model's callers, PyMC steps, hand
        #: over float32 θ, which the compiled functions must convert rather than trust)
        self.float64 = all(v.dtype == "float64" for v in self.value_vars)
        self._trust_input = self.float64
        #: hashes of the graphs' large constants, made once for this likelihood's functions
        #: (the function cache's check, :func:`compile_cached`)
        self._constant_digests: dict = {}
        check_free_variables(model)
        self.initial_point = model.initial_point()
        # the arrays the setup saw: pm.set_data replaces them (see check_data_unchanged)
        self._data_seen = {
            v: v.get_value(borrow=True) for v in model.data_vars if isinstance(v, SharedVariable)
        }
        self.n_rows = find_data_axis(model)
        check_latent_rows(self, model)

        self.idx = pt.vector("idx", dtype="int64")
        # data taken as having rows on an axis other than the first (named in setup errors)
        self._row_axes: dict[Variable, int] = {}
        #: row blocks of full-data passes run as tasks on a dask.distributed cluster
        self.cluster_blocks = 0
        # data passes sent to a cluster's workers, by (client, pass)
        self._scattered: dict[tuple[int, int], tuple[typing.Any, typing.Any]] = {}
        #: per pms.Data container in the likelihood, the graph input standing for its rows on
        #: ``idx`` and the source they are read from (:class:`GatheringFunction`)
        self.gathered: dict[Variable, tuple[Variable, RowSource]] = {}
        self.blocks = tuple(rebuild_on_index(self, rv) for rv in model.observed_RVs)
        row_terms = [row_logp(block) for block in self.blocks]
        self._block_terms = row_terms
        terms = row_terms[0]
        for extra in row_terms[1:]:
            terms = terms + extra
        if self.temperature != 1.0:
            terms = terms / self.temperature
        terms = pt.cast(terms, "float64")  # float64 at the interface whatever floatX

        logp0 = pt.cast(model.logp(vars=[*model.free_RVs, *model.potentials], sum=True), "float64")
        check_prior_free_of_data(self, logp0)
        self._ravel_info = [(v.name, self.initial_point[v.name].shape) for v in self.value_vars]
        self.dim = int(sum(np.prod(shape, dtype=int) for _, shape in self._ravel_info))
        self.theta = pt.vector("theta", shape=(self.dim,), dtype="float64")
        self._value_to_theta = {}
        start = 0
        for var, (_, shape) in zip(self.value_vars, self._ravel_info, strict=True):
            size = int(np.prod(shape, dtype=int))
            piece = self.theta[start : start + size].reshape(shape).astype(var.dtype)
            self._value_to_theta[var] = piece
            start += size
        #: ``log p0`` as a graph of the model's value variables (derivatives in a few of
        #: them: :func:`~pymc_subsample.model.levels.prior_derivatives`)
        self.logp0_values = logp0
        self.terms, self.logp0_graph = self.in_theta([terms, logp0])
        #: per observed variable (in :attr:`blocks` order), its untempered row terms on ``idx``
        #: as graphs of ``θ``
        self.block_terms = self.in_theta(row_terms)

        theta_new = self.theta.type("theta_new")
        self.theta_new = theta_new
        self.diff_graph = self.at(self.terms, theta_new) - self.terms
        check_rows_independent(self)

    @property
    def rows_in_memory(self) -> bool:
        """Whether every data container's rows are NumPy values (in RAM or memory-mapped), not
        chunks of Zarr or Dask read on demand."""
        return all(source.in_memory for _, source in self.gathered.values())

    def check_data_unchanged(self) -> None:
        """Refuse to sample after ``pm.set_data`` replaced data the setup was computed on.

        The reference point, the control variates' sums, the bounds' row constants and any
        data expression folded at setup all belong to the old data; sampling on would draw from
        neither posterior. The check is by identity of the arrays (``pm.set_data`` makes new
        ones), a few pointer comparisons per chain.
        """
        changed = [v.name for v, value in self._data_seen.items()
                   if v.get_value(borrow=True) is not value]
        if changed:
            raise SubsamplingModelError(
                f"The data {changed} changed (pm.set_data) after the subsampling step was "
                "built: its reference point, control-variate sums and bounds belong to the old "
                "data. Build the step again after pm.set_data, inside the model context."
            )

    # ------------------------------------------------------------------ compiled functions
    def compile(self, inputs: list[Variable], outputs, *, once: bool = False,
                setup: bool = False, ufuncs: bool = False, gil_free: bool = False,
                many_rows: bool = False):
        """Compile with PyMC's rewrites and this object's ``compile_kwargs``.

        Inputs are trusted (no conversion) unless the model is float32, where float32 ``θ``
        from a PyMC step is converted to the float64 ``θ`` of the graphs. Unless the user chose
        a mode, two kinds of function skip PyTensor's C compilation (:data:`_NUMPY_MODE`, each
        node a NumPy call: seconds saved with an empty compile cache, as on a first run):
        ``once=True``, functions called a handful of times at setup (checks), whose rewrites
        and compilation would cost more than the calls; and ``setup=True``, the data passes
        and the reference fit's prior, when ``N ≤`` :data:`NUMPY_PASS_ROWS` and every
        elementwise node is a ufunc (else compiled as usual). Per-iteration functions are
        compiled to C, without PyTensor's BLAS rewrites; ``ufuncs=True`` asks for a small one
        (the prior's ``log p0``) to run as NumPy calls instead (:data:`_UFUNC_MODE`), when
        every elementwise node is a ufunc: a few µs a call more, no C code to compile.
        ``gil_free=True``: a function a pass calls on its threads, in :data:`_NUMPY_MODE`
        whatever ``N`` when every elementwise node is a ufunc (NumPy's calls release the GIL,
        PyTensor's C code does not), else compiled to C. ``many_rows=True`` with ``once``: a
        check called a handful of times but on up to ``N`` rows, compiled as usual when an
        elementwise node has no ufunc (element by element in Python, an ordinal probit's normal
        log-CDF ops made reading its model 26 s of a 60 s setup at ``N = 10⁶``, 3 s compiled).
        """
        kwargs = dict(self.compile_kwargs)
        numpy_mode = "mode" not in kwargs and (
            once or gil_free or (setup and self.n_rows <= NUMPY_PASS_ROWS))
        # the package's own modes, named for the function cache (a user's: not cached)
        mode = None if kwargs else "numpy" if numpy_mode else "ufunc" if ufuncs else "c"
        if numpy_mode:
            kwargs["mode"] = _NUMPY_MODE
        elif ufuncs and "mode" not in kwargs:
            kwargs["mode"] = _UFUNC_MODE
        elif "mode" not in kwargs:
            # PyTensor's BLAS rewrites cost seconds on the derivative graphs of the control
            # variates (15 s of a 16 s compile for a Weibull regression's, d = 6) and gain
            # nothing on a few rows: products stay NumPy's dot (86 → 57 µs a call there)
            kwargs["mode"] = get_mode(None).excluding("BlasOpt")
        graphs = list(outputs) if isinstance(outputs, list | tuple) else [outputs]
        below = set(ancestors(graphs)) if self.gathered else set()
        gathered = [(rows, source) for rows, source in self.gathered.values() if rows in below]
        inputs_all = [*inputs, *(rows for rows, _ in gathered)]

        def build():
            return pm_compile(inputs_all, outputs, on_unused_input="ignore", **kwargs)

        fn = (build() if mode is None
              else compile_cached(inputs_all, outputs, mode, get_mode(kwargs["mode"]), build,
                                  self._constant_digests))
        if (((numpy_mode and (many_rows or not once)) or (ufuncs and not numpy_mode))
                and not _runs_as_ufuncs(fn)):
            return self.compile(inputs, outputs)
        if gathered:
            fn = GatheringFunction(fn, inputs.index(self.idx), [s for _, s in gathered],
                                   [rows.name for rows, _ in gathered],
                                   [rows.type.dtype for rows, _ in gathered])
        fn.trust_input = self._trust_input
        return fn

    def in_theta(self, graphs: list[Variable]) -> list[Variable]:
        """Graphs of the model's value variables rewritten as graphs of ``θ``."""
        return graph_replace(graphs, self._value_to_theta, strict=False)

    def at(self, graph, theta_value: Variable):
        """``graph`` with ``θ`` replaced by ``theta_value`` (a symbolic vector)."""
        return graph_replace(graph, {self.theta: theta_value}, strict=False)

    def loglik_terms(self, theta: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """``ℓ_i(θ)/K`` for the rows ``idx`` (int64 array); cost O(len(idx))."""
        return self._terms_fn(theta, idx)

    def loglik_diff(self, theta: np.ndarray, theta_new: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """``[ℓ_i(θ') − ℓ_i(θ)]/K`` for the rows ``idx``, in one call."""
        return self._diff_fn(theta, theta_new, idx)

    @cached_property
    def _terms_fn(self):
        # compiled on first use: the steps' setup passes and iterations have their own
        return self.compile([self.theta, self.idx], self.terms)

    @cached_property
    def _diff_fn(self):
        # compiled on first use: steps with control variates never need it
        return self.compile([self.theta, self.theta_new, self.idx], self.diff_graph)

    def logp0(self, theta: np.ndarray) -> float:
        """``log p0(θ)``: priors, transform Jacobians and potentials (the steps call it at
        every iteration: NumPy calls, or C code when an op has no ufunc)."""
        return float(self._logp0_fn(theta))

    def logp0_and_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """``log p0(θ)`` and its gradient, for the reference fit: a setup function of the
        priors alone, called a few dozen times whatever ``N``, so never compiled to C (at
        10⁶ rows it was: 8 C modules of a Student-t regression's cold build)."""
        value, gradient = self._logp0_and_grad_fn(theta)
        return float(value), np.asarray(gradient)

    def logp0_gradient(self, theta: np.ndarray) -> np.ndarray:
        """``∇ log p0(θ)`` alone, for the prior Hessian of a model with many levels by
        differences (:func:`~pymc_subsample.model.prior_hessian.level_prior_hessian`): thousands
        of calls in a funnel's marginal-mode search, so NumPy calls after ``FAST_RUN``'s
        rewrites (C code when an op has no ufunc), about a third of
        :meth:`logp0_and_grad`'s cost a call (0.8 against 2.1 ms on the crossed flights
        model's 3,590 coordinates)."""
        return np.asarray(self._logp0_gradient_fn(theta))

    @cached_property
    def _logp0_gradient_fn(self):
        return self.compile([self.theta], grad(self.logp0_graph, self.theta,
                                               disconnected_inputs="ignore"), ufuncs=True)

    @cached_property
    def _logp0_fn(self):
        return self.compile([self.theta], self.logp0_graph, ufuncs=True)

    @cached_property
    def _logp0_and_grad_fn(self):
        # a flat prior has no θ in its graph: its gradient is zero, not an error
        gradient = grad(self.logp0_graph, self.theta, disconnected_inputs="ignore")
        return self.compile([self.theta], [self.logp0_graph, gradient], once=True)

    def full_loglik(self, theta: np.ndarray) -> float:
        """``Σ_i ℓ_i(θ)/K`` over all N rows (setup and fallback use only; O(N))."""
        return self.sum_over_rows(lambda idx: self.loglik_terms(theta, idx))

    def sum_over_rows(self, row_values: Callable[[np.ndarray], np.ndarray]) -> float:
        """``Σ_i`` of per-row values over all N rows, computed chunk by chunk (O(N)).

        ``row_values(idx)`` returns the values of the rows ``idx``; no N-sized array is formed.
        The one full-data scalar sum of the package: setup checks, the steps' exact fallbacks.
        """
        return float(sum(np.sum(row_values(idx)) for idx in self.row_chunks()))


    def map_row_blocks(
        self, data_pass, *args, chunks: typing.Iterable[np.ndarray] | None = None,
        first_alone: bool = False,
    ) -> typing.Iterator[tuple[np.ndarray, typing.Any]]:
        """``(idx, data_pass.block(idx, *args))`` for ``idx`` in :meth:`row_chunks`, in order:
        locally, over the index arrays ``chunks`` when given, or block by block on a
        ``dask.distributed`` cluster (:func:`pymc_subsample.model.cluster.map_row_blocks`,
        ``first_alone`` too; ``data_pass`` is a :class:`~pymc_subsample.model.passes.DataPass`)."""
        return map_row_blocks(self, data_pass, *args, chunks=chunks, first_alone=first_alone)

    def row_chunks(self, chunk_rows: int = SETUP_CHUNK_ROWS):
        """Yield consecutive int64 index arrays covering all N rows."""
        for start in range(0, self.n_rows, chunk_rows):
            yield np.arange(start, min(start + chunk_rows, self.n_rows), dtype=np.int64)

    #: the value variables a step samples (all of the model's; refused otherwise)
    check_vars = staticmethod(check_vars)

    # ------------------------------------------------------------------ raveling
    def ravel(self, point: dict[str, np.ndarray]) -> np.ndarray:
        """Concatenate a point's sampled values into ``θ`` (the order PyMC uses)."""
        return np.concatenate([np.ravel(point[name]) for name, _ in self._ravel_info]).astype(
            np.float64
        )

    def unravel(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """Split ``θ`` back into a dict of value-variable arrays."""
        out, start = {}, 0
        for name, shape in self._ravel_info:
            size = int(np.prod(shape))
            out[name] = theta[start : start + size].reshape(shape)
            start += size
        return out


