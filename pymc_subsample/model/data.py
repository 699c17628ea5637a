"""``pms.Data``: tall data that the steps read a few rows at a time, from memory, disk or Dask.

:func:`Data` is a drop-in for :func:`pymc.Data` for tall data. It accepts

- a NumPy array (kept as it is, never copied);
- a memory-mapped ``.npy`` (``np.load(path, mmap_mode="r")``) or the path of one: the
  operating system pages rows in as they are read, and a process sampling another chain opens
  the file again instead of receiving a copy;
- a Zarr array (``zarr.open_array(path)``): read chunk by chunk;
- a Dask array: its chunks computed with ``dask.compute``.

and ties its rows to a :class:`~pymc_subsample.model.row_sources.RowSource`, which reads them
(:mod:`pymc_subsample.model.row_sources`). The likelihood
layer (:mod:`pymc_subsample.model.likelihood`) gathers the rows of every ``Data`` container outside
the compiled PyTensor functions and hands them over as inputs, so the same rows give the same
numbers whatever the source.

The model's own graph holds, for NumPy and memory-mapped sources, the array itself (so the
model also runs under NUTS and ``compare()``), and for Zarr and Dask sources a stand-in of
the right shape that is all NaN (floats) or the smallest integer (integers) and takes no
memory: PyMC's NUTS on such a model fails at its first log-density evaluation instead of
sampling a wrong posterior.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import xarray as xr
from arviz.data.base import dict_to_dataset, make_attrs
from pymc.backends.arviz import InferenceDataConverter
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.traversal import graph_inputs
from pytensor.tensor.sharedvar import TensorSharedVariable
from pytensor.tensor.type import TensorType

from pymc_subsample.model.row_sources import RowSource, as_row_source

__all__ = ["Data", "row_source_of", "to_inference_data"]

class _RowArray(np.ndarray):
    """The value a :func:`Data` container holds: the source's array, tied to its source.

    It does not copy on ``copy.deepcopy`` (a copied model shares the rows) and pickles as its
    source (a memory-mapped file as its path). Anything computed from it is a plain ndarray.
    """

    _source: RowSource | None = None

    def __array_finalize__(self, obj) -> None:
        self._source = None  # a view or slice is not the whole source

    def __array_wrap__(self, arr, context=None, return_scalar=False):
        arr = np.asarray(arr).view(np.ndarray)
        return arr[()] if return_scalar else arr

    def __deepcopy__(self, memo):
        return self if self._source is not None else np.array(self)

    def __reduce__(self):
        if self._source is None:
            return np.asarray(self).view(np.ndarray).__reduce__()
        return (_row_array, (self._source,))


def _row_array(source: RowSource) -> _RowArray:
    out = source.graph_value().view(_RowArray)
    out._source = source
    return out


class RowDataVariable(TensorSharedVariable):
    """The shared variable of a :func:`Data` container.

    ``get_value()`` (what PyMC stores as the InferenceData's observed data) returns the data
    without copying them: a Dask array over them (lazy) when Dask is installed, else the NumPy
    or memory-mapped array itself; never the stand-in the graph holds for Zarr and Dask
    sources. ``get_value(borrow=True)`` is what the graph holds.
    """

    def get_value(self, borrow: bool = False, return_internal_type: bool = False):
        value = self.container.storage[0]
        if isinstance(value, _RowArray) and value._source is not None and not borrow:
            return value._source.user_value()
        return super().get_value(borrow=borrow, return_internal_type=return_internal_type)


def row_source_of(var) -> RowSource | None:
    """The :class:`RowSource` behind a data container made by :func:`Data`, else None."""
    if not isinstance(var, SharedVariable):
        return None
    value = var.container.storage[0]
    return value._source if isinstance(value, _RowArray) else None


def Data(name: str, value, dims=None, model: pm.Model | None = None) -> SharedVariable:
    """A data container for tall data, read a few rows at a time (drop-in for ``pm.Data``).

    Parameters
    ----------
    name : str
        Name of the container in the model.
    value : array_like, str or path
        A NumPy array, a memory-mapped ``.npy`` or its path, a Zarr array (or the path of a
        Zarr store), or a Dask array. Rows run along the first axis. It is never loaded whole
        nor copied.
    dims : str or sequence of str, optional
        Names of its axes, added to the model's coordinates (lengths only) so that the
        model's variables can use them.
    model : pymc.Model, optional
        The model (default: the one in context).

    Returns
    -------
    SharedVariable
        A PyTensor shared variable usable wherever ``pm.Data`` is (``observed=`` included).

    Notes
    -----
    The container is not stored in the InferenceData's ``constant_data`` (PyMC would add an
    index coordinate of N integers for each of its axes), and ``pm.set_data`` does not reach
    it: build a new model for new data. Used as ``observed=``, it is in ``observed_data``
    like any observation, lazily (PyMC adds an N-long index; :func:`to_inference_data` does
    not). Store it in the distribution's own dtype, int64 for counts and 0/1 outcomes, or
    PyMC copies it to cast it. NaN and infinite
    entries are refused when a subsampling step is built (checked block by block). Models on
    NumPy and memory-mapped sources also run under NUTS; on Zarr and Dask sources only the
    subsampling steps can read the rows (NUTS fails at its first evaluation, never silently).
    """
    model = pm.modelcontext(model)
    source = as_row_source(value)
    if len(source.shape) == 0:
        raise ValueError(f"pms.Data '{name}' is a scalar; tall data need a row axis")
    ndim = len(source.shape)
    # built on an empty array, then given the tied value: PyTensor's filter would make a
    # plain ndarray of it (and materialise a stand-in)
    var = RowDataVariable(
        type=TensorType(dtype=str(source.dtype), shape=(None,) * ndim),
        value=np.zeros((0,) * ndim, dtype=source.dtype),
        strict=False,
        name=model.name_for(name),
    )
    var.container.storage[0] = _row_array(source)
    static = source.shape
    if isinstance(dims, str):
        dims = (dims,)
    if dims is not None:
        if len(dims) != len(static):
            raise ValueError(
                f"pms.Data '{name}' has {len(static)} axes but dims {tuple(dims)} name "
                f"{len(dims)}"
            )
        for axis, dim in enumerate(dims):
            if dim is not None and dim not in model.dim_lengths:
                model.add_coord(dim, length=static[axis])
    # not one of the model's data_vars: PyMC would store it in the InferenceData's
    # constant_data with an index coordinate of N integers per axis
    return var


def _row_data_observations(model: pm.Model) -> set[str]:
    """Names of the observed variables whose observations are :func:`Data` containers."""
    return {
        rv.name for rv in model.observed_RVs
        if any(row_source_of(v) is not None for v in graph_inputs([model.rvs_to_values[rv]]))
    }


def to_inference_data(trace, *, model: pm.Model | None = None, **kwargs):
    """:func:`pymc.to_inference_data`, storing :func:`Data` observations without an index.

    ArviZ gives every observed axis an index of N integers (``np.arange``), which pandas and
    xarray copy on the way: at N = 1e8 this took the peak memory of a whole MHSS run from
    0.79 to 2.16 GiB (``benchmarks/tall_data.py``). Here observations held in :func:`Data`
    containers keep their dimension names but get no index coordinate (xarray allows a
    dimension without one), and their values stay lazy (a Dask array over the source when
    Dask is installed, else the array itself). Every other group is PyMC's.

    Parameters
    ----------
    trace : pymc.backends.base.MultiTrace
        What ``pm.sample(..., return_inferencedata=False, compute_convergence_checks=False)``
        returns (the convergence checks would build PyMC's InferenceData first).
    model : pymc.Model, optional
        The model (default: the one in context).
    **kwargs
        Passed to PyMC's converter (``log_likelihood``, ``coords``, ``dims``, ...).

    Returns
    -------
    arviz.InferenceData
    """
    return _RowDataConverter(trace=trace, model=model, **kwargs).to_inference_data()


class _RowDataConverter(InferenceDataConverter):
    """PyMC's converter, except that observations of :func:`Data` containers get no index."""

    def observed_data_to_xarray(self):
        if self.predictions or not self.observations:
            return None
        tall = _row_data_observations(self.model) & self.observations.keys()
        rest = {k: v for k, v in self.observations.items() if k not in tall}
        dataset = (
            dict_to_dataset(rest, library=pm, coords=self.coords, dims=self.dims, default_dims=[])
            if rest else xr.Dataset(attrs=make_attrs(library=pm))
        )
        for name in sorted(tall):
            value = self.observations[name]
            named = list(self.dims.get(name) or ())
            dims = [
                named[i] if i < len(named) and named[i] is not None else f"{name}_dim_{i}"
                for i in range(np.ndim(value))
            ]
            coords = {d: np.asarray(self.coords[d]) for d in dims if d in self.coords}
            dataset[name] = xr.DataArray(value, dims=dims, coords=coords)
        return dataset
