"""pymc-subsample: subsampling Metropolis–Hastings step methods for PyMC on tall data.

.. code-block:: python

    import pymc as pm
    import pymc_subsample as pms

    with model:
        idata = pm.sample(step=pms.MHSS(cv_order=2))
"""

import warnings as _warnings

# ArviZ announces its coming refactor on import, once a day, as a FutureWarning that concerns
# nothing this package's users call. Only that notice is filtered (by message, category and the
# module that raises it); it has to be before the imports below, which import ArviZ.
_warnings.filterwarnings("ignore", message=r"\s*ArviZ is undergoing a major refactor",
                         category=FutureWarning, module="arviz")

from pymc_subsample.compare import Comparison, compare
from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.model.data import Data, to_inference_data
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.steps import (
    MHSS,
    AusterityMH,
    BarkerMinibatch,
    SubsamplingStep,
    UserBound,
)

__all__ = [
    "MHSS",
    "AusterityMH",
    "BarkerMinibatch",
    "Comparison",
    "Data",
    "SubsampledLikelihood",
    "SubsamplingModelError",
    "SubsamplingStep",
    "UserBound",
    "compare",
    "to_inference_data",
]
__version__ = "0.1.0"
