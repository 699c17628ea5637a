"""PyMC step methods: thin wrappers that wire a model to the pure acceptance kernels."""

from pymc_subsample.steps.austerity import AusterityMH
from pymc_subsample.steps.barker import BarkerMinibatch
from pymc_subsample.steps.base import SubsamplingStep
from pymc_subsample.steps.mhss import MHSS, UserBound

__all__ = ["MHSS", "AusterityMH", "BarkerMinibatch", "SubsamplingStep", "UserBound"]
