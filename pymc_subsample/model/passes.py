"""The passes over the data: the sums the reference point and the control variates need
(``Σ ℓ_i``, ``Σ ∇ℓ_i``, ``Σ ∇²ℓ_i`` at ``θ``) and, for the families MHSS bounds, the row
constants ``c_i`` in the same pass.

Three passes share one interface, :class:`~pymc_subsample.model.data_pass.DataPass`:
:class:`~pymc_subsample.model.glm_pass.GLMPass` (one affine or quadratic predictor a row, the
family's closed-form derivatives and NumPy's BLAS), its subclass
:class:`~pymc_subsample.model.location_scale_pass.LocationScalePass` (a location, a log-scale
and further predictors a row) and :class:`~pymc_subsample.model.generic_pass.GenericPass` (any
model, by autodiff), each in a module of its own. Each runs its ``block`` over the rows through
:meth:`~pymc_subsample.model.likelihood.SubsampledLikelihood.map_row_blocks`: on a pool of
threads (each its own :meth:`~pymc_subsample.model.data_pass.DataPass.thread_copy`), or as
tasks on a ``dask.distributed`` cluster (:mod:`pymc_subsample.model.cluster`). This module
gathers them under one name.
"""

from pymc_subsample.model.data_pass import DataPass, PassResult
from pymc_subsample.model.generic_pass import GenericPass
from pymc_subsample.model.glm_pass import QUADRATIC_MAX_DIM, GLMPass, glm_bound_constants
from pymc_subsample.model.location_scale_pass import LocationScalePass

__all__ = [
    "DataPass",
    "GLMPass",
    "GenericPass",
    "LocationScalePass",
    "PassResult",
    "QUADRATIC_MAX_DIM",
    "glm_bound_constants",
]
