"""The subsampled likelihood: a PyMC model split into per-row terms and everything else.

For data ``x_1..x_N`` that are independent given the parameters, the model's log density is

    log π(θ) = log p0(θ) + (1/K) Σ_i ℓ_i(θ)

where ``θ`` is the raveled vector of the sampled (transformed) value variables, ``ℓ_i`` is row
``i``'s log-likelihood summed over every observed variable, ``K`` the temperature and
``log p0`` every other term (priors, Jacobians of transforms, potentials). See
``ALGORITHMS.md`` §0 of the project and Prado, Nemeth & Sherlock (2024), Sec. 2.

:class:`SubsampledLikelihood` finds the data axis in a PyMC model and compiles, once, PyTensor
functions of ``(θ, idx)`` whose cost is proportional to ``len(idx)``: the observed variables'
nodes are rebuilt with every data container indexed by ``idx`` (the original nodes carry the
static size ``N``, so slicing the model's own logp graph would not work).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.pytensorf import compile as pm_compile
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Variable
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.op import RandomVariable
from pytensor.tensor.random.type import RandomType
from pytensor.tensor.type_other import NoneTypeT
from pytensor.tensor.variable import TensorConstant

from pymc_subsample.errors import SubsamplingModelError

__all__ = ["SubsampledLikelihood", "ObservedBlock"]

#: Rows per chunk when a setup pass touches all N rows (bounds peak memory).
SETUP_CHUNK_ROWS = 65_536


@dataclass(frozen=True)
class ObservedBlock:
    """One observed variable rebuilt on a row index.

    Attributes
    ----------
    name : str
        The observed variable's name.
    rv : Variable
        The rebuilt random variable whose data inputs are indexed by ``idx``.
    value : Variable
        Its observed value, indexed by ``idx``.
    data : tuple of Variable
        The model's data containers (``pm.Data`` or constants) that carry the row axis.
    """

    name: str
    rv: Variable
    value: Variable
    data: tuple[Variable, ...]


def _leaf_value(var: Variable) -> np.ndarray:
    if isinstance(var, SharedVariable):
        return var.get_value(borrow=True)
    return var.data


def _is_data_leaf(var: Variable) -> bool:
    return (
        var.owner is None
        and isinstance(var, SharedVariable | TensorConstant)
        and not isinstance(var.type, RandomType)
        and getattr(var.type, "ndim", 0) >= 1
    )


def _data_name(var: Variable) -> str:
    return var.name if var.name else f"an unnamed constant of shape {_leaf_value(var).shape}"


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
    Every array in an observed variable's graph whose first axis has length ``N`` is taken to
    be indexed by row (``pm.Data`` containers, observed arrays, constants). Rows run along the
    first axis; observed variables with trailing axes contribute the sum over those axes.

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
        self.value_vars = self._check_vars(model, vars)
        self._check_free_variables(model)
        self.initial_point = model.initial_point()
        self.n_rows = self._find_data_axis(model)
        self._check_latent_rows(model)

        self.idx = pt.vector("idx", dtype="int64")
        self.blocks = tuple(self._rebuild_on_index(rv) for rv in model.observed_RVs)
        row_terms = [self._row_logp(block) for block in self.blocks]
        terms = row_terms[0]
        for extra in row_terms[1:]:
            terms = terms + extra
        if self.temperature != 1.0:
            terms = terms / self.temperature

        logp0 = model.logp(vars=[*model.free_RVs, *model.potentials], sum=True)
        self._check_prior_free_of_data(logp0)
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
        self.terms, self.logp0_graph = self.in_theta([terms, logp0])

        self._terms_fn = self.compile([self.theta, self.idx], self.terms)
        self._logp0_fn = self.compile([self.theta], self.logp0_graph)
        theta_new = self.theta.type("theta_new")
        self.theta_new = theta_new
        self.diff_graph = self.at(self.terms, theta_new) - self.terms
        self._check_against_model()

    # ------------------------------------------------------------------ compiled functions
    def compile(self, inputs: list[Variable], outputs):
        """Compile with PyMC's rewrites and this object's ``compile_kwargs``; trusts inputs."""
        fn = pm_compile(inputs, outputs, on_unused_input="ignore", **self.compile_kwargs)
        fn.trust_input = True
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
    def _diff_fn(self):
        # compiled on first use: steps with control variates never need it
        return self.compile([self.theta, self.theta_new, self.idx], self.diff_graph)

    def logp0(self, theta: np.ndarray) -> float:
        """``log p0(θ)``: priors, transform Jacobians and potentials."""
        return float(self._logp0_fn(theta))

    def full_loglik(self, theta: np.ndarray) -> float:
        """``Σ_i ℓ_i(θ)/K`` over all N rows (setup and fallback use only; O(N))."""
        return float(sum(self.loglik_terms(theta, chunk).sum() for chunk in self.row_chunks()))

    def row_chunks(self, chunk_rows: int = SETUP_CHUNK_ROWS):
        """Yield consecutive int64 index arrays covering all N rows."""
        for start in range(0, self.n_rows, chunk_rows):
            yield np.arange(start, min(start + chunk_rows, self.n_rows), dtype=np.int64)

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

    # ------------------------------------------------------------------ model analysis
    @staticmethod
    def _check_vars(model: pm.Model, vars) -> list[Variable]:
        all_vars = list(model.value_vars)
        if vars is None:
            return all_vars
        vars = list(vars)
        names = {v.name for v in vars}
        missing = [v.name for v in all_vars if v.name not in names]
        if missing:
            raise SubsamplingModelError(
                f"A subsampling step must sample every free variable of the model together, but "
                f"{missing} would be left to another step. Pass no `vars` (or all of them): the "
                "control variates and bounds are only valid when all parameters move together."
            )
        return [v for v in all_vars if v.name in names]

    @staticmethod
    def _check_free_variables(model: pm.Model) -> None:
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
                    f"Free variable '{rv.name}' is discrete. Subsampling steps propose continuous "
                    "random-walk moves: marginalise it out, or assign it to another step "
                    "(e.g. pm.CategoricalGibbsMetropolis) and sample the model without "
                    "pymc-subsample."
                )

    def _find_data_axis(self, model: pm.Model) -> int:
        if not model.observed_RVs:
            raise SubsamplingModelError(
                "The model has no observed variables, so there is no data to subsample. "
                "Use pm.sample() with NUTS."
            )
        lengths = {}
        for rv in model.observed_RVs:
            value = model.rvs_to_values[rv]
            shape = tuple(value.shape.eval()) if value.owner is not None else _leaf_value(
                value
            ).shape
            if len(shape) == 0:
                raise SubsamplingModelError(
                    f"Observed variable '{rv.name}' is a scalar; subsampling needs a data axis. "
                    "Give every observed variable one row per data point."
                )
            lengths[rv.name] = int(shape[0])
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

    def _check_latent_rows(self, model: pm.Model) -> None:
        if self.n_rows < 2:
            return
        for rv in model.free_RVs:
            shape = self.initial_point[model.rvs_to_values[rv].name].shape
            if self.n_rows in shape:
                raise SubsamplingModelError(
                    f"Free variable '{rv.name}' has shape {shape}, one entry per data row "
                    f"(N = {self.n_rows}): a per-row latent variable. Subsampling needs the "
                    "likelihood to be a sum over rows given global parameters: marginalise "
                    f"'{rv.name}' out of the likelihood, or sample this model with NUTS."
                )

    def _rebuild_on_index(self, rv: Variable) -> ObservedBlock:
        model = self.model
        node = rv.owner
        op = node.op
        if not isinstance(op, RandomVariable):
            raise SubsamplingModelError(
                f"Observed variable '{rv.name}' uses {type(op).__name__}, which pymc-subsample "
                "cannot rebuild on a row index (basic random variables such as Normal, "
                "Bernoulli, Poisson, StudentT and pm.CustomDist with a logp are supported; "
                "mixtures, censored and truncated distributions are not yet). Write its per-row "
                "log density with pm.CustomDist(..., logp=...), or sample with NUTS."
            )
        size = op.size_param(node)
        params = model.replace_rvs_by_values(op.dist_params(node))
        value = model.rvs_to_values[rv]
        if op.ndim_supp >= value.type.ndim:
            raise SubsamplingModelError(
                f"Observed variable '{rv.name}' is a single {type(op).__name__} draw over the "
                "whole data axis, so its log-likelihood is not a sum over rows. Subsampling "
                "needs independent rows: give it one draw per row (rows on the first axis), "
                "or sample with NUTS."
            )
        leaves = [v for v in ancestors([*params, value]) if _is_data_leaf(v)]
        data = [v for v in leaves if _leaf_value(v).shape[0] == self.n_rows]
        for var in data:
            arr = _leaf_value(var)
            if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
                where = "observed values" if var is value else "data"
                raise SubsamplingModelError(
                    f"The {where} '{_data_name(var)}' used by observed variable '{rv.name}' "
                    "contain NaN or infinite entries. Drop or impute those rows before building "
                    "the model."
                )
        repl = {var: var[self.idx] for var in data}
        new_params = graph_replace(params, repl, strict=False) if repl else params
        if value in repl:
            new_value = repl[value]
        else:
            new_value = graph_replace([value], repl, strict=False)[0] if repl else value
        if isinstance(size.type, NoneTypeT):
            new_size = size
        else:
            new_size = pt.concatenate([self.idx.shape[:1], size[1:]])
        new_rv = op.make_node(op.rng_param(node), new_size, *new_params).default_output()
        return ObservedBlock(rv.name, new_rv, new_value, tuple(data))

    def _row_logp(self, block: ObservedBlock):
        logp = pm.logp(block.rv, block.value)
        if logp.ndim == 0:
            raise SubsamplingModelError(
                f"The log-likelihood of observed variable '{block.name}' is a single joint term "
                "over all rows (e.g. a multivariate distribution across the data axis), not a sum "
                "over rows. Subsampling needs independent rows: reshape it so each row is one "
                "draw, or sample with NUTS."
            )
        if logp.ndim > 1:
            logp = logp.sum(axis=tuple(range(1, logp.ndim)))
        return logp

    def _check_prior_free_of_data(self, logp0) -> None:
        rows = [
            v
            for v in ancestors([logp0])
            if _is_data_leaf(v) and _leaf_value(v).shape[0] == self.n_rows and self.n_rows > 1
        ]
        if rows:
            raise SubsamplingModelError(
                f"A term outside the observed variables (a pm.Potential or a prior) uses the "
                f"row data '{_data_name(rows[0])}'. Subsampling can only see per-row terms of "
                "observed variables: express that term as an observed variable, or sample with "
                "NUTS."
            )

    def _check_against_model(self) -> None:
        """Our per-row terms must add up to the model's own observed logp (a setup check)."""
        theta0 = self.ravel(self.initial_point)
        ours = self.full_loglik(theta0) * self.temperature
        ref_fn = self.model.compile_logp(vars=self.model.observed_RVs, sum=True, jacobian=False)
        ref = float(ref_fn(self.initial_point))
        if np.isfinite(ref) and not np.isclose(ours, ref, rtol=1e-8, atol=1e-6 * self.n_rows):
            raise SubsamplingModelError(
                f"The per-row log-likelihood terms sum to {ours:.6g} but the model's observed "
                f"log-likelihood is {ref:.6g} for the observed variables "
                f"{[b.name for b in self.blocks]}: the likelihood is not a sum over rows along "
                "the first axis (for example, data stored with rows on another axis). Put one "
                "row per data point on the first axis, or sample with NUTS."
            )

