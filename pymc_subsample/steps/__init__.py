"""PyMC step methods: thin wrappers that wire a model to the pure acceptance kernels.

What a step reads off its model is built by :mod:`pymc_subsample.model.setup`; each class here
adds one ``_decide`` (a kernel call) and its stats.
"""

from pymc_subsample.steps.austerity import AusterityMH
from pymc_subsample.steps.barker import BarkerMinibatch
from pymc_subsample.steps.base import SubsamplingStep
from pymc_subsample.steps.mhss import MHSS, UserBound

__all__ = ["MHSS", "AusterityMH", "BarkerMinibatch", "SubsamplingStep", "UserBound"]
